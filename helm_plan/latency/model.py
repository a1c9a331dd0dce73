"""The analytic service-time model of one request on one GPU (DESIGN.md, Node model step 3).

    S = t0
      + n_lookup·row_bytes/hbm_bw                                   (emb_hbm)
      + [n_miss>0]·h2d_latency + n_miss·(host_gather + row_bytes/(h2d_bw·share))   (h2d)
      + a·n + b·n·L                                                 (prefill)
      + c·M + d·M·L                                                 (score)

``n`` = computed history tokens, ``L`` = context length, ``M`` = candidates,
``share`` = the fraction of the H2D link that demand misses get (1 unless a
throttled refill runs beside them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from helm_plan.errors import ProfileError
from helm_plan.latency.roofline import derive_profile
from helm_plan.profiles import (
    GpuProfile,
    LatencyProfile,
    ModelProfile,
    available,
    default_latency_name,
    load_latency,
)

TERMS = ("fixed", "emb_hbm", "h2d", "prefill", "score")
"""Names of the per-term breakdown returned by ``LatencyModel.terms_s``."""


@dataclass(frozen=True)
class LatencyModel:
    """Resolved service-time coefficients, all floats in SI units."""

    t0_s: float
    """Fixed per-request overhead (kernel launches, weight reads), seconds."""
    prefill_a_s: float
    """Prefill cost per computed token, seconds."""
    prefill_b_s: float
    """Prefill attention cost per computed token per context token, seconds."""
    score_c_s: float
    """Scoring cost per candidate, seconds."""
    score_d_s: float
    """Scoring cost per candidate per context token, seconds."""
    host_gather_s: float
    """Host-side lookup of one missed row in the DRAM table, seconds."""
    row_bytes: int
    """Bytes of one embedding row (all sparse features of a token)."""
    hbm_bw_Bps: float
    """Device-memory gather bandwidth for embedding lookups, bytes per second."""
    h2d_bw_Bps: float
    """Host-to-device copy bandwidth, bytes per second."""
    h2d_latency_s: float
    """Fixed latency of the H2D copy of a request's missed rows, seconds."""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ProfileError(f"latency model: {f.name} must be finite and >= 0, got {v!r}")
        for k in ("hbm_bw_Bps", "h2d_bw_Bps"):
            if not getattr(self, k) > 0:
                raise ProfileError(f"latency model: {k} must be positive, got {getattr(self, k)}")

    def terms_s(
        self,
        n_computed: Any,
        ctx_len: Any,
        n_cand: Any,
        n_lookup: Any,
        n_miss: Any,
        h2d_share: Any = 1.0,
    ) -> dict[str, np.ndarray]:
        """Per-term service time in seconds (float64 arrays broadcast to a common shape)."""
        n = np.asarray(n_computed, dtype=np.float64)
        L = np.asarray(ctx_len, dtype=np.float64)
        M = np.asarray(n_cand, dtype=np.float64)
        look = np.asarray(n_lookup, dtype=np.float64)
        miss = np.asarray(n_miss, dtype=np.float64)
        share = np.asarray(h2d_share, dtype=np.float64)
        if share.size and not (np.all(share > 0) and np.all(share <= 1)):
            bad = share[~((share > 0) & (share <= 1))].ravel()[0]
            raise ProfileError(f"h2d_share must be in (0, 1], got {bad}")
        shape = np.broadcast_shapes(n.shape, L.shape, M.shape, look.shape, miss.shape, share.shape)
        per_miss = self.host_gather_s + self.row_bytes / (self.h2d_bw_Bps * share)
        out = {
            "fixed": np.full(shape, self.t0_s, dtype=np.float64),
            "emb_hbm": look * (self.row_bytes / self.hbm_bw_Bps),
            "h2d": np.where(miss > 0, self.h2d_latency_s, 0.0) + miss * per_miss,
            "prefill": self.prefill_a_s * n + self.prefill_b_s * n * L,
            "score": self.score_c_s * M + self.score_d_s * M * L,
        }
        return {k: np.broadcast_to(v, shape).astype(np.float64, copy=False) for k, v in out.items()}

    def service_time_s(
        self,
        n_computed: Any,
        ctx_len: Any,
        n_cand: Any,
        n_lookup: Any,
        n_miss: Any,
        h2d_share: Any = 1.0,
    ) -> np.ndarray:
        """Service time in seconds (float64), the sum of ``terms_s``."""
        t = self.terms_s(n_computed, ctx_len, n_cand, n_lookup, n_miss, h2d_share)
        return t["fixed"] + t["emb_hbm"] + t["h2d"] + t["prefill"] + t["score"]


def build_latency_model(gpu: GpuProfile, model: ModelProfile, lat: LatencyProfile) -> LatencyModel:
    """Combine the profiles; measured bandwidths/latency in ``lat`` win over the GPU datasheet."""
    return LatencyModel(
        t0_s=lat.t0_s,
        prefill_a_s=lat.prefill_a_s,
        prefill_b_s=lat.prefill_b_s,
        score_c_s=lat.score_c_s,
        score_d_s=lat.score_d_s,
        host_gather_s=lat.host_gather_s,
        row_bytes=int(model.row_bytes),
        hbm_bw_Bps=lat.hbm_bw_Bps if lat.hbm_bw_Bps is not None else gpu.hbm_bw_Bps,
        h2d_bw_Bps=lat.h2d_bw_Bps if lat.h2d_bw_Bps is not None else gpu.h2d_bw_Bps,
        h2d_latency_s=lat.h2d_latency_s if lat.h2d_latency_s is not None else gpu.h2d_latency_s,
    )


def resolve_latency(gpu: GpuProfile, model: ModelProfile, latency: str | None) -> LatencyProfile:
    """The latency profile to use: a name or path, else the shipped GPU_MODEL one, else a roofline.

    With ``latency=None`` the shipped ``{gpu.name}_{model.name}`` profile is
    loaded; when none ships (a user's own GPU or model file) the coefficients
    are derived on the fly with the roofline of ``helm_plan.latency.roofline``.
    """
    if latency is not None:
        return load_latency(latency)
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
