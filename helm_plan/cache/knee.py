"""Knee of a hit-rate curve (Kneedle, Satopaa et al., ICDCS-W 2011, offline form).

Both axes are normalised to [0, 1]; for a concave increasing curve the knee is
the point farthest above the chord from the first to the last point, i.e. the
argmax of ``y_n - x_n``. A flat curve (range below ``min_range``) or one that
never rises above its chord (linear or convex) has no knee.
"""

from __future__ import annotations

import numpy as np


def kneedle(x: np.ndarray, y: np.ndarray, *, min_range: float = 1e-9) -> int | None:
    """Index of the knee of increasing ``y(x)``, or None if there is none."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return None
    idx = np.flatnonzero(ok)
    xs, ys = x[ok], y[ok]
    xr = xs[-1] - xs[0]
    yr = ys.max() - ys.min()
    if xr <= 0 or yr < min_range:
        return None
    diff = (ys - ys.min()) / yr - (xs - xs[0]) / xr
    k = int(np.argmax(diff))
    if diff[k] <= 1e-12:
        return None
    return int(idx[k])
