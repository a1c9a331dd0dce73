"""One fleet at one load: does a policy meet "P99 ≤ T and attainment ≥ A"?

Every size the plan's search tries and every point of the load curve is one
call of :func:`meets`.

``best-static`` asks a different question here than in ``cluster``: not
"which r has the lowest P99" but "**is there** one fleet-wide static r that
meets the SLO", which is what sizing needs (an operator deploys any split
that meets it). The caller's hint (the r that passed at a neighbouring size
or load) is tried first, then the search's points nearest it, and the first
that passes answers, so a passing size usually costs one simulation. A size
fails only after the hint and the whole search
:func:`~helm_plan.cluster.policies.fleet_best_static` runs failed
(:func:`~helm_plan.oracle.search.static_search`: the oracle's coarse grid and
edge points, then its bracketing search from the lowest P99 down to the
``ratio_step`` lattice where a side is not flat).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from helm_plan.cluster import ClusterConfig
from helm_plan.cluster.compare import run_point
from helm_plan.oracle import OracleConfig
from helm_plan.oracle.search import Eval, rank_key, static_eval, static_search
from helm_plan.plan.config import BASELINE_POLICY, PlanConfig
from helm_plan.plan.search import Point
from helm_plan.policies.specs.static import Static
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext


@dataclass(frozen=True, eq=False)
class Evaluation:
    """One fleet size (or load) under one policy and router."""

    passes: bool
    """P99 ≤ SLO and attainment ≥ the target (NaN fails)."""
    p99_ms: float
    """Fleet-wide P99 sojourn of the measured requests, ms."""
    slo_attainment: float
    """Share of measured requests within the SLO."""
    sojourn_s: np.ndarray
    """Sojourn per measured request, s."""
    window_idx: np.ndarray
    """Window of each measured request."""
    ratio: float
    """The static r behind a ``best-static`` answer (NaN for other policies)."""
    simulations: int
    """Cluster simulations this answer took."""


def _one(ctx, ccfg, spec, oracle, attainment) -> Evaluation:
    pt = run_point(ctx, ccfg, spec, oracle)
    p99, att = float(pt.overall["p99_ms"]), float(pt.overall["slo_attainment"])
    ok = bool(p99 <= ccfg.node.slo_ms and att >= attainment)
    return Evaluation(ok, p99, att, pt.sojourn_s, pt.window_idx, math.nan, 1)


class _Passed(Exception):
    """Ends the best-static search at its first passing r."""

    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__()
        self.evaluation = evaluation


def meets(
    ctx: NodeContext,
    ccfg: ClusterConfig,
    spec: str,
    oracle: OracleConfig,
    attainment: float,
    hint: float = 0.5,
) -> Evaluation:
    """Serve ``ctx`` on ``ccfg`` under ``spec``; ``best-static`` searches as the module says."""
    if spec != BASELINE_POLICY:
        return _one(ctx, ccfg, spec, oracle, attainment)
    tried: dict[float, Evaluation] = {}
    evals: dict[float, Eval] = {}

    def attempt(rs: list[float]) -> None:
        for r in sorted(rs, key=lambda r: (abs(r - hint), r)):
            if r in tried:
                continue
            ev = _one(ctx, ccfg, Static(r).spec, oracle, attainment)
            tried[r] = Evaluation(ev.passes, ev.p99_ms, ev.slo_attainment, ev.sojourn_s,
                                  ev.window_idx, r, len(tried) + 1)  # fmt: skip
            evals[r] = static_eval(ev.p99_ms, ev.slo_attainment)
            if ev.passes:
                raise _Passed(tried[r])

    try:
        # the hint first, on the grid or not: a split that passed at the neighbouring size
        # usually passes here, and off the grid (r = 0.01 below a cliff) the search would
        # otherwise simulate every grid point before its bracket comes back to it
        if math.isfinite(hint) and 0.0 <= hint <= 1.0:
            attempt([round(float(hint), 9)])
        static_search(attempt, evals, oracle)
    except _Passed as p:
        found = p.evaluation
    else:  # no r passes: the lowest-P99 r (the fleet search's order), failing
        e = tried[min(evals, key=lambda r: rank_key(r, evals[r]))]
        found = Evaluation(False, e.p99_ms, e.slo_attainment, e.sojourn_s, e.window_idx,
                           e.ratio, len(tried))  # fmt: skip
    return Evaluation(found.passes, found.p99_ms, found.slo_attainment, found.sojourn_s,
                      found.window_idx, found.ratio, len(tried))  # fmt: skip


def evaluate_size(
    ctx: NodeContext, ncfg: NodeConfig, cfg: PlanConfig, spec: str, router: str, n: int,
    hint: float = 0.5,
) -> tuple[Point, tuple[np.ndarray, np.ndarray, float]]:  # fmt: skip
    """One fleet size: its Point and its per-window (requests, within-SLO, best-static r)."""
    ccfg = ClusterConfig(nodes=n, router=router, node=ncfg, seed=cfg.seed)
    ev = meets(ctx, ccfg, spec, cfg.oracle, cfg.attainment, hint=hint)
    n_w = ctx.n_windows(ncfg.window_s)
    size = np.bincount(ev.window_idx, minlength=n_w).astype(np.int64)
    met = np.bincount(ev.window_idx, weights=ev.sojourn_s <= ncfg.slo_ms / 1e3,
                      minlength=n_w).astype(np.int64)  # fmt: skip
    return Point(n, ev.passes, ev.p99_ms, ev.slo_attainment, ev.ratio), (size, met, ev.ratio)
