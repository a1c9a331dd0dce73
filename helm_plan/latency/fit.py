"""Fitting the latency model: non-negative least squares on relative error, held-out MAPE.

Used by ``calibrate`` (torch microbenchmark timings) and by the observed-latency
fit (a trace's ``latency_ms``); nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from helm_plan.errors import HelmPlanError

TERM_FEATURES: dict[str, tuple[str, ...]] = {
    "prefill": ("t_prefill_s", "prefill_a_s", "prefill_b_s"),
    "score": ("t_score_s", "score_c_s", "score_d_s"),
    "emb_hbm": ("t_gather_s", "gather_row_s"),
    "host_gather": ("t_host_s", "host_gather_s"),
    "h2d": ("t_copy_s", "copy_row_s"),
}
"""Per term, the names of the fitted parameters (intercept first)."""


class CalibrationError(HelmPlanError):
    """A calibration run could not produce usable coefficients."""


@dataclass(frozen=True)
class Samples:
    """Raw microbenchmark timings (median seconds per grid point)."""

    row_bytes: int
    """Bytes of one embedding row."""
    prefill_n: np.ndarray
    """Computed tokens n per prefill point."""
    prefill_ctx: np.ndarray
    """Context length L per prefill point."""
    prefill_s: np.ndarray
    """Prefill time per point, seconds."""
    score_m: np.ndarray
    """Candidates M per score point."""
    score_ctx: np.ndarray
    """Context length L per score point."""
    score_s: np.ndarray
    """Scoring time per point, seconds."""
    gather_rows: np.ndarray
    """Rows gathered from the device table per point."""
    gather_s: np.ndarray
    """Device gather time per point, seconds."""
    host_rows: np.ndarray
    """Rows gathered from the host table per point."""
    host_s: np.ndarray
    """Host gather time per point, seconds."""
    h2d_rows: np.ndarray
    """Rows copied host-to-device per point."""
    h2d_s: np.ndarray
    """Copy time per point, seconds."""

    def design(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per term, the design matrix (intercept column first) and the timings."""

        def lin(*cols: np.ndarray) -> np.ndarray:
            c = [np.asarray(x, dtype=np.float64) for x in cols]
            return np.column_stack([np.ones_like(c[0]), *c])

        n, L = self.prefill_n.astype(np.float64), self.prefill_ctx.astype(np.float64)
        m, Ls = self.score_m.astype(np.float64), self.score_ctx.astype(np.float64)
        return {
            "prefill": (lin(n, n * L), np.asarray(self.prefill_s, np.float64)),
            "score": (lin(m, m * Ls), np.asarray(self.score_s, np.float64)),
            "emb_hbm": (lin(self.gather_rows), np.asarray(self.gather_s, np.float64)),
            "host_gather": (lin(self.host_rows), np.asarray(self.host_s, np.float64)),
            "h2d": (lin(self.h2d_rows), np.asarray(self.h2d_s, np.float64)),
        }


@dataclass(frozen=True)
class TermFit:
    """One term's non-negative least-squares fit."""

    params: dict[str, float]
    """Fitted parameters by name (intercept first), seconds per unit."""
    mape_train: float
    """Mean absolute percentage error on the training points, as a fraction."""
    mape_heldout: float
    """Mean absolute percentage error on the held-out points (NaN if none), as a fraction."""
    n_train: int
    """Training points."""
    n_heldout: int
    """Held-out points."""


def nnls_relative(X: np.ndarray, y: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
    """Non-negative ``beta`` minimising the squared relative error ``sum(((X beta − t)/y)²)``.

    ``t`` is ``target`` (default ``y``): the part of ``y`` the columns explain.
    """
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise CalibrationError("timings must be finite and positive for the fit")
    t = y if target is None else target
    A = X / y[:, None]
    scale = np.linalg.norm(A, axis=0)
    scale[scale == 0] = 1.0
    beta, _ = nnls(A / scale, t / y, maxiter=50 * X.shape[1] + 100)
    return beta / scale


def mape(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean absolute percentage error as a fraction (NaN for no points)."""
    if len(y) == 0:
        return float("nan")
    return float(np.mean(np.abs(pred - y) / np.abs(y)))


def split_indices(
    n: int, n_params: int, holdout_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/held-out split that keeps at least ``n_params`` training points."""
    n_test = round(holdout_fraction * n)
    if holdout_fraction > 0:
        n_test = max(1, n_test)
    n_test = min(n_test, max(0, n - n_params))
    perm = rng.permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def fit_terms(
    samples: Samples, *, holdout_fraction: float = 0.25, seed: int = 0
) -> dict[str, TermFit]:
    """Fit every term on a seeded train split and score it on the held-out points."""
    out: dict[str, TermFit] = {}
    for i, (term, (X, y)) in enumerate(samples.design().items()):
        names = TERM_FEATURES[term]
        if len(y) < len(names):
            raise CalibrationError(
                f"{term}: {len(y)} timing points cannot fit {len(names)} parameters",
                hint="give the calibration grid more sizes",
            )
        rng = np.random.default_rng([seed, i])
        tr, te = split_indices(len(y), len(names), holdout_fraction, rng)
        beta = nnls_relative(X[tr], y[tr])
        out[term] = TermFit(
            params=dict(zip(names, map(float, beta), strict=True)),
            mape_train=mape(X[tr] @ beta, y[tr]),
            mape_heldout=mape(X[te] @ beta, y[te]),
            n_train=len(tr),
            n_heldout=len(te),
        )
    return out


def coefficients_from_terms(terms: dict[str, TermFit], row_bytes: int) -> dict[str, float]:
    """Map the per-term fits onto the latency-profile coefficients."""
    p = {k: v for t in terms.values() for k, v in t.params.items()}
    for slope, what in (("gather_row_s", "device gather"), ("copy_row_s", "H2D copy")):
        if not p[slope] > 0:
            raise CalibrationError(
                f"{what} time did not grow with the row count, so its bandwidth is unresolved",
                hint="use larger lookup_grid sizes or more repeats",
            )
    return {
        "t0_s": p["t_prefill_s"] + p["t_score_s"] + p["t_gather_s"],
        "prefill_a_s": p["prefill_a_s"],
        "prefill_b_s": p["prefill_b_s"],
        "score_c_s": p["score_c_s"],
        "score_d_s": p["score_d_s"],
        "host_gather_s": p["host_gather_s"],
        "hbm_bw_Bps": row_bytes / p["gather_row_s"],
        "h2d_bw_Bps": row_bytes / p["copy_row_s"],
        "h2d_latency_s": p["t_host_s"] + p["t_copy_s"],
    }


def fit_coefficients(
    samples: Samples, *, holdout_fraction: float = 0.25, seed: int = 0
) -> tuple[dict[str, float], dict[str, float]]:
    """Latency-profile coefficients and held-out MAPE per term (fractions) from raw timings."""
    terms = fit_terms(samples, holdout_fraction=holdout_fraction, seed=seed)
    coeffs = coefficients_from_terms(terms, samples.row_bytes)
    return coeffs, {k: t.mape_heldout for k, t in terms.items()}
