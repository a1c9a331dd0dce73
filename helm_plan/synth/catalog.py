"""Catalog size behind an observed distinct-item count (``synth --like --scale``).

A trace of ``T`` history items shows ``D`` distinct items, fewer than the
catalog ``C`` it was drawn from: the Zipf tail is mostly unseen. Scaling a
trace by ``K`` (K x users, requests, items drawn) keeps its shape only if the
*catalog* scales by ``K``: a catalog of ``K·D`` would be seen almost entirely
and lose the tail. So ``--like`` estimates ``C`` as the catalog whose expected
distinct count at ``T`` draws of the synth Zipf(alpha) equals ``D``:

    E[D](C) = Σ_{k=1..C} 1 - (1 - p_k)^T,   p_k = ∫_{k-1/2}^{k+1/2} x^-α dx / ∫_{1/2}^{C+1/2} x^-α dx

(the rank pmf of :func:`helm_plan.synth.zipf_ranks`), and scales it to
``K·C``. Under Zipf, ``K·C`` items and ``K·T`` draws show about ``K·D``
distinct items (exact as C, T grow for alpha < 1; close above), with the same
skew. ``E[D]`` is evaluated exactly over the first ``EXACT_RANKS`` ranks and by
a log-spaced quadrature of the same (smooth, monotone) summand beyond, so a
10^9-item catalog costs what a 10^5 one does. ``C`` is found by bisection
(``E[D]`` increases with ``C``). When no catalog up to ``MAX_FACTOR·D``
reaches ``D`` (a steep fitted skew with many distinct items), the observed
``D`` is used, as before this estimate existed, and the fit says so.
"""

from __future__ import annotations

import math

import numpy as np

#: Ranks whose terms are summed exactly; the tail is integrated.
EXACT_RANKS = 100_000
#: Largest catalog considered, as a multiple of the distinct items seen.
MAX_FACTOR = 1_000
_NODES = 4_001  # log-spaced quadrature nodes for the tail


def _cdf(x: np.ndarray | float, alpha: float) -> np.ndarray | float:
    """An antiderivative of x^-alpha."""
    e = 1.0 - alpha
    if abs(e) < 1e-9:
        return np.log(x)
    return np.power(x, e) / e


def expected_distinct(catalog: int, draws: float, alpha: float) -> float:
    """Expected distinct ranks among ``draws`` Zipf(``alpha``) draws from ``catalog`` ranks."""
    if catalog <= 0 or draws <= 0:
        return 0.0
    z = float(_cdf(catalog + 0.5, alpha) - _cdf(0.5, alpha))
    k = np.arange(1, min(catalog, EXACT_RANKS) + 1, dtype=np.float64)
    p = (_cdf(k + 0.5, alpha) - _cdf(k - 0.5, alpha)) / z
    with np.errstate(divide="ignore"):  # p = 1 (one rank): log1p(-1) = -inf, term 1
        total = float(-np.expm1(draws * np.log1p(-p)).sum())
    if catalog > EXACT_RANKS:
        # Σ_{k > EXACT} g(k) ≈ ∫_{EXACT+1/2}^{C+1/2} g(x) dx, g(x) = 1 - (1 - x^-α/z)^T, by the
        # trapezoid rule in s = ln x (g is smooth and monotone; the first neglected term of
        # the midpoint-sum expansion is ~g''/24, far below one item).
        s = np.linspace(math.log(EXACT_RANKS + 0.5), math.log(catalog + 0.5), _NODES)
        x = np.exp(s)
        g = -np.expm1(draws * np.log1p(-np.power(x, -alpha) / z)) * x
        total += float(np.sum((g[1:] + g[:-1]) * 0.5 * np.diff(s)))
    return total


def estimate_catalog(distinct: int, draws: int, alpha: float) -> tuple[int, str]:
    """(catalog size, method): the ``C`` with ``E[D](C) = distinct`` at ``draws`` draws.

    method is ``"zipf"`` for the estimate, ``"distinct"`` when no catalog up to
    ``MAX_FACTOR·distinct`` reaches ``distinct`` (then the catalog is ``distinct``).
    """
    if distinct <= 1 or draws <= 0:
        return max(distinct, 1), "distinct"
    lo, hi = distinct, distinct * MAX_FACTOR
    if expected_distinct(hi, draws, alpha) < distinct:
        return distinct, "distinct"
    while hi - lo > max(1, lo // 10_000):  # 0.01% is far inside the estimate's noise
        mid = (lo + hi) // 2
        if expected_distinct(mid, draws, alpha) < distinct:
            lo = mid
        else:
            hi = mid
    return hi, "zipf"
