"""Fit the latency model to observed latencies (the math behind `helm-plan fit`).

The per-request predictors (computed tokens n, context L, candidates M, EMB
lookup and miss bytes) come from replaying the trace through the cache
simulator (:func:`helm_plan.sim.fit.predictors_from_trace`). The fit itself
(``fit_observed``) only needs those arrays, so it is tested on synthetic data
from known coefficients.

Requests are taken to be served one at a time (a batch of one), so

    y = t_launch + t_request + dense·(n + M + h) + attn·P + lookup_bytes/hbm_bw
        + [miss > 0]·h2d_latency + miss_bytes/(h2d_bw·share) + miss_bytes/host_gather_Bps

(compute-bound: the weight-read floor is below every shipped profile's
batch-of-one compute). Identifiability:

- ``t_launch``, ``t_request`` and ``dense·h`` are all constants per request:
  ``t_request`` and ``h`` are held at the base and ``t_launch`` absorbs the
  constant;
- ``weight_read`` only binds below the compute, which a batch of one of a GR
  never is: held at the base;
- lookup bytes are a fixed mix of history and candidate bytes, collinear with
  the token count, and the link and host-gather costs are both per missed
  byte: ``hbm_bw`` and ``h2d_bw`` are taken from the base and subtracted.

Fitted: ``t_launch_s, dense_s_per_token, attn_s_per_pair, host_gather_Bps,
h2d_latency_s`` (non-negative least squares on relative error). Any of them the
data cannot separate (e.g. ``dense`` when every request has the same token
count, ``h2d_latency`` when every request misses, ``host_gather`` when none
does) is held at the base value and listed in ``held_at_base``.

``latency_ms`` is taken to be the service time. If the log includes queueing,
the fitted ``t_launch`` absorbs its mean and the MAPE shows the rest.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass
from typing import Any

import numpy as np

from helm_plan.errors import ConfigError, TraceError
from helm_plan.latency.fit import mape, nnls_relative, split_indices
from helm_plan.latency.model import LatencyModel, attention_pairs
from helm_plan.profiles import LatencyProfile

PREDICTORS = ("n_computed", "ctx_len", "n_cand", "lookup_bytes", "miss_bytes")
"""Required predictor arrays, one value per request (``h2d_share`` is optional)."""

FITTED = ("t_launch_s", "dense_s_per_token", "attn_s_per_pair", "host_gather_Bps", "h2d_latency_s")
"""Coefficients fitted to observed latencies, in priority order for collinear columns."""

ALWAYS_HELD = ("t_request_s", "mfu_half_tokens", "weight_read_s", "hbm_bw_Bps", "h2d_bw_Bps")
"""Coefficients a batch-of-one log cannot identify: always the base model's."""


@dataclass(frozen=True)
class ObservedFit:
    """The latency model fitted to observed latencies, and how well it predicts them."""

    model: LatencyModel
    """Fitted model (held coefficients from the base model)."""
    coefficients: dict[str, float]
    """Fitted (or held) value of each coefficient in ``FITTED``, SI units."""
    held_at_base: tuple[str, ...]
    """Coefficients of ``FITTED`` the data could not identify, kept at the base model's value."""
    mape_train: float
    """MAPE on the training requests, as a fraction."""
    mape_heldout: float
    """MAPE on the held-out requests, as a fraction."""
    mape_base_heldout: float
    """MAPE of the unfitted base model on the same held-out requests, as a fraction."""
    n_train: int
    """Requests used to fit."""
    n_heldout: int
    """Requests held out for validation."""
    n_dropped: int
    """Requests dropped for a missing (NaN) latency."""
    predicted_ms: np.ndarray
    """Fitted model's prediction for every kept request, milliseconds."""

    def profile(self, *, name: str, gpu: str, model: str, source: str) -> LatencyProfile:
        """The fit as a latency profile (bandwidths written explicitly)."""
        m = self.model
        return LatencyProfile(
            name=name, gpu=gpu, model=model, source=source,
            t_launch_s=m.t_launch_s, t_request_s=m.t_request_s, weight_read_s=m.weight_read_s,
            dense_s_per_token=m.dense_s_per_token, mfu_half_tokens=m.mfu_half_tokens,
            attn_s_per_pair=m.attn_s_per_pair, host_gather_Bps=m.host_gather_Bps,
            hbm_bw_Bps=m.hbm_bw_Bps, h2d_bw_Bps=m.h2d_bw_Bps, h2d_latency_s=m.h2d_latency_s,
        )  # fmt: skip

    def derivation(self) -> dict[str, Any]:
        """How the fit was made (the ``[derivation]`` table of the TOML)."""
        return {
            "method": "scipy nnls on relative error against observed latency_ms, "
            "each request served as a batch of one",
            "fitted": [k for k in FITTED if k not in self.held_at_base],
            "held_at_base": [*self.held_at_base, *ALWAYS_HELD],
            "identifiability": "t_request and mfu_half_tokens are constants per request "
            "(t_launch absorbs them); weight_read never binds for a batch of one; "
            "hbm_bw and h2d_bw are collinear with tokens and host gather",
            "n_train": self.n_train,
            "n_heldout": self.n_heldout,
            "n_dropped": self.n_dropped,
            "mape_train": self.mape_train,
            "mape_heldout": self.mape_heldout,
            "mape_base_heldout": self.mape_base_heldout,
            "date": _dt.datetime.now(_dt.UTC).date().isoformat(),
        }


def _columns(p: dict[str, np.ndarray], base: LatencyModel) -> np.ndarray:
    """Design matrix in ``FITTED`` order (host gather as seconds per missed byte)."""
    n, L, M, miss = (p[k] for k in ("n_computed", "ctx_len", "n_cand", "miss_bytes"))
    return np.column_stack([
        np.ones_like(n), n + M + base.mfu_half_tokens, attention_pairs(n, L, M), miss,
        (miss > 0).astype(np.float64),
    ])  # fmt: skip


def _identified(X: np.ndarray, tol: float = 1e-8) -> np.ndarray:
    """Greedy, in column order: keep a column if it raises the (scaled) rank."""
    norms = np.linalg.norm(X, axis=0)
    keep = np.zeros(X.shape[1], bool)
    for j in range(X.shape[1]):
        if norms[j] == 0:
            continue
        trial = keep.copy()
        trial[j] = True
        A = X[:, trial] / norms[trial]
        s = np.linalg.svd(A, compute_uv=False)
        if s[-1] > tol * s[0]:
            keep = trial
    return keep


def _predictors(
    latency_ms: np.ndarray, predictors: dict[str, np.ndarray]
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, int]:
    """Validated (latency s, predictors, share) of the requests with a latency, and the dropped count."""
    y_ms = np.asarray(latency_ms, dtype=np.float64)
    missing = [k for k in PREDICTORS if k not in predictors]
    if missing:
        raise ConfigError(f"predictors lack {missing[0]!r}", hint=f"need {', '.join(PREDICTORS)}")
    p = {k: np.asarray(predictors[k], dtype=np.float64) for k in PREDICTORS}
    share = np.broadcast_to(np.asarray(predictors.get("h2d_share", 1.0), np.float64), y_ms.shape)
    for k, v in p.items():
        if v.shape != y_ms.shape:
            raise ConfigError(
                f"predictor {k} has {v.shape} values, latency_ms has {y_ms.shape}",
                hint="pass one predictor value per request",
            )
        if np.any(v < 0) or not np.all(np.isfinite(v)):
            raise ConfigError(
                f"predictor {k} must be finite and >= 0", hint="give finite, non-negative values"
            )
    if np.any(share <= 0) or np.any(share > 1):
        raise ConfigError("predictor h2d_share must be in (0, 1]", hint="pass H2D shares in (0, 1]")
    bad = np.flatnonzero(np.isfinite(y_ms) & (y_ms <= 0))
    if len(bad):
        raise TraceError(
            f"row {bad[0]}, column latency_ms: must be positive, got {y_ms[bad[0]]}",
            hint="drop or fix rows with a zero or negative latency",
        )
    keep = np.isfinite(y_ms)
    if len(y_ms[keep]) < 2 * len(FITTED):
        raise TraceError(
            f"only {int(keep.sum())} requests with latency_ms; the fit needs at least {2 * len(FITTED)}",
            hint="fit a longer stretch of the serving log",
        )
    return y_ms[keep] / 1e3, {k: v[keep] for k, v in p.items()}, share[keep], int((~keep).sum())


def fit_observed(
    latency_ms: np.ndarray,
    predictors: dict[str, np.ndarray],
    *,
    base: LatencyModel,
    holdout_fraction: float = 0.2,
    seed: int = 0,
) -> ObservedFit:
    """Fit ``FITTED`` to observed batch-of-one latencies; everything else comes from ``base``.

    ``predictors`` holds one array per request for each name in
    ``PREDICTORS`` (plus optional ``h2d_share``). The split into train and
    held-out requests is seeded.
    """
    if not 0 <= holdout_fraction < 1:
        raise ConfigError(
            f"holdout_fraction must be in [0, 1), got {holdout_fraction}",
            hint="pass --holdout in [0, 1)",
        )
    y, p, share, n_dropped = _predictors(latency_ms, predictors)
    args = (p["n_computed"], p["ctx_len"], p["n_cand"], p["lookup_bytes"], p["miss_bytes"], share)
    # Known parts: requests, EMB gathers in HBM and the link copy, all from the base.
    known = (base.t_request_s + p["lookup_bytes"] / base.hbm_bw_Bps
             + p["miss_bytes"] / (base.h2d_bw_Bps * share))  # fmt: skip
    X = _columns(p, base)
    base_beta = np.array([base.t_launch_s, base.dense_s_per_token, base.attn_s_per_pair,
                          1.0 / base.host_gather_Bps, base.h2d_latency_s])  # fmt: skip

    tr, te = split_indices(len(y), len(FITTED), holdout_fraction, np.random.default_rng(seed))
    ident = _identified(X[tr])
    beta = base_beta.copy()
    target = y[tr] - known[tr] - X[tr][:, ~ident] @ base_beta[~ident]
    if ident.any():
        beta[ident] = nnls_relative(X[tr][:, ident], y[tr], target=target)
    if beta[3] <= 0:  # no host-gather cost resolved: an infinite bandwidth is no answer
        ident[3], beta[3] = False, base_beta[3]
    coeffs = dict(zip(FITTED, map(float, beta), strict=True))
    coeffs["host_gather_Bps"] = 1.0 / coeffs["host_gather_Bps"]
    fitted_model = dataclasses.replace(base, **coeffs)
    pred = fitted_model.service_time_s(*args)
    return ObservedFit(
        model=fitted_model,
        coefficients=coeffs,
        held_at_base=tuple(k for k, ok in zip(FITTED, ident, strict=True) if not ok),
        mape_train=mape(pred[tr], y[tr]),
        mape_heldout=mape(pred[te], y[te]),
        mape_base_heldout=mape(base.service_time_s(*args)[te], y[te]),
        n_train=len(tr),
        n_heldout=len(te),
        n_dropped=n_dropped,
        predicted_ms=pred * 1e3,
    )
