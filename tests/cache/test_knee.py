"""Kneedle (cache/knee.py) against a plain-Python re-derivation of the paper's offline form.

The reference normalises both axes by hand (x from its first point, y from its minimum), takes
the point farthest above the chord and drops non-finite points, on curves that do not start at
the origin, so an offset or a wrong end point changes the answer. The edge cases pin the
thresholds: three finite points are enough, a range equal to ``min_range`` still counts, and a
point 1e-12 above the chord is not a knee.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helm_plan.cache.knee import kneedle


def _reference(x: list[float], y: list[float], min_range: float = 1e-9) -> int | None:
    pts = [
        (i, a, b)
        for i, (a, b) in enumerate(zip(x, y, strict=True))
        if math.isfinite(a) and math.isfinite(b)
    ]
    if len(pts) < 3:
        return None
    x0, x1 = pts[0][1], pts[-1][1]
    lo, hi = min(p[2] for p in pts), max(p[2] for p in pts)
    if x1 - x0 <= 0 or hi - lo < min_range:
        return None
    best, best_d = None, -math.inf
    for i, a, b in pts:
        d = (b - lo) / (hi - lo) - (a - x0) / (x1 - x0)
        if d > best_d:
            best, best_d = i, d
    return best if best_d > 1e-12 else None


@pytest.mark.parametrize("seed", range(12))
def test_kneedle_matches_reference_on_offset_curves(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 30))
    x = np.sort(rng.uniform(5.0, 25.0, n))  # log-capacity-like: far from 0
    y = 0.3 + 0.6 * (1 - np.exp(-rng.uniform(0.05, 2.0) * (x - x[0]))) + rng.normal(0, 0.02, n)
    if seed % 3 == 0:  # a non-finite point in x or y is dropped, not used
        y[int(rng.integers(1, n - 1))] = np.nan
    if seed % 3 == 1:
        x[int(rng.integers(1, n - 1))] = np.inf
    want = _reference(x.tolist(), y.tolist())
    assert want is not None
    assert kneedle(x, y) == want


def test_kneedle_last_point_sets_the_chord():
    # The chord ends at the last point: with x_n from the true end, index 2 is the knee
    # (diff 0.9 - 2/3 > 0.5 - 1/3); measured to the second-to-last point it would be index 1.
    x = np.array([10.0, 11.0, 12.0, 13.0])
    y = np.array([0.0, 0.5, 0.9, 1.0])
    assert kneedle(x, y) == _reference(x.tolist(), y.tolist()) == 2


def test_kneedle_nan_in_x_only_is_dropped():
    x = np.array([0.0, 1.0, np.nan, 3.0, 4.0])
    y = np.array([0.0, 0.8, 0.95, 0.97, 1.0])
    assert kneedle(x, y) == 1


def test_kneedle_thresholds():
    # three finite points are enough
    assert kneedle(np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.9, 1.0])) == 1
    # all x equal: no chord, no knee (not a division by zero)
    assert kneedle(np.full(4, 3.0), np.array([0.0, 0.5, 0.9, 1.0])) is None
    # a y range exactly equal to min_range still counts
    assert kneedle(np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.45, 0.5]), min_range=0.5) == 1
    # a point exactly 1e-12 above the chord is not a knee
    assert kneedle(np.array([0.0, 1.0, 2.0]), np.array([1e-12, 0.0, 1.0])) is None


def test_kneedle_offset_line_has_no_knee():
    # A straight line that does not start at 0 is still its own chord: no knee.
    x = np.linspace(0.0, 1.0, 11)
    assert kneedle(x, 0.3 + 0.5 * x) is None
