"""The flat band of chosen windows, resolved on the ratio lattice (what |r − r*| is measured to).

A window's label stores the flat band (:func:`~helm_plan.oracle.sensitivity.flat_band`) over
the points its search evaluated: the coarse grid, the edge points, the Optuna trials. Where
the search evaluated one point of a plateau, the band looks narrow though every r of the
plateau serves as well. The contested case's regime A is one: the window's P99 is the same
for every r in [0.01, 0.07] (the users fit the KV cache; EMB hits do not set the P99), the
search evaluated 0.02 there and 0.0 and 0.1 beside it, and the label says r* = 0.02 with a
band [0.02, 0.02]; a controller serving 0.07 lost nothing yet counted 0.05 off.

:func:`resolve_bands` makes the band of the chosen windows as fine as the ``ratio_step``
lattice: it replays the labelled schedule with the carry oracle's node (lazy refill, exactly
the node each window's search forked, :mod:`helm_plan.oracle.carry`) and, at each chosen
window, bisects each edge of the label's band between its outermost point inside and the
nearest evaluated point outside (:meth:`~helm_plan.oracle.labels.Labels.points`: the coarse
grid of training labels, every point of analyze's; 0 and 1 where none), each probe one step
of a fork of that node, so a probe's P99 is the one the search would have seen there. The
band is the label's: every r whose P99 is within ``flat_tol`` of the label's best. Each edge
found is a lattice point in the band whose neighbour outwards is not; where P99 crosses the
tolerance more than once between the two points, the bisection finds one of the crossings
(the oracle's own bracketing assumes the same). Carry labels only: window-mode labels start
each window from its own warm-up, not from a schedule.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from helm_plan.errors import ConfigError
from helm_plan.oracle.carry import _keep
from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.labels import Labels
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.step import NodeRunner


@dataclass(frozen=True)
class Bands:
    """Per window: the resolved band (NaN where not resolved) and the probes it took."""

    lo: np.ndarray
    hi: np.ndarray
    probes: int
    """Window steps evaluated in all (each one window of a fork of the carried node)."""


def _edge(inside: float, outside: float, ok: Callable[[float], bool], step: float) -> float:
    """The last of ``inside``, the lattice points strictly between, ``outside`` (in that order)
    for which ``ok`` holds, by bisection (``ok(inside)`` is known true, ``ok(outside)`` false)."""
    k0, k1 = sorted((inside / step, outside / step))
    ks = range(math.floor(k0) + 1, math.ceil(k1))
    between = [round(k * step, 9) for k in ks if k0 < k < k1]
    pts = [inside, *(between if outside > inside else between[::-1]), outside]
    a, b = 0, len(pts) - 1
    while b - a > 1:
        m = (a + b) // 2
        if ok(pts[m]):
            a = m
        else:
            b = m
    return pts[a]


def resolve_bands(
    ctx: NodeContext,
    ncfg: NodeConfig,
    labels: Labels,
    ocfg: OracleConfig,
    windows: np.ndarray,
) -> Bands:
    """The flat band of each window where ``windows`` (a bool mask) is set, resolved on the
    ``ratio_step`` lattice (module docstring); the other windows' entries are NaN."""
    if ocfg.warmup != "carry":
        raise ConfigError(
            f"resolving the flat band needs carry labels, got warmup={ocfg.warmup!r}",
            hint="label with OracleConfig(warmup='carry') (the default)",
        )
    step = ocfg.ratio_step or 0.01
    t = labels.table
    r_star = t["r_star"].to_numpy()
    best_p99 = t["p99_ms"].to_numpy()
    flat_lo, flat_hi = t["r_flat_lo"].to_numpy(), t["r_flat_hi"].to_numpy()
    pts = labels.points()
    by_w = dict(zip(*pts.group_by("window").agg("ratio").to_dict().values(), strict=True))
    node = NodeRunner(ctx, dataclasses.replace(ncfg, refill="lazy"))
    lo = np.full(node.n_windows, np.nan)
    hi = np.full(node.n_windows, np.nan)
    probes = 0
    for w in range(node.n_windows):
        r = r_star[w]
        if not np.isfinite(r):  # an empty window runs at the current ratio (carry_rows)
            node.step(_keep(node))
            continue
        if windows[w] and np.isfinite(flat_lo[w]):

            def ok(x: float, limit: float = float(best_p99[w]) * (1.0 + ocfg.flat_tol)) -> bool:
                nonlocal probes
                probes += 1
                return bool(node.fork().step(x).p99_ms <= limit)

            grid = np.asarray(sorted({0.0, 1.0, *by_w.get(int(t["window"][w]), [])}))
            below, above = grid[grid < flat_lo[w]], grid[grid > flat_hi[w]]
            lo[w] = _edge(flat_lo[w], below[-1], ok, step) if len(below) else flat_lo[w]
            hi[w] = _edge(flat_hi[w], above[0], ok, step) if len(above) else flat_hi[w]
        node.step(r)
    return Bands(lo=lo, hi=hi, probes=probes)


def distance_to_band(r: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """|r − r*| with r* the nearest ratio of the band [lo, hi]: 0 inside it."""
    r = np.asarray(r, np.float64)
    return np.maximum(np.maximum(lo - r, r - hi), 0.0)
