"""The capacity stage of ``analyze``: plan first, then fix the one operating point.

``analyze`` plans first (:func:`helm_plan.plan.plan`: every GPU of ``--gpus``,
the given SLO, the traffic of ``--peak-qps`` / ``--scale`` under the stated
traffic model) and derives the operating point every later section analyses:

- the **operating fleet**: N nodes of the analysed GPU (``--gpu``) with best
  static behind the baseline router (``jsq``), at the fleet-wide r the plan
  found for N (the baseline every saving is measured from). When no fleet up
  to ``max_nodes`` meets the SLO, the largest one;
- the **analysed node**: that fleet is simulated once more (the same run as
  the plan's, so its P99 is the Capacity table's to the last digit) and the
  node with the highest P99, where the SLO binds, is cut out of the planned
  trace as the router fed it (:mod:`helm_plan.plan.routed`): the curves, the
  oracle and the policies replay exactly that node's traffic on the same pool;
- the **routing comparison** at N nodes (every planned router under the
  cheapest policy), when N ≥ 2. A row is the plan's own evaluation of that
  router at N (one more is made where the search did not visit N), so the
  Routing and Capacity tables agree to the last digit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from helm_plan.cluster import ClusterConfig
from helm_plan.cluster.policies import node_policies
from helm_plan.cluster.sim import simulate_cluster
from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.oracle import OracleConfig
from helm_plan.plan import PlanConfig, PlanResult, plan
from helm_plan.plan.config import BASELINE_POLICY
from helm_plan.plan.dense import scale_arrays
from helm_plan.plan.evaluate import meets
from helm_plan.plan.scale import peak_qps
from helm_plan.pool import Pool
from helm_plan.report.tables import (
    CAPACITY,
    CAPACITY_EVALUATED,
    CAPACITY_FRONTIER,
    CAPACITY_GPUS,
    CAPACITY_HEADROOM,
    CAPACITY_SAVINGS,
    LOAD_CURVE,
    MAX_QPS,
    ROUTING,
    ROUTING_WINDOWS,
)
from helm_plan.sim import NodeConfig, NodeContext, prepare_context

ROUTING_COLUMNS = ("router", "policy", "nodes", "ratio", "p50_ms", "p99_ms", "slo_attainment",
                   "throughput_rps", "emb_hit_rate", "kv_reuse_rate", "imbalance_max_mean",
                   "imbalance_cv", "ratio_spread")  # fmt: skip
"""Columns of the ``routing`` table (one row per router)."""
OPERATING_ROWS = "_operating_rows"
"""The capacity stage's own table (the analysed node's request indices; never in the run store:
names starting with an underscore stay in the stage cache)."""


@dataclass(frozen=True)
class CapacityInputs:
    """What the capacity stage needs beyond the trace and the node context."""

    plan: PlanConfig
    """The plan (its first GPU is the analysed one)."""
    node: NodeConfig
    """How each node serves (its SLO is the plan's)."""
    oracle: OracleConfig
    """The best-static grid."""


@dataclass(frozen=True)
class OperatingPoint:
    """The one operating point: one node of the planned fleet, as the router fed it."""

    gpu: str
    """The analysed GPU."""
    nodes: int
    """Fleet size (the minimal one meeting the SLO, else max_nodes)."""
    meets: bool
    """True when that fleet meets the SLO."""
    router: str
    """The baseline router."""
    ratio: float
    """The fleet-wide static r the plan found at that size."""
    node: int
    """The analysed node: the fleet's highest P99."""
    requests: int
    """Requests routed to it."""
    share: float
    """Its share of the planned requests."""
    mean_qps: float
    """Its mean arrival rate, req/s."""
    peak_qps: float
    """Its busiest window's rate, req/s."""
    p99_ms: float
    """Its P99 in the fleet run, ms."""
    slo_attainment: float
    """Its share of requests within the SLO in the fleet run."""
    fleet_p99_ms: float
    """The fleet's pooled P99, ms (the Capacity table's)."""
    fleet_slo_attainment: float
    """The fleet's pooled attainment."""


@dataclass(frozen=True, eq=False)
class Capacity:
    """The plan and the operating point it fixes for the rest of analyze."""

    result: PlanResult
    operating: OperatingPoint
    rows: np.ndarray
    """The planned trace's requests routed to the analysed node (ascending)."""
    routing: pl.DataFrame
    """ROUTING_COLUMNS at the operating fleet (empty with one node)."""
    routing_windows: pl.DataFrame
    """router, window, start_s, p99_ms, ratio_min, ratio_max, ratio_spread, work_max_mean."""


def planned_context(res: PlanResult, ctx: NodeContext) -> NodeContext:
    """The traffic the plan planned for, on ``ctx``'s GPU and pool (the plan's own arrays:
    the same K, traffic model, seed and spill folder)."""
    cfg = res.config
    t, _ = scale_arrays(ctx.arrays, res.scaling.factor, by=res.scaling.method,
                        window_s=cfg.node.window_s, seed=cfg.seed, spill_dir=cfg.spill_dir)  # fmt: skip
    return prepare_context(t, ctx.gpu, ctx.model, ctx.latency,
                           pool=Pool(ctx.pool_bytes, ctx.pool_source),
                           latency_profile=ctx.latency_profile)  # fmt: skip


def fleet_task(shared: tuple[NodeContext, NodeConfig, int, int], item: tuple[str, str, bool]):
    """One fleet at the operating size: overall figures, window table, and the node of every
    request when asked (an executor task)."""
    ctx, ncfg, n, seed = shared
    router, spec, keep_nodes = item
    cfg = ClusterConfig(nodes=n, router=router, node=ncfg, seed=seed)
    pol = node_policies(spec, ctx, cfg)
    res = simulate_cluster(ctx, pol.policy, pol.cfg, policy_name=pol.spec)
    win = res.windows.filter(pl.col("measured")).select(
        "window", "start_s", "p99_ms", "ratio_min", "ratio_max", "ratio_spread", "work_max_mean"
    )
    return res.overall(), win, res.node_table, res.node if keep_nodes else None


def _evaluated_at(res: PlanResult, gpu: str, policy: str, router: str, n: int) -> dict | None:
    ev = res.evaluated.filter((pl.col("gpu") == gpu) & (pl.col("policy") == policy)
                              & (pl.col("router") == router) & (pl.col("nodes") == n))  # fmt: skip
    return ev.row(0, named=True) if ev.height else None


def capacity(
    ctx: NodeContext,
    inp: CapacityInputs,
    *,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> Capacity:
    """Plan ``ctx``'s trace, then fix the operating point (module docstring)."""
    ex = executor or SerialExecutor()
    res = plan(ctx.arrays, inp.plan, executor=ex, progress=progress)
    pcfg, gpu = res.config, ctx.gpu.name
    slo = res.slo_ms
    ncfg = dataclasses.replace(inp.node, slo_ms=slo)
    cap = res.capacity.filter(pl.col("gpu") == gpu)
    base = cap.filter((pl.col("policy") == BASELINE_POLICY) & pl.col("baseline"))
    met = base.height > 0 and base["nodes"][0] is not None
    n = int(base["nodes"][0]) if met else pcfg.max_nodes
    planned = ex.share(planned_context(res, ctx))
    ok = cap.filter(pl.col("nodes").is_not_null()).sort(["nodes", "p99_ms"])
    best = ok["policy"][0] if ok.height else BASELINE_POLICY
    routers = list(dict.fromkeys(pcfg.routers))
    specs, added = {}, []
    for router in dict.fromkeys([*routers, pcfg.baseline_router]):
        policy = best if router in routers else BASELINE_POLICY
        for p in dict.fromkeys([policy] + ([BASELINE_POLICY] if router == pcfg.baseline_router
                                           else [])):  # fmt: skip
            row = _evaluated_at(res, gpu, p, router, n)
            if row is None:  # the search did not visit N for it: evaluate it as the plan does
                hint = _evaluated_at(res, gpu, BASELINE_POLICY, pcfg.baseline_router, n)
                ev = meets(planned, ClusterConfig(nodes=n, router=router, node=ncfg,
                                                  seed=pcfg.seed), p, pcfg.oracle,
                           pcfg.attainment, hint=(hint or {}).get("ratio") or 0.5)  # fmt: skip
                row = {"gpu": gpu, "policy": p, "router": router, "nodes": n,
                       "passes": ev.passes, "p99_ms": ev.p99_ms,
                       "slo_attainment": ev.slo_attainment, "ratio": ev.ratio}  # fmt: skip
                added.append(row)
            r = row.get("ratio")
            specs[(p, router)] = f"static:{float(r)!r}" if p == BASELINE_POLICY else p
    if added:
        res = dataclasses.replace(res, evaluated=pl.concat(
            [res.evaluated, pl.DataFrame(added, schema=res.evaluated.schema)]))  # fmt: skip
    items = [(router, spec, (p, router) == (BASELINE_POLICY, pcfg.baseline_router))
             for (p, router), spec in specs.items()]  # fmt: skip
    runs = dict(zip(specs, ex.map(fleet_task, items, shared=(planned, ncfg, n, pcfg.seed),
                                  progress=progress,
                                  label=lambda it: f"fleet {it[0]} {it[1]}"), strict=True))  # fmt: skip
    overall, _, node_table, node_of = runs[(BASELINE_POLICY, pcfg.baseline_router)]
    nt = node_table.sort(["p99_ms", "node"], descending=[True, False], nulls_last=True)
    k = int(nt["node"][0])
    rows = np.flatnonzero(node_of == k)
    ts = planned.arrays.ts_s[rows]
    span = float(ts[-1] - ts[0]) if len(ts) > 1 else float("nan")
    me = nt.row(0, named=True)
    op = OperatingPoint(
        gpu=gpu, nodes=n, meets=met, router=pcfg.baseline_router,
        ratio=float(specs[(BASELINE_POLICY, pcfg.baseline_router)].partition(":")[2]),
        node=k, requests=len(rows), share=len(rows) / planned.arrays.n_requests,
        mean_qps=len(rows) / span if span > 0 else float("nan"),
        peak_qps=peak_qps(ts, ncfg.window_s), p99_ms=float(me["p99_ms"]),
        slo_attainment=float(me["slo_attainment"]), fleet_p99_ms=float(overall["p99_ms"]),
        fleet_slo_attainment=float(overall["slo_attainment"]),
    )  # fmt: skip
    out, wins = [], []
    if n >= 2:
        for router in routers:
            o, win, _, _ = runs[(best, router)]
            out.append({"router": router, "policy": best, "nodes": n,
                        "ratio": _ratio(specs[(best, router)])}
                       | {c: o.get(c) for c in ROUTING_COLUMNS[4:]})  # fmt: skip
            wins.append(win.select(pl.lit(router).alias("router"), pl.all()))
    schema = dict.fromkeys(ROUTING_COLUMNS, pl.Float64) | {
        "router": pl.String, "policy": pl.String, "nodes": pl.Int64}  # fmt: skip
    routing = pl.DataFrame(out, schema=schema)
    return Capacity(res, op, rows, routing, pl.concat(wins) if wins else pl.DataFrame())


def _ratio(spec: str) -> float | None:
    head, _, r = spec.partition(":")
    return float(r) if head == "static" else None


def capacity_tables(c: Capacity) -> dict[str, pl.DataFrame]:
    """The run-store tables (docs/summary-schema.md): capacity, savings, load curve, frontier,
    headroom, routing; ``_operating_rows`` is the stage's own (not in the run store)."""
    r = c.result
    out = {
        CAPACITY: r.capacity, CAPACITY_SAVINGS: r.savings, CAPACITY_GPUS: r.gpus,
        CAPACITY_EVALUATED: r.evaluated, LOAD_CURVE: r.load_curve, MAX_QPS: r.max_qps,
        CAPACITY_FRONTIER: r.frontier, CAPACITY_HEADROOM: r.headroom, ROUTING: c.routing,
        OPERATING_ROWS: pl.DataFrame({"row": c.rows.astype(np.int64)}),
    }  # fmt: skip
    if c.routing_windows.height:
        out[ROUTING_WINDOWS] = c.routing_windows
    return out


def capacity_meta(c: Capacity) -> dict[str, Any]:
    """Scalar results for the summary: the answer, the scaling and the operating point."""
    s = c.result.scaling
    return {
        "capacity_answer": list(c.result.answer),
        "capacity_scaling": asdict(s) | {"assumption": s.assumption},
        "capacity_slo_ms": c.result.slo_ms,
        "capacity_max_nodes": c.result.config.max_nodes,
        "operating": asdict(c.operating),
        "operating_nodes": c.operating.nodes,
    }


def oracle_shortcut(ocfg: OracleConfig, fit_ratio: float | None = None) -> OracleConfig:
    """The oracle when the footprint fits: its first points only (no search steps), among
    them ``fit_ratio``, a ratio at which neither cache evicts
    (:meth:`~helm_plan.sim.context.NodeContext.fit_ratio`): the first points alone need
    not hold one (the ``flat`` scenario's band is [0.0001, 0.015])."""
    seeds = ocfg.seed_points if fit_ratio is None else (*ocfg.seed_points, fit_ratio)
    return dataclasses.replace(ocfg, trials=0, seed_points=tuple(dict.fromkeys(seeds)))
