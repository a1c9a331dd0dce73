"""Fitting the v2 latency terms to microbenchmark timings: NNLS on relative error, held-out MAPE.

Used by ``calibrate`` (torch timings) and by the observed-latency fit (a
trace's ``latency_ms``); nothing here imports torch. The timings of one
calibration run are a :class:`helm_plan.latency.samples.Samples`; each term is
fitted on a seeded train split and scored on the held-out points:

- ``launch``: batches of ``k`` one-token requests through a tiny-width copy
  of the stack (every kernel launched, almost no arithmetic):
  ``t = t_launch_s + k·t_request_s``.
- ``weight_read``: one-token GEMVs through ``k`` distinct copies of the dense
  weights: ``t = c + k·weight_read_s`` (the intercept is launch time).
- ``compute``: the real-width stack at batches of identical requests
  ``(B, n, L, M)``: ``t − t_launch_s − B·t_request_s =
  max(weight_read_s, dense_s_per_token·(X + h) + attn_s_per_pair·P)``.
  For the points above the weight floor this is linear in
  ``(dense_s_per_token, dense_s_per_token·h, attn_s_per_pair)``, so NNLS
  solves it exactly and ``h`` is the ratio (the only non-linearity is the
  max()). Points within ``FLOOR_MARGIN`` of the floor are left out of the fit
  and kept in the MAPE.
- ``emb_hbm``, ``host_gather``, ``h2d``: ``t = c + bytes/bandwidth``; the
  copy's intercept is ``h2d_latency_s``, the two gathers' intercepts are
  launch time already counted in ``t_launch_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.errors import HelmPlanError
from helm_plan.latency.samples import Samples

FLOOR_MARGIN = 0.1
"""Stack points start in the compute fit only this far (relative) above the weight floor."""

UNRESOLVED = 1e-6
"""A slope whose largest contribution is below this share of the largest timing is zero."""

TERMS_FITTED = ("launch", "weight_read", "compute", "emb_hbm", "host_gather", "h2d")
"""Calibration terms, each with its own timings and held-out MAPE."""


class CalibrationError(HelmPlanError):
    """A calibration run could not produce usable coefficients."""


@dataclass(frozen=True)
class TermFit:
    """One term's fit: parameters, and MAPE on the train and held-out points."""

    params: dict[str, float]
    """Fitted parameters by name, SI units."""
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
        raise CalibrationError(
            "timings must be finite and positive for the fit",
            hint="rerun the calibration; a timer returned nonsense",
        )
    # imported here: scipy.optimize takes ~0.4 s to import, and every command (analyze's
    # first run included) imports this module through the CLI's calibrate defaults
    from scipy.optimize import nnls

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


def _affine(
    term: str, x: np.ndarray, y: np.ndarray, names: tuple[str, str], frac: float, seed: int
) -> TermFit:
    """``y = a + b·x`` by relative NNLS on a seeded train split."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(y) < 2 or len(np.unique(x)) < 2:
        raise CalibrationError(
            f"{term}: {len(y)} timing points at {len(np.unique(x))} sizes cannot fit 2 parameters",
            hint="give the calibration grid at least 2 sizes",
        )
    tr, te = split_indices(len(y), 2, frac, np.random.default_rng([seed, TERMS_FITTED.index(term)]))
    A = np.column_stack([np.ones_like(x), x])
    beta = nnls_relative(A[tr], y[tr])
    if beta[1] * x.max() < UNRESOLVED * y.max():
        beta[1] = 0.0  # rounding noise of a flat trend, not a slope
    return TermFit(
        params=dict(zip(names, map(float, beta), strict=True)),
        mape_train=mape(A[tr] @ beta, y[tr]),
        mape_heldout=mape(A[te] @ beta, y[te]),
        n_train=len(tr),
        n_heldout=len(te),
    )


def compute_pred(
    p: dict[str, float], batch: np.ndarray, tokens: np.ndarray, pairs: np.ndarray
) -> np.ndarray:
    """Predicted stack time of batches: launch + B·request + max(weight read, dense + attention)."""
    work = p["dense_s_per_token"] * (tokens + p["mfu_half_tokens"]) + p["attn_s_per_pair"] * pairs
    return p["t_launch_s"] + batch * p["t_request_s"] + np.maximum(work, p["weight_read_s"])


def _compute(s: Samples, fixed: dict[str, float], frac: float, seed: int) -> TermFit:
    """Dense and attention coefficients from the stack timings (see the module docstring)."""
    B, X, P, y = (np.asarray(v, np.float64) for v in (s.stack_batch, s.stack_tokens,
                                                      s.stack_pairs, s.stack_s))  # fmt: skip
    tr, te = split_indices(len(y), 3, frac, np.random.default_rng([seed, 2]))
    work = y - fixed["t_launch_s"] - B * fixed["t_request_s"]
    W = fixed["weight_read_s"]
    A = np.column_stack([X, np.ones_like(X), P])
    # Points at the weight floor say nothing about the slopes, and timing noise lifts half
    # of them above it: fit only the points clearly above (by FLOOR_MARGIN). Re-selecting by
    # the fit's own prediction instead lets near-floor points pull the fit up step by step.
    use = tr[work[tr] > W * (1.0 + FLOOR_MARGIN)]
    if len(use) < 3:
        raise CalibrationError(
            f"compute: only {len(use)} stack points lie above the weight-read floor",
            hint="use larger token_grid / ctx_grid sizes",
        )
    beta = nnls_relative(A[use], y[use], target=work[use])
    ds, ds_h, attn = beta
    if not ds > 0:
        raise CalibrationError(
            "compute: stack time did not grow with the token count, so dense_s_per_token is unresolved",
            hint="use larger token_grid sizes or more repeats",
        )
    params = {"dense_s_per_token": float(ds), "mfu_half_tokens": float(ds_h / ds),
              "attn_s_per_pair": float(attn)}  # fmt: skip
    full = {**fixed, **params}
    pred = compute_pred(full, B, X, P)
    return TermFit(params, mape(pred[tr], y[tr]), mape(pred[te], y[te]), len(tr), len(te))


def fit_terms(
    samples: Samples, *, holdout_fraction: float = 0.25, seed: int = 0
) -> dict[str, TermFit]:
    """Fit every term (``TERMS_FITTED``) on seeded train splits and score the held-out points."""
    s, f = samples, holdout_fraction
    out = {
        "launch": _affine("launch", s.tiny_batch, s.tiny_s, ("t_launch_s", "t_request_s"), f, seed),
        "weight_read": _affine("weight_read", s.weight_sets, s.weight_s,
                               ("t_weight_call_s", "weight_read_s"), f, seed),
    }  # fmt: skip
    fixed = {**out["launch"].params, "weight_read_s": out["weight_read"].params["weight_read_s"]}
    out["compute"] = _compute(s, fixed, f, seed)
    for term, x, y, names in (
        ("emb_hbm", s.gather_bytes, s.gather_s, ("t_gather_call_s", "s_per_gather_byte")),
        ("host_gather", s.host_bytes, s.host_s, ("t_host_call_s", "s_per_host_byte")),
        ("h2d", s.h2d_bytes, s.h2d_s, ("h2d_latency_s", "s_per_h2d_byte")),
    ):
        out[term] = _affine(term, x, y, names, f, seed)
    return out


def coefficients_from_terms(terms: dict[str, TermFit]) -> dict[str, float]:
    """Map the per-term fits onto the latency-profile coefficients (SI units)."""
    p = {k: v for t in terms.values() for k, v in t.params.items()}
    for slope, what in (("s_per_gather_byte", "device gather"), ("s_per_h2d_byte", "H2D copy"),
                        ("s_per_host_byte", "host gather")):  # fmt: skip
        if not p[slope] > 0:
            raise CalibrationError(
                f"{what} time did not grow with the bytes moved, so its bandwidth is unresolved",
                hint="use larger lookup_grid sizes or more repeats",
            )
    return {
        "t_launch_s": p["t_launch_s"],
        "t_request_s": p["t_request_s"],
        "weight_read_s": p["weight_read_s"],
        "dense_s_per_token": p["dense_s_per_token"],
        "mfu_half_tokens": p["mfu_half_tokens"],
        "attn_s_per_pair": p["attn_s_per_pair"],
        "host_gather_Bps": 1.0 / p["s_per_host_byte"],
        "hbm_bw_Bps": 1.0 / p["s_per_gather_byte"],
        "h2d_bw_Bps": 1.0 / p["s_per_h2d_byte"],
        "h2d_latency_s": p["h2d_latency_s"],
    }


def fit_coefficients(
    samples: Samples, *, holdout_fraction: float = 0.25, seed: int = 0
) -> tuple[dict[str, float], dict[str, float]]:
    """Latency-profile coefficients and held-out MAPE per term (fractions) from raw timings."""
    terms = fit_terms(samples, holdout_fraction=holdout_fraction, seed=seed)
    return coefficients_from_terms(terms), {k: t.mape_heldout for k, t in terms.items()}
