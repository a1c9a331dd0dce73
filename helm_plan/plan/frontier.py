"""What a planner asks after "how many": the cost–latency frontier and the headroom.

- **Frontier.** Per GPU kind, its cheapest combination (fewest nodes, then the
  lowest P99) at ``N − 1`` (fails), ``N``, ``N + 1`` and ``N + 2`` nodes: what
  one more or two more GPUs buy in P99 and attainment, at what price. The
  search already evaluated ``N − 1``, ``N`` and ``N + 1``; the rest are
  evaluated here, with the search's own function, so every point of the chart
  is a simulation, never an extrapolation.
- **Headroom.** How much the planned traffic can grow before that fleet of
  ``N`` needs ``N + 1``: the largest growth ``g`` at which the traffic scaled
  by ``K·(1 + g)`` (the same traffic model and seed, so the grown trace holds
  every planned request and more) still meets the SLO on ``N`` nodes as
  planned: the same router and policy, and ``best-static`` at the split the
  plan chose at ``N`` (a static split is set once and not re-tuned as the
  traffic grows; searching r again at every growth would credit the fleet with
  an offline re-tuning nobody deploys, and cost a whole static search per
  failing step, ~14 simulations instead of one). Found by doubling from ``1/N``
  (one node's worth) up to :data:`MAX_GROWTH`, then ``steps`` bisections;
  reported as the bracket ``[g_lo, g_hi)`` (``g_lo`` passes, ``g_hi`` fails),
  or as ``>= MAX_GROWTH`` when even that passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from helm_plan.arrays import TraceArrays
from helm_plan.plan.config import BASELINE_POLICY, PlanConfig
from helm_plan.plan.dense import scale_arrays
from helm_plan.plan.evaluate import evaluate_size
from helm_plan.plan.gpus import GpuSetup
from helm_plan.plan.scale import MAX_FACTOR
from helm_plan.plan.search import Point, cost
from helm_plan.policies.specs.static import Static
from helm_plan.pool import Pool
from helm_plan.profiles import ModelProfile
from helm_plan.sim import NodeConfig
from helm_plan.sim.context import prepare_context

MAX_GROWTH = 1.0
"""Largest traffic growth the headroom search tries (+100%)."""
FRONTIER_DEPTH = 2
"""Sizes past the minimal fleet the frontier shows (N + 1, N + 2)."""


def cheapest(rows: list[dict]) -> dict | None:
    """The cheapest passing row of one GPU kind: fewest nodes, then the lowest P99, then the
    listing order (rows are GPU × policy × router in plan order)."""
    ok = [r for r in rows if r["nodes"] is not None]
    return min(ok, key=lambda r: (r["nodes"], r["p99_ms"])) if ok else None


def frontier_sizes(n: int, max_nodes: int, evaluated: Sequence[int]) -> list[int]:
    """The sizes past ``n`` the frontier needs that the search did not evaluate."""
    return [m for m in range(n + 1, n + 1 + FRONTIER_DEPTH) if m <= max_nodes and m not in
            evaluated]  # fmt: skip


def frontier_table(
    points: dict[tuple[str, str, str], dict[int, Point]], chosen: dict[str, tuple[str, str, int]],
    prices: dict[str, float], qps: float,
) -> pl.DataFrame:  # fmt: skip
    """Rows gpu, policy, router, nodes, step (−1, 0, 1, 2 from N), passes, p99_ms,
    slo_attainment, usd_per_day, usd_per_million_requests for each GPU's cheapest combo."""
    rows = []
    for gpu, (policy, router, n) in chosen.items():
        at = points[(gpu, policy, router)]
        for m in range(max(n - 1, 1), n + 1 + FRONTIER_DEPTH):
            if m not in at:
                continue
            p, c = at[m], cost(m, prices[gpu], qps)
            rows.append({"gpu": gpu, "policy": policy, "router": router, "nodes": m,
                         "step": m - n, "passes": p.passes, "p99_ms": p.p99_ms,
                         "slo_attainment": p.slo_attainment, "usd_per_day": c.usd_per_hour * 24,
                         "usd_per_million_requests": c.usd_per_million_requests})  # fmt: skip
    schema = {"gpu": pl.String, "policy": pl.String, "router": pl.String, "nodes": pl.Int64,
              "step": pl.Int64, "passes": pl.Boolean, "p99_ms": pl.Float64,
              "slo_attainment": pl.Float64, "usd_per_day": pl.Float64,
              "usd_per_million_requests": pl.Float64}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


@dataclass(frozen=True)
class HeadroomSetup:
    """What the headroom search needs: the trace as given and how it was planned."""

    trace: TraceArrays
    """The input trace (before scaling)."""
    model: ModelProfile
    cfg: PlanConfig
    node: NodeConfig
    factor: float
    """K of the planned traffic."""
    steps: int
    """Bisections after the bracket."""


@dataclass(frozen=True)
class Headroom:
    """Traffic growth one fleet absorbs before it needs one more node."""

    gpu: str
    policy: str
    router: str
    nodes: int
    growth_lo: float
    """Largest growth that passed (0: the planned traffic itself)."""
    growth_hi: float
    """Smallest growth that failed (NaN: none failed up to MAX_GROWTH)."""
    simulations: int


def headroom_task(
    shared: HeadroomSetup, item: tuple[GpuSetup, Pool, str, str, int, float]
) -> Headroom:
    """Bracket and bisect the growth of one fleet (an executor task: one GPU kind); ``hint``
    is the r the plan chose at ``n`` (``best-static`` keeps it: see the module docstring)."""
    setup, pool, spec, router, n, hint = item
    s = shared
    sims = [0]
    run_spec = Static(hint).spec if spec == BASELINE_POLICY and 0.0 <= hint <= 1.0 else spec

    def passes(g: float) -> bool:
        k = s.factor * (1.0 + g)
        if k > MAX_FACTOR:
            return False
        t, _ = scale_arrays(s.trace, k, by=s.cfg.scale_by, window_s=s.node.window_s,
                            seed=s.cfg.seed)  # fmt: skip
        ctx = prepare_context(t, setup.gpu, s.model, setup.latency, pool=pool,
                              latency_profile=setup.latency_profile)  # fmt: skip
        sims[0] += 1
        return evaluate_size(ctx, s.node, s.cfg, run_spec, router, n, hint)[0].passes

    lo, hi = 0.0, math.nan
    g = 1.0 / n
    while True:
        g = min(g, MAX_GROWTH)
        if not passes(g):
            hi = g
            break
        lo = g
        if g >= MAX_GROWTH:
            break
        g *= 2.0
    if hi == hi:
        for _ in range(s.steps):
            mid = (lo + hi) / 2.0
            if passes(mid):
                lo = mid
            else:
                hi = mid
    return Headroom(setup.gpu.name, spec, router, n, lo, hi, sims[0])


def headroom_table(rows: Sequence[Headroom], peak_qps: float) -> pl.DataFrame:
    """gpu, policy, router, nodes, growth_lo, growth_hi (null when capped), peak_qps_lo (the
    planned peak grown by growth_lo), capped (no failure up to MAX_GROWTH), simulations."""
    schema = {"gpu": pl.String, "policy": pl.String, "router": pl.String, "nodes": pl.Int64,
              "growth_lo": pl.Float64, "growth_hi": pl.Float64, "peak_qps_lo": pl.Float64,
              "capped": pl.Boolean, "simulations": pl.Int64}  # fmt: skip
    return pl.DataFrame(
        [{"gpu": h.gpu, "policy": h.policy, "router": h.router, "nodes": h.nodes,
          "growth_lo": h.growth_lo, "growth_hi": None if np.isnan(h.growth_hi) else h.growth_hi,
          "peak_qps_lo": peak_qps * (1.0 + h.growth_lo), "capped": bool(np.isnan(h.growth_hi)),
          "simulations": h.simulations} for h in rows],
        schema=schema,
    )  # fmt: skip


__all__ = ["FRONTIER_DEPTH", "MAX_GROWTH", "Headroom", "frontier_table", "headroom_table"]
