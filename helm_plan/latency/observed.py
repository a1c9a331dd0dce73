"""Fit the service-time model to observed latencies (the math behind `helm-plan fit`).

The per-request predictors (computed tokens n, context L, candidates M,
lookups, misses) come from replaying the trace through the cache simulator
(:func:`helm_plan.sim.fit.predictors_from_trace`). The fit itself
(``fit_observed``) only needs those arrays, so it is tested on synthetic data
from known coefficients.

Identifiability. Lookups are the computed tokens plus the candidates, so the
per-lookup HBM cost is collinear with ``a`` and ``c``; and the per-miss copy
cost ``row_bytes/h2d_bw`` cannot be told apart from ``host_gather_s``. Both
bandwidth terms are therefore taken from the base model (GPU profile or a
measured latency profile) and subtracted. The fitted coefficients are ``t0,
a, b, c, d, host_gather_s, h2d_latency_s``; any of them the data cannot
separate (e.g. ``c`` when every request has the same M, which makes ``c·M``
a constant, or ``h2d_latency`` when every request misses) is held at the base
value and listed in ``held_at_base``.

``latency_ms`` is taken to be the service time. If the log includes queueing,
the fitted ``t0`` absorbs its mean and the MAPE shows the rest.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

import numpy as np

from helm_plan.errors import ConfigError, TraceError
from helm_plan.latency.fit import mape, nnls_relative, split_indices
from helm_plan.latency.model import LatencyModel
from helm_plan.profiles import LatencyProfile

PREDICTORS = ("n_computed", "ctx_len", "n_cand", "n_lookup", "n_miss")
"""Required predictor arrays, one value per request (``h2d_share`` is optional)."""

FITTED = (
    "t0_s",
    "prefill_a_s",
    "prefill_b_s",
    "score_c_s",
    "score_d_s",
    "host_gather_s",
    "h2d_latency_s",
)
"""Coefficients fitted to observed latencies, in priority order for collinear columns."""


@dataclass(frozen=True)
class ObservedFit:
    """The service-time model fitted to observed latencies, and how well it predicts them."""

    model: LatencyModel
    """Fitted model (bandwidths from the base model)."""
    coefficients: dict[str, float]
    """Fitted (or held) value of each coefficient in ``FITTED``, SI units."""
    held_at_base: tuple[str, ...]
    """Coefficients the data could not identify, kept at the base model's value."""
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
            name=name,
            gpu=gpu,
            model=model,
            t0_s=m.t0_s,
            prefill_a_s=m.prefill_a_s,
            prefill_b_s=m.prefill_b_s,
            score_c_s=m.score_c_s,
            score_d_s=m.score_d_s,
            host_gather_s=m.host_gather_s,
            source=source,
            hbm_bw_Bps=m.hbm_bw_Bps,
            h2d_bw_Bps=m.h2d_bw_Bps,
            h2d_latency_s=m.h2d_latency_s,
        )

    def derivation(self) -> dict[str, Any]:
        """How the fit was made (the ``[derivation]`` table of the TOML)."""
        return {
            "method": "scipy nnls on relative error against observed latency_ms",
            "fitted": [k for k in FITTED if k not in self.held_at_base],
            "held_at_base": list(self.held_at_base),
            "bandwidths": "hbm_bw_Bps and h2d_bw_Bps from the base model (not identifiable)",
            "n_train": self.n_train,
            "n_heldout": self.n_heldout,
            "n_dropped": self.n_dropped,
            "mape_train": self.mape_train,
            "mape_heldout": self.mape_heldout,
            "mape_base_heldout": self.mape_base_heldout,
            "date": _dt.datetime.now(_dt.UTC).date().isoformat(),
        }


def _columns(p: dict[str, np.ndarray]) -> np.ndarray:
    n, L, M, miss = (p[k] for k in ("n_computed", "ctx_len", "n_cand", "n_miss"))
    return np.column_stack(
        [np.ones_like(n), n, n * L, M, M * L, miss, (miss > 0).astype(np.float64)]
    )


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


def fit_observed(
    latency_ms: np.ndarray,
    predictors: dict[str, np.ndarray],
    *,
    base: LatencyModel,
    holdout_fraction: float = 0.2,
    seed: int = 0,
) -> ObservedFit:
    """Fit ``t0, a, b, c, d, host_gather_s, h2d_latency_s`` to observed latencies.

    ``predictors`` holds one array per request for each name in
    ``PREDICTORS`` (plus optional ``h2d_share``). ``base`` supplies the
    bandwidths and the value of any coefficient the data cannot identify.
    The split into train and held-out requests is seeded.
    """
    if not 0 <= holdout_fraction < 1:
        raise ConfigError(f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
    y_ms = np.asarray(latency_ms, dtype=np.float64)
    missing = [k for k in PREDICTORS if k not in predictors]
    if missing:
        raise ConfigError(f"predictors lack {missing[0]!r}", hint=f"need {', '.join(PREDICTORS)}")
    p = {k: np.asarray(predictors[k], dtype=np.float64) for k in PREDICTORS}
    share = np.asarray(predictors.get("h2d_share", 1.0), dtype=np.float64)
    for k, v in p.items():
        if v.shape != y_ms.shape:
            raise ConfigError(f"predictor {k} has {v.shape} values, latency_ms has {y_ms.shape}")
        if np.any(v < 0) or not np.all(np.isfinite(v)):
            raise ConfigError(f"predictor {k} must be finite and >= 0")
    bad = np.flatnonzero(np.isfinite(y_ms) & (y_ms <= 0))
    if len(bad):
        raise TraceError(
            f"row {bad[0]}, column latency_ms: must be positive, got {y_ms[bad[0]]}",
            hint="drop or fix rows with a zero or negative latency",
        )
    keep = np.isfinite(y_ms)
    n_dropped = int((~keep).sum())
    y = y_ms[keep] / 1e3
    p = {k: v[keep] for k, v in p.items()}
    if share.ndim:
        share = share[keep]
    if len(y) < 2 * len(FITTED):
        raise TraceError(
            f"only {len(y)} requests with latency_ms; the fit needs at least {2 * len(FITTED)}"
        )

    args = (p["n_computed"], p["ctx_len"], p["n_cand"], p["n_lookup"], p["n_miss"], share)
    bt = base.terms_s(*args)
    # Bandwidth parts, fixed from the base model.
    known = bt["emb_hbm"] + p["n_miss"] * (base.row_bytes / (base.h2d_bw_Bps * share))
    X = _columns(p)
    base_beta = np.array(
        [
            base.t0_s,
            base.prefill_a_s,
            base.prefill_b_s,
            base.score_c_s,
            base.score_d_s,
            base.host_gather_s,
            base.h2d_latency_s,
        ]
    )

    rng = np.random.default_rng(seed)
    tr, te = split_indices(len(y), len(FITTED), holdout_fraction, rng)
    ident = _identified(X[tr])
    beta = base_beta.copy()
    target = y[tr] - known[tr] - X[tr][:, ~ident] @ base_beta[~ident]
    if ident.any():
        beta[ident] = nnls_relative(X[tr][:, ident], y[tr], target=target)
    pred = known + X @ beta
    base_pred = known + X @ base_beta
    coeffs = dict(zip(FITTED, map(float, beta), strict=True))
    fitted_model = LatencyModel(
        row_bytes=base.row_bytes,
        hbm_bw_Bps=base.hbm_bw_Bps,
        h2d_bw_Bps=base.h2d_bw_Bps,
        **coeffs,
    )
    return ObservedFit(
        model=fitted_model,
        coefficients=coeffs,
        held_at_base=tuple(k for k, ok in zip(FITTED, ident, strict=True) if not ok),
        mape_train=mape(pred[tr], y[tr]),
        mape_heldout=mape(pred[te], y[te]),
        mape_base_heldout=mape(base_pred[te], y[te]),
        n_train=len(tr),
        n_heldout=len(te),
        n_dropped=n_dropped,
        predicted_ms=pred * 1e3,
    )
