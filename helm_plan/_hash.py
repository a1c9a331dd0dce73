"""The one integer hash of helm-plan: SplitMix64's finaliser, and the counter-based draw on it.

The implicit-candidate draw (:mod:`helm_plan.cache._kernels`) and the routers' random picks
and ring positions (:mod:`helm_plan.cluster.routers.base`) key a draw by ``(seed, a, b)`` rather than
by a stream position, so a replay span or a router decision never depends on what was drawn
for another request. The hashed tables' rows (:func:`helm_plan.cache.keys.splitmix64`) run the
same finaliser over numpy arrays through ``mix64.py_func``. One source, so the three cannot
drift apart; ``tests/brute.py`` and ``tests/brute_cluster.py`` recompute it in plain Python.
"""

from __future__ import annotations

import numba as nb
import numpy as np

M1 = np.uint64(0x9E3779B97F4A7C15)
M2 = np.uint64(0xBF58476D1CE4E5B9)
M3 = np.uint64(0x94D049BB133111EB)


@nb.njit(cache=True, inline="always")
def mix64(z):  # noqa: ANN001, ANN201
    """SplitMix64's finaliser (uint64 in, uint64 out)."""
    z = (z ^ (z >> np.uint64(30))) * M2
    z = (z ^ (z >> np.uint64(27))) * M3
    return z ^ (z >> np.uint64(31))


@nb.njit(cache=True, inline="always")
def counter_hash(seed, a, b):  # noqa: ANN001, ANN201
    """A well-mixed uint64 keyed by ``(seed, a, b)`` (wrapping uint64 arithmetic)."""
    return mix64(np.uint64(seed) * M1 + np.uint64(a) * M2 + np.uint64(b) + M3)
