"""The batched service-time model of one GPU stream (spec v2 §5, DESIGN.md Latency model).

A batch ``B`` of requests (each with ``n`` computed history tokens, context
``L``, ``M`` candidates, EMB ``lookup_bytes`` and ``miss_bytes``) takes

    T(B) = t_launch_s + n_req·t_request_s
         + max(weight_read_s, dense_s_per_token·(X + mfu_half_tokens) + attn_s_per_pair·P)
         + lookup_bytes/hbm_bw_Bps
         + [miss_bytes > 0]·h2d_latency_s + Σ_i miss_bytes_i/(h2d_bw_Bps·share_i)
         + miss_bytes/host_gather_Bps

with ``X = Σ (n_i + M_i)`` and ``P = Σ [n_i·L_i − n_i(n_i − 1)/2 + M_i·L_i]``.
The compiled :func:`helm_plan.latency.kernel.batch_time_s` is its one implementation:
the simulators call it per batch and ``LatencyModel.batch_time_s`` over arrays.
``batch_terms_s`` splits T into its six terms for reports (they sum to T to 1e-12, tested).

Attribution of a batch's terms to its requests (``terms_s`` with ``batch``):
terms that are sums of per-request parts (``request``, ``emb_hbm``,
``host_gather`` and the link part of ``h2d``) go to the request that caused
them; terms paid once per batch (``launch``, ``compute`` — the max() is not
separable — and the H2D latency inside ``h2d``) are split evenly over the
batch's requests. Any split that sums to ``T(B)`` gives the same mean per
request, which is what the report shows; the even split only decides how the
per-request values spread around it.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from helm_plan.errors import ConfigError, ProfileError
from helm_plan.latency import kernel
from helm_plan.latency.kernel import COEFFS
from helm_plan.latency.roofline import derive_profile
from helm_plan.profiles import (
    GpuProfile,
    LatencyProfile,
    ModelProfile,
    available,
    default_latency_name,
    load_latency,
)

TERMS = ("launch", "request", "compute", "emb_hbm", "h2d", "host_gather")
"""Names of the per-term breakdown returned by ``LatencyModel.terms_s`` (they sum to T)."""

V1_KEYS = ("t0_s", "prefill_a_s", "prefill_b_s", "score_c_s", "score_d_s", "host_gather_s")
"""Coefficients of the retired per-request latency profile (v1)."""


def attention_pairs(n: Any, L: Any, M: Any) -> np.ndarray:
    """Causal pairs of computing the last ``n`` of ``L`` context tokens, plus ``M·L`` candidate pairs.

    Token ``j`` of the ``n`` new ones (0-based) sees ``L − n + j + 1`` keys, so
    the sum is ``n·L − n(n − 1)/2``; a full prefill (``n = L``) gives ``L(L + 1)/2``.
    """
    n = np.asarray(n, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    return kernel.attention_pairs.py_func(n, L, M)  # the kernel's formula, run by numpy


@dataclass(frozen=True)
class LatencyModel:
    """Resolved coefficients of the batch formula, SI units, fields in ``COEFFS`` order."""

    t_launch_s: float
    """Kernel launches of one forward pass, once per batch, seconds."""
    t_request_s: float
    """Host/runtime overhead per request, seconds."""
    weight_read_s: float
    """Dense weights streamed from HBM once per batch (memory-bound floor of the compute), seconds."""
    dense_s_per_token: float
    """Dense-stack time per token at full efficiency, seconds."""
    mfu_half_tokens: float
    """Tokens at which the dense efficiency X/(X + h) is one half, tokens."""
    attn_s_per_pair: float
    """Attention time per (query, key) pair, seconds."""
    hbm_bw_Bps: float
    """EMB gather bandwidth in device memory, bytes per second."""
    h2d_bw_Bps: float
    """Host-to-device copy bandwidth, bytes per second."""
    h2d_latency_s: float
    """Fixed latency of one H2D transfer (one per batch with misses), seconds."""
    host_gather_Bps: float
    """Host DRAM gather bandwidth for missed rows, bytes per second."""

    def __post_init__(self) -> None:
        names = tuple(f.name for f in fields(self))
        assert names == COEFFS, "LatencyModel fields must follow kernel.COEFFS"
        for k in names:
            v = getattr(self, k)
            if isinstance(v, bool) or not (
                isinstance(v, int | float) and math.isfinite(v) and v >= 0
            ):
                raise ProfileError(
                    f"latency model: {k} must be finite and >= 0, got {v!r}",
                    hint="give finite, non-negative values",
                )
        for k in ("hbm_bw_Bps", "h2d_bw_Bps", "host_gather_Bps"):
            if not getattr(self, k) > 0:
                raise ProfileError(
                    f"latency model: {k} must be positive, got {getattr(self, k)}",
                    hint=f"set {k} > 0 in the GPU or latency profile",
                )

    @property
    def coeffs(self) -> np.ndarray:
        """The coefficients as a new float64 array in ``kernel.COEFFS`` order (the kernel's ``c``)."""
        return np.array([getattr(self, k) for k in COEFFS], dtype=np.float64)

    def batch_time_s(
        self,
        n_req: Any,
        tokens: Any,
        pairs: Any,
        lookup_bytes: Any,
        miss_bytes: Any,
        miss_bytes_over_share: Any,
    ) -> np.ndarray:
        """T(B) in seconds from batch sums (arrays broadcast), by the compiled kernel itself."""
        args = np.broadcast_arrays(
            *(
                np.asarray(x, dtype=np.float64)
                for x in (n_req, tokens, pairs, lookup_bytes, miss_bytes, miss_bytes_over_share)
            )
        )
        shape = args[0].shape
        flat = [np.ascontiguousarray(a).ravel() for a in args]
        out = kernel.batch_times_s(self.coeffs, *flat, np.empty(flat[0].size))
        # numpy arithmetic on 0-d inputs gives a scalar, and callers have always had one back
        return out.reshape(shape) if shape else out[0]

    def batch_terms_s(
        self,
        n_req: Any,
        tokens: Any,
        pairs: Any,
        lookup_bytes: Any,
        miss_bytes: Any,
        miss_bytes_over_share: Any,
    ) -> dict[str, np.ndarray]:
        """The six terms of T(B) per batch (``TERMS``), seconds; they sum to ``batch_time_s``."""
        n_req, tokens, pairs, look, miss, mos = (
            np.asarray(x, dtype=np.float64)
            for x in (n_req, tokens, pairs, lookup_bytes, miss_bytes, miss_bytes_over_share)
        )
        shape = np.broadcast_shapes(
            n_req.shape, tokens.shape, pairs.shape, look.shape, miss.shape, mos.shape
        )
        compute = np.maximum(
            self.dense_s_per_token * (tokens + self.mfu_half_tokens) + self.attn_s_per_pair * pairs,
            self.weight_read_s,
        )
        out = {
            "launch": np.full(shape, self.t_launch_s),
            "request": n_req * self.t_request_s,
            "compute": compute,
            "emb_hbm": look / self.hbm_bw_Bps,
            "h2d": np.where(miss > 0, self.h2d_latency_s, 0.0) + mos / self.h2d_bw_Bps,
            "host_gather": miss / self.host_gather_Bps,
        }
        return {k: np.broadcast_to(v, shape).astype(np.float64) for k, v in out.items()}

    def service_time_s(
        self,
        n_computed: Any,
        ctx_len: Any,
        n_cand: Any,
        lookup_bytes: Any,
        miss_bytes: Any,
        h2d_share: Any = 1.0,
    ) -> np.ndarray:
        """Per-request service time in seconds, each request served as a batch of one."""
        r = _requests(n_computed, ctx_len, n_cand, lookup_bytes, miss_bytes, h2d_share)
        return self.batch_time_s(
            1.0, r["n"] + r["M"], attention_pairs(r["n"], r["L"], r["M"]),
            r["lookup"], r["miss"], r["miss"] / r["share"],
        )  # fmt: skip

    def terms_s(
        self,
        n_computed: Any,
        ctx_len: Any,
        n_cand: Any,
        lookup_bytes: Any,
        miss_bytes: Any,
        h2d_share: Any = 1.0,
        batch: Any = None,
    ) -> dict[str, np.ndarray]:
        """Per-request terms (``TERMS``) in seconds; each request's terms sum to its share of T.

        ``batch`` labels each request with its batch (requests with one label
        were served together); None serves each request alone, so the terms
        sum to ``service_time_s``. See the module docstring for how a batch's
        terms are attributed.
        """
        r = _requests(n_computed, ctx_len, n_cand, lookup_bytes, miss_bytes, h2d_share)
        if batch is None:
            return self.batch_terms_s(
                1.0, r["n"] + r["M"], attention_pairs(r["n"], r["L"], r["M"]),
                r["lookup"], r["miss"], r["miss"] / r["share"],
            )  # fmt: skip
        r = {k: v.ravel() for k, v in r.items()}
        labels = np.asarray(batch).ravel()
        if labels.shape != r["n"].shape:
            raise ConfigError(
                f"batch has {labels.size} labels for {r['n'].size} requests",
                hint="pass one batch label per request",
            )
        sums, inv = batch_sums(r["n"], r["L"], r["M"], r["lookup"], r["miss"], r["share"], labels)
        bt = self.batch_terms_s(*sums)
        size = sums[0][inv]
        mos = r["miss"] / r["share"]
        miss_in_batch = sums[4][inv] > 0
        return {
            "launch": bt["launch"][inv] / size,
            "request": np.full(size.shape, self.t_request_s),
            "compute": bt["compute"][inv] / size,
            "emb_hbm": r["lookup"] / self.hbm_bw_Bps,
            "h2d": np.where(miss_in_batch, self.h2d_latency_s, 0.0) / size + mos / self.h2d_bw_Bps,
            "host_gather": r["miss"] / self.host_gather_Bps,
        }


def _requests(
    n_computed: Any, ctx_len: Any, n_cand: Any, lookup_bytes: Any, miss_bytes: Any, h2d_share: Any
) -> dict[str, np.ndarray]:
    """Per-request inputs as float64 arrays broadcast to one shape, validated."""
    arrs = [
        np.asarray(x, dtype=np.float64)
        for x in (n_computed, ctx_len, n_cand, lookup_bytes, miss_bytes, h2d_share)
    ]
    arrs = list(np.broadcast_arrays(*arrs))
    n, L, M, look, miss, share = arrs
    if share.size and not (np.all(share > 0) and np.all(share <= 1)):
        bad = share[~((share > 0) & (share <= 1))].ravel()[0]
        raise ProfileError(
            f"h2d_share must be in (0, 1], got {bad}", hint="pass H2D shares in (0, 1]"
        )
    for name, v in (("n_computed", n), ("ctx_len", L), ("n_cand", M),
                    ("lookup_bytes", look), ("miss_bytes", miss)):  # fmt: skip
        if v.size and not (np.all(v >= 0) and np.all(np.isfinite(v))):
            raise ConfigError(
                f"{name} must be finite and >= 0", hint="give finite, non-negative values"
            )
    if n.size and np.any(n > L):
        i = int(np.flatnonzero((n > L).ravel())[0])
        raise ConfigError(
            f"request {i}: {n.ravel()[i]:g} computed tokens exceed its context of {L.ravel()[i]:g}",
            hint="n_computed can be at most ctx_len",
        )
    return {"n": n, "L": L, "M": M, "lookup": look, "miss": miss, "share": share}


def batch_sums(
    n_computed: np.ndarray,
    ctx_len: np.ndarray,
    n_cand: np.ndarray,
    lookup_bytes: np.ndarray,
    miss_bytes: np.ndarray,
    h2d_share: np.ndarray,
    batch: np.ndarray,
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Sums per batch label, in the kernel's argument order, and each request's batch index.

    Returns ``((n_req, tokens, pairs, lookup_bytes, miss_bytes,
    miss_bytes_over_share), inverse)``; batches are ordered by label.
    """
    _, inv = np.unique(batch, return_inverse=True)
    inv = inv.ravel()
    k = int(inv.max()) + 1 if inv.size else 0

    def s(w: np.ndarray) -> np.ndarray:
        return np.bincount(inv, weights=np.asarray(w, np.float64), minlength=k)

    sums = (
        s(np.ones(inv.size)),
        s(n_computed + n_cand),
        s(attention_pairs(n_computed, ctx_len, n_cand)),
        s(lookup_bytes),
        s(miss_bytes),
        s(miss_bytes / h2d_share),
    )
    return sums, inv


def build_latency_model(gpu: GpuProfile, model: ModelProfile, lat: LatencyProfile) -> LatencyModel:
    """Combine the profiles; measured bandwidths/latency in ``lat`` win over the GPU datasheet.

    ``model`` is accepted for symmetry with the profile triple; the v2
    coefficients carry everything model-specific.
    """
    del model
    return LatencyModel(
        t_launch_s=lat.t_launch_s,
        t_request_s=lat.t_request_s,
        weight_read_s=lat.weight_read_s,
        dense_s_per_token=lat.dense_s_per_token,
        mfu_half_tokens=lat.mfu_half_tokens,
        attn_s_per_pair=lat.attn_s_per_pair,
        hbm_bw_Bps=lat.hbm_bw_Bps if lat.hbm_bw_Bps is not None else gpu.hbm_bw_Bps,
        h2d_bw_Bps=lat.h2d_bw_Bps if lat.h2d_bw_Bps is not None else gpu.h2d_bw_Bps,
        h2d_latency_s=lat.h2d_latency_s if lat.h2d_latency_s is not None else gpu.h2d_latency_s,
        host_gather_Bps=lat.host_gather_Bps,
    )


def _v1_keys(ref: str) -> list[str]:
    """The v1 coefficient names a latency TOML file holds (empty if not a readable file)."""
    path = Path(ref)
    if not path.is_file():
        return []
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):  # not readable TOML text
        return []
    return [k for k in V1_KEYS if k in data]


def load_latency_profile(ref: str) -> LatencyProfile:
    """``load_latency`` with a clear error for a retired v1 profile (t0_s, prefill_a_s, ...)."""
    try:
        return load_latency(ref)
    except ProfileError as e:
        old = _v1_keys(ref)
        if not old:
            raise
        raise ProfileError(
            f"latency profile {ref} is a v1 per-request profile ({', '.join(old)}); the batched "
            "latency model v2 needs t_launch_s, t_request_s, weight_read_s, dense_s_per_token, "
            "mfu_half_tokens, attn_s_per_pair and host_gather_Bps",
            hint="measure a new one with `helm-plan calibrate --device cuda -o FILE`, fit one "
            "with `helm-plan fit TRACE -o FILE`, or drop --latency to use the shipped roofline "
            "profile (`python -m helm_plan.latency.roofline DIR` regenerates those)",
        ) from e


def resolve_latency(gpu: GpuProfile, model: ModelProfile, latency: str | None) -> LatencyProfile:
    """The latency profile to use: a name or path, else the shipped GPU_MODEL one, else a roofline.

    With ``latency=None`` the shipped ``{gpu.name}_{model.name}`` profile is
    loaded; when none ships (a user's own GPU or model file) the coefficients
    are derived on the fly with the roofline of ``helm_plan.latency.roofline``.
    """
    if latency is not None:
        return load_latency_profile(latency)
    name = default_latency_name(gpu.name, model.name)
    if name in available("latency"):
        return load_latency(name)
    return derive_profile(gpu, model)


def profile_mismatch(gpu: GpuProfile, model: ModelProfile, lat: LatencyProfile) -> str | None:
    """A one-line warning when ``lat`` was made for another GPU or model, else None."""
    bad = []
    if lat.gpu != gpu.name:
        bad.append(f"GPU {lat.gpu!r} (using {gpu.name!r})")
    if lat.model != model.name:
        bad.append(f"model {lat.model!r} (using {model.name!r})")
    if not bad:
        return None
    return f"latency profile {lat.name!r} was made for " + " and ".join(bad)
