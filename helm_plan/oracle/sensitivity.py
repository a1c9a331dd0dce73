"""Sensitivity measures (DESIGN.md, Sensitivity): regret, ratio distance, flatness, adaptivity CI.

- ``regret = P99(r) / P99(r*) - 1`` (0 at the optimum; only where it is
  defined, see :func:`window_regret`);
- ``ratio distance = |r - r*|``;
- ``flatness``: the range (max - min) of r whose P99 is within ``tol`` (2%) of the best;
- the **value of adaptivity** ``1 - P99_adaptive / P99_static`` (the relative
  P99 cut of an adaptive schedule against best static), with a percentile
  bootstrap CI over windows: each replicate draws windows with replacement
  (seeded) and recomputes both P99s over the pooled requests of the drawn
  windows (each request weighted by how often its window was drawn; the
  weighted quantile is the inverted CDF: the smallest sojourn whose
  cumulative weight reaches q of the total).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np
import polars as pl

from helm_plan.config import require_range
from helm_plan.errors import ConfigError


def regret(p99_ms: np.ndarray | float, p99_star_ms: np.ndarray | float) -> np.ndarray:
    """P99(r)/P99(r*) - 1, elementwise."""
    return np.asarray(p99_ms, np.float64) / np.asarray(p99_star_ms, np.float64) - 1.0


def ratio_distance(r: np.ndarray | float, r_star: np.ndarray | float) -> np.ndarray:
    """|r - r*|, elementwise."""
    return np.abs(np.asarray(r, np.float64) - np.asarray(r_star, np.float64))


def flat_band(ratios: np.ndarray, p99_ms: np.ndarray, tol: float) -> tuple[float, float]:
    """(lowest, highest) r whose P99 is within ``tol`` of the lowest P99 (NaN P99s ignored).

    The one flatness definition: the oracle's labels, best static and the
    report all use it. (NaN, NaN) when no P99 is finite.
    """
    r = np.asarray(ratios, np.float64)
    p = np.asarray(p99_ms, np.float64)
    ok = np.isfinite(p)
    if not ok.any():
        return float("nan"), float("nan")
    near = r[ok & (p <= p[ok].min() * (1.0 + tol))]
    return float(near.min()), float(near.max())


def flatness(ratios: np.ndarray, p99_ms: np.ndarray, tol: float) -> float:
    """Width of :func:`flat_band`: how far r can move and keep P99 within ``tol`` of the best."""
    lo, hi = flat_band(ratios, p99_ms, tol)
    return hi - lo


CLIFF_FACTOR = 1.5
"""A grid cell whose end P99s differ by more than this factor holds a cliff: no interpolation."""


def window_regret(
    grid_r: np.ndarray,
    grid_p99_ms: np.ndarray,
    ratios: np.ndarray,
    r_star: np.ndarray,
    p99_star_ms: np.ndarray,
) -> np.ndarray:
    """Per-window regret ``P99_w(r) / P99_w(r*) − 1`` where it is defined.

    ``P99_w(r*)`` is the label's best P99. ``P99_w(r)`` is the label's own
    value when ``r`` is ``r*`` or a grid point (so the oracle schedule's regret
    is exactly 0); else it is interpolated linearly inside the grid cell around
    ``r``, unless that cell holds a cliff (its end P99s differ by more than
    :data:`CLIFF_FACTOR`), where a line says nothing and the regret is NaN.
    ``grid_p99_ms`` has shape (windows, len(grid_r)).
    """
    g = np.asarray(grid_p99_ms, np.float64)
    gr = np.asarray(grid_r, np.float64)
    return window_regret_points([gr] * g.shape[0], list(g), ratios, r_star, p99_star_ms)


def window_regret_points(
    points_r: list[np.ndarray],
    points_p99_ms: list[np.ndarray],
    ratios: np.ndarray,
    r_star: np.ndarray,
    p99_star_ms: np.ndarray,
) -> np.ndarray:
    """:func:`window_regret` over each window's own evaluated points (sorted ratios).

    The points a label's search evaluated (labels without a grid) play the grid's part:
    exact on a point, interpolated inside a cell without a cliff, else NaN.
    """
    out = np.full(len(points_r), np.nan)
    for w in range(len(points_r)):
        gr = np.asarray(points_r[w], np.float64)
        g = np.asarray(points_p99_ms[w], np.float64)
        r, rs, best = float(ratios[w]), float(r_star[w]), float(p99_star_ms[w])
        if not (np.isfinite(r) and np.isfinite(best) and best > 0):
            continue
        if np.isfinite(rs) and abs(r - rs) < 1e-9:
            out[w] = 0.0
            continue
        k = int(np.searchsorted(gr, r))
        if k < len(gr) and abs(gr[k] - r) < 1e-9:
            p = g[k]
        elif 0 < k < len(gr):
            lo, hi = g[k - 1], g[k]
            if not (np.isfinite(lo) and np.isfinite(hi)) or max(lo, hi) > CLIFF_FACTOR * min(
                lo, hi
            ):
                continue
            p = lo + (hi - lo) * (r - gr[k - 1]) / (gr[k] - gr[k - 1])
        else:
            continue
        out[w] = p / best - 1.0
    return out


def weighted_quantile(sorted_x: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Inverted-CDF quantile of sorted values with non-negative weights."""
    cw = np.cumsum(weights)
    if cw[-1] <= 0:
        return float("nan")
    i = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(sorted_x[min(i, len(sorted_x) - 1)])


@nb.njit(cache=True)
def _boot_quantiles(sorted_x, win, mult, counts, q):  # noqa: ANN001, ANN202
    """Inverted-CDF quantile per replicate: request i weighs ``mult[b, win[i]]``.

    The quantile of a P99 sits in the top 1%, so each replicate walks down from
    the largest value until the weight below falls short of ``q`` of the total:
    O(top 1%) per replicate instead of a cumulative sum over every request. The
    weights are integers (multiplicities), so the comparisons are exact and the
    answer is :func:`weighted_quantile`'s.
    """
    n_boot, n_w = mult.shape
    out = np.empty(n_boot)
    for b in range(n_boot):
        total = 0.0
        for w in range(n_w):
            total += mult[b, w] * counts[w]
        target = q * total
        tail = 0.0
        i = sorted_x.shape[0] - 1
        while i > 0:
            wi = mult[b, win[i]]
            if total - tail - wi >= target:
                tail += wi
                i -= 1
            else:
                break
        out[b] = sorted_x[i] if total > 0 else np.nan
    return out


@dataclass(frozen=True)
class AdaptivityCI:
    """Value of adaptivity (relative P99 cut vs static) with a bootstrap CI over windows."""

    value: float
    """1 - P99_adaptive / P99_static on all windows."""
    lo: float
    """Lower CI bound."""
    hi: float
    """Upper CI bound."""
    level: float
    """Confidence level, e.g. 0.95."""
    static_p99_ms: float
    """Static P99 on all windows, ms."""
    adaptive_p99_ms: float
    """Adaptive P99 on all windows, ms."""
    n_boot: int
    """Bootstrap replicates."""
    n_windows: int
    """Windows resampled."""


def adaptivity_ci(
    static_sojourn_s: np.ndarray,
    adaptive_sojourn_s: np.ndarray,
    window_idx: np.ndarray,
    *,
    q: float = 0.99,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> AdaptivityCI:
    """Bootstrap CI over windows of ``1 - P_q(adaptive)/P_q(static)`` (same requests, same windows)."""
    s = np.asarray(static_sojourn_s, np.float64)
    a = np.asarray(adaptive_sojourn_s, np.float64)
    w = np.asarray(window_idx, np.int64)
    if not (len(s) == len(a) == len(w)) or len(s) == 0:
        raise ConfigError(
            f"adaptivity_ci needs equal non-empty arrays, got {len(s)}, {len(a)}, {len(w)}",
            hint="pass the two policies' sojourns of the same requests",
        )
    require_range("level", level, 0.0, 1.0)
    require_range("q", q, 0.0, 1.0)
    if n_boot <= 0:
        raise ConfigError(f"n_boot must be positive, got {n_boot}", hint="set n_boot > 0")
    wins, wdense = np.unique(w, return_inverse=True)
    n_w = len(wins)
    os_, oa = np.argsort(s, kind="stable"), np.argsort(a, kind="stable")
    s_sorted, a_sorted = s[os_], a[oa]
    ws, wa = wdense[os_], wdense[oa]
    ones = np.ones(n_w)
    s_all = weighted_quantile(s_sorted, ones[ws], q)
    a_all = weighted_quantile(a_sorted, ones[wa], q)
    rng = np.random.default_rng(seed)
    mult = np.empty((n_boot, n_w), np.float64)
    for b in range(n_boot):  # one draw of n_w windows per replicate (the seeded stream)
        mult[b] = np.bincount(rng.integers(0, n_w, n_w), minlength=n_w)
    counts = np.bincount(wdense, minlength=n_w).astype(np.float64)
    vals = 1.0 - _boot_quantiles(a_sorted, wa, mult, counts, q) / _boot_quantiles(
        s_sorted, ws, mult, counts, q
    )
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(vals, [alpha, 1.0 - alpha])
    return AdaptivityCI(
        value=1.0 - a_all / s_all,
        lo=float(lo),
        hi=float(hi),
        level=level,
        static_p99_ms=s_all * 1e3,
        adaptive_p99_ms=a_all * 1e3,
        n_boot=n_boot,
        n_windows=n_w,
    )


def sensitivity_table(
    labels_table: pl.DataFrame, ratios: np.ndarray, grid_r: np.ndarray
) -> pl.DataFrame:
    """Per-window |r - r*|, regret and flatness for a ratio schedule.

    Regret as :func:`window_regret` over the coarse grid ``grid_r``; labels without a
    grid (``grid_r`` empty) interpolate between each window's evaluated points instead
    (:func:`window_regret_points`).
    """
    r_star = labels_table["r_star"].to_numpy()
    p_star = labels_table["p99_ms"].to_numpy()
    x = np.asarray(ratios, np.float64)
    if len(grid_r) == 0 and "evals_r" in labels_table.columns:
        regret = window_regret_points(
            [np.asarray(v, np.float64) for v in labels_table["evals_r"].to_list()],
            [np.asarray(v, np.float64) for v in labels_table["evals_p99_ms"].to_list()],
            x, r_star, p_star,
        )  # fmt: skip
    else:
        cols = [f"p99_ms_r{round(r * 100):03d}" for r in grid_r]
        g = labels_table.select(cols).to_numpy()
        regret = window_regret(np.asarray(grid_r), g, x, r_star, p_star)
    return pl.DataFrame(
        {
            "window": labels_table["window"],
            "ratio": x,
            "r_star": labels_table["r_star"],
            "ratio_distance": ratio_distance(ratios, labels_table["r_star"].to_numpy()),
            "regret": regret,
            "flatness": labels_table["flatness"],
        }
    )
