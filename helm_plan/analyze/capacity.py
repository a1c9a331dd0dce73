"""The capacity stage of ``analyze``: plan first, then pick the operating point that matters.

``analyze`` used to compare policies at whatever load the trace put on one
GPU, usually a few percent busy, where no split can matter. Now it plans
first (:func:`helm_plan.plan.plan`, the analysed GPU only, the given SLO, the
traffic of ``--peak-qps`` / ``--scale``) and derives:

- the **operating fleet** N: the fewest nodes that meet the SLO with best
  static behind ``jsq`` (the baseline every saving is measured from);
- the **per-node share** of the planned traffic at N, ``factor / N`` of the
  trace (users scaling): the oracle and the policy comparison run on one node
  carrying it, which is what one node of the SLO-binding fleet serves;
- the **routing comparison** at N nodes (every planned router under the
  cheapest policy), when N ≥ 2; with one node routing does not apply.

When the trace's whole EMB+KV footprint fits in one pool, the split does not
matter (every r that gives each cache its footprint serves every hit), so
the oracle runs its coarse grid only; :func:`oracle_shortcut` says what that
saved.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

from helm_plan.cluster import ClusterConfig
from helm_plan.cluster.compare import compare
from helm_plan.exec import Executor, Progress
from helm_plan.oracle import OracleConfig
from helm_plan.plan import PlanConfig, PlanResult, plan
from helm_plan.plan.config import BASELINE_POLICY
from helm_plan.plan.dense import scale_arrays
from helm_plan.report.tables import (
    CAPACITY,
    CAPACITY_EVALUATED,
    CAPACITY_GPUS,
    CAPACITY_SAVINGS,
    LOAD_CURVE,
    MAX_QPS,
    ROUTING,
    ROUTING_WINDOWS,
)
from helm_plan.sim import NodeConfig, NodeContext, prepare_context

ROUTING_COLUMNS = ("router", "policy", "nodes", "p50_ms", "p99_ms", "slo_attainment",
                   "throughput_rps", "emb_hit_rate", "kv_reuse_rate", "imbalance_max_mean",
                   "imbalance_cv", "ratio_spread")  # fmt: skip
"""Columns of the ``routing`` table (one row per router)."""


@dataclasses.dataclass(frozen=True)
class CapacityInputs:
    """What the capacity stage needs beyond the trace and the node context."""

    plan: PlanConfig
    """The plan (one GPU: the analysed one)."""
    node: NodeConfig
    """How each node serves (its SLO is the plan's)."""
    oracle: OracleConfig
    """The best-static grid of the routing comparison."""


@dataclasses.dataclass(frozen=True, eq=False)
class Capacity:
    """The plan and the operating point it picks for the rest of analyze."""

    result: PlanResult
    """The plan."""
    nodes: int | None
    """Operating fleet: best static behind jsq (None: nothing meets the SLO up to max_nodes)."""
    per_node_factor: float
    """The trace scaled by this is one node's share at the operating fleet."""
    routing: pl.DataFrame
    """ROUTING_COLUMNS at the operating fleet (empty with one node)."""
    routing_windows: pl.DataFrame
    """router, window, start_s, p99_ms, ratio_min, ratio_max, ratio_spread, work_max_mean."""


def _planned_context(res: PlanResult, ctx: NodeContext) -> NodeContext:
    """The trace as the plan scaled it (its config's seed and spill folder)."""
    cfg = res.config
    t, _ = scale_arrays(ctx.arrays, res.scaling.factor, by=res.scaling.method,
                        window_s=cfg.node.window_s, seed=cfg.seed,
                        spill_dir=cfg.spill_dir)  # fmt: skip
    return prepare_context(t, ctx.gpu, ctx.model, ctx.latency,
                           pool_bytes=ctx.pool_bytes, latency_profile=ctx.latency_profile)  # fmt: skip


def capacity(
    ctx: NodeContext,
    inp: CapacityInputs,
    *,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> Capacity:
    """Plan ``ctx``'s trace, then compare routers at the operating fleet (module docstring)."""
    res = plan(ctx.arrays, inp.plan, executor=executor, progress=progress)
    cap = res.capacity
    base = cap.filter((pl.col("policy") == BASELINE_POLICY) & pl.col("baseline"))
    n = base["nodes"][0] if base.height else None
    k = res.scaling.factor
    per_node = k / n if n else k / inp.plan.max_nodes
    rows, wins = [], []
    if n is not None and n >= 2:
        ok = cap.filter(pl.col("nodes").is_not_null()).sort(["nodes", "p99_ms"])
        best = ok["policy"][0]
        node = dataclasses.replace(inp.node, slo_ms=res.slo_ms)
        pctx = _planned_context(res, ctx)
        pts = compare(pctx, inp.plan.routers, [best],
                      ClusterConfig(nodes=n, node=node, seed=inp.plan.seed), oracle=inp.oracle,
                      executor=executor)  # fmt: skip
        for pt in pts:
            rows.append({c: pt.overall.get(c) for c in ROUTING_COLUMNS})
            wins.append(pt.windows.filter(pl.col("measured")).select(
                pl.lit(pt.router).alias("router"), "window", "start_s", "p99_ms", "ratio_min",
                "ratio_max", "ratio_spread", "work_max_mean"))  # fmt: skip
    routing = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame(
        schema=dict.fromkeys(ROUTING_COLUMNS, pl.Float64) | {"router": pl.String,
                                                            "policy": pl.String,
                                                            "nodes": pl.Int64})  # fmt: skip
    rw = pl.concat(wins) if wins else pl.DataFrame()
    return Capacity(res, n, float(per_node), routing, rw)


def capacity_tables(c: Capacity) -> dict[str, pl.DataFrame]:
    """The run-store tables (docs/summary-schema.md): capacity, savings, load curve, routing."""
    r = c.result
    out = {
        CAPACITY: r.capacity, CAPACITY_SAVINGS: r.savings, CAPACITY_GPUS: r.gpus,
        CAPACITY_EVALUATED: r.evaluated, LOAD_CURVE: r.load_curve, MAX_QPS: r.max_qps,
        ROUTING: c.routing,
    }  # fmt: skip
    if c.routing_windows.height:
        out[ROUTING_WINDOWS] = c.routing_windows
    return out


def capacity_meta(c: Capacity) -> dict[str, Any]:
    """Scalar results for the summary: the answer, the scaling and the operating point."""
    return {
        "capacity_answer": list(c.result.answer),
        "capacity_scaling": dataclasses.asdict(c.result.scaling),
        "operating_nodes": c.nodes,
        "per_node_factor": c.per_node_factor,
    }


def oracle_shortcut(ocfg: OracleConfig) -> OracleConfig:
    """The oracle when the footprint fits: its coarse grid only (no Optuna trials)."""
    return dataclasses.replace(ocfg, trials=0)
