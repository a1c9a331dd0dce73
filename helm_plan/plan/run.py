"""The capacity plan: minimal nodes per GPU × policy × router for "P99 ≤ T and attainment ≥ A".

Steps (DESIGN.md, Capacity planning):

1. scale the trace to the planned traffic (``--peak-qps`` / ``--scale``,
   :mod:`.scale`), once for every GPU kind;
2. per GPU, one node's **load curve** (:mod:`.loadcurve`) for every policy:
   the maximum QPS one node sustains at the SLO, which gives each search its
   first guess ``⌈planned QPS / max QPS⌉``;
3. per GPU × policy × router, :func:`~helm_plan.plan.search.minimal_nodes`
   over the cluster simulator (an independent task on the executor: the
   answer does not depend on the worker count);
4. cost per row, and savings against the baseline (best static behind
   ``jsq``) with window-bootstrap intervals (:mod:`.result`).

Every evaluation of a fleet size keeps its per-window request and within-SLO
counts, which is all the node-savings bootstrap needs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from helm_plan.arrays import TraceArrays, from_table
from helm_plan.cache.core import Workload
from helm_plan.cache.footprint import footprint
from helm_plan.errors import TraceError
from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.plan.config import BASELINE_POLICY, PlanConfig
from helm_plan.plan.dense import scale_arrays
from helm_plan.plan.evaluate import evaluate_size
from helm_plan.plan.frontier import HeadroomSetup, cheapest, frontier_sizes, headroom_task
from helm_plan.plan.gpus import GpuSetup, default_policies, gpu_setups
from helm_plan.plan.loadcurve import LoadSetup, load_curves, start_factor
from helm_plan.plan.result import Combo, PlanResult, build_result
from helm_plan.plan.scale import solve_factor
from helm_plan.plan.search import Point, first_guess, minimal_nodes
from helm_plan.policies import canonical, parse_policy
from helm_plan.pool import Pool, resolve_pool
from helm_plan.profiles import ModelProfile, load_model, resolve_slo_ms
from helm_plan.sim.context import prepare_context


def require_rate(arrays: TraceArrays) -> None:
    """Raise TraceError unless the trace's requests arrive at two or more distinct times: a
    capacity plan sizes a fleet for an arrival rate, and one instant has none."""
    ts_s = arrays.ts_s
    if len(ts_s) < 2 or not float(ts_s[-1]) > float(ts_s[0]):
        raise TraceError(
            f"the trace's {len(ts_s)} request(s) arrive at one instant (a span of 0 s), so it "
            "has no arrival rate to plan capacity for",
            hint="plan a trace whose requests arrive over time (analyze --no-capacity "
            "analyses this one as it is, on one node)",
        )


def gpu_pools(
    trace: TraceArrays, cfg: PlanConfig, model: ModelProfile, setups: Sequence[GpuSetup]
) -> list[Pool]:
    """Each GPU's pool by the one pool rule (:mod:`helm_plan.pool`): a share of the footprint
    is a share of the trace *as given*, so the planned fleet's GPUs never grow with its users."""
    fp = None
    if cfg.pool_fraction is not None:
        fp = footprint(Workload.of(trace, model), model).total_bytes
    return [resolve_pool(s.gpu, model, pool_bytes_override=cfg.pool_bytes,
                         pool_fraction=cfg.pool_fraction, footprint_bytes=fp)
            for s in setups]  # fmt: skip


def planned_factor(arrays: TraceArrays, cfg: PlanConfig, window_s: float) -> float:
    """K of the planned traffic: solved for --peak-qps (the peak asked is the peak planned),
    else --scale, else 1."""
    if cfg.peak_qps is not None:
        return solve_factor(arrays.ts_s, arrays.user_ids[arrays.user], cfg.peak_qps,
                            by=cfg.scale_by, window_s=window_s, seed=cfg.seed)  # fmt: skip
    return cfg.scale if cfg.scale is not None else 1.0


def planned_trace(arrays: TraceArrays, cfg: PlanConfig, window_s: float):
    """The planned traffic (the trace scaled by :func:`planned_factor`) and its Scaling."""
    return scale_arrays(arrays, planned_factor(arrays, cfg, window_s), by=cfg.scale_by,
                        window_s=window_s, seed=cfg.seed, spill_dir=cfg.spill_dir,
                        peak_qps_target=cfg.peak_qps)  # fmt: skip


def _combos(shared, item: tuple[int, str, tuple[str, ...]]) -> list[Combo]:
    """Minimal nodes for one (GPU index, policy) behind each router: an executor task.

    The routers are searched in turn, each from the last one's answer (the router rarely
    moves N by more than one, so a search then costs its two confirming simulations).
    A fleet of one node is the same fleet behind every router (each sends every request
    to it: tests/cluster/test_cluster_routers.py checks every registered router), so its
    evaluation is made once per first r tried and shared by the routers that ask again.
    """
    ctxs, ncfg, cfg, starts, starts_r, ceilings = shared
    gi, spec, routers = item
    out = []
    start, ratio = starts[(gi, spec)], starts_r.get((gi, spec), 0.5)
    ceiling = ceilings.get((gi, spec), False)
    one_node: dict[float, tuple[Point, tuple[np.ndarray, np.ndarray, float]]] = {}
    for router in routers:
        counts: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        hint = [ratio]

        def evaluate(n: int, router: str = router, counts=counts, hint=hint) -> Point:
            if n == 1 and hint[0] in one_node:
                pt, counts[n] = one_node[hint[0]]
            else:
                pt, counts[n] = evaluate_size(ctxs[gi], ncfg, cfg, spec, router, n, hint[0])
                if n == 1:
                    one_node[hint[0]] = (pt, counts[n])
            if pt.passes and pt.ratio == pt.ratio:
                hint[0] = pt.ratio  # the next size tries the r that just passed first
            return pt

        s = minimal_nodes(evaluate, start=start, max_nodes=cfg.max_nodes,
                          check_above=cfg.check_monotone, ceiling=ceiling)  # fmt: skip
        out.append(Combo(gi, spec, router, s, counts))
        if s.nodes is not None:  # the next router starts from an answer, not a bound
            start, ratio, ceiling = s.nodes, hint[0], False
    return out


def plan(
    trace: TraceArrays | pa.Table,
    cfg: PlanConfig,
    *,
    setups: Sequence[GpuSetup] | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> PlanResult:
    """Plan ``trace`` for ``cfg`` (see the module docstring).

    ``trace`` is the loaded arrays (:func:`~helm_plan.arrays.from_file`: the trace is
    never held as a table) or a canonical table (densified with ``cfg.seed``); the
    plan is the same for both.

    ``setups`` replaces the GPUs named in ``cfg`` (tests pass hand-made latency models).
    """
    model = load_model(cfg.model)
    ncfg = dataclasses.replace(cfg.node, slo_ms=resolve_slo_ms(model, cfg.slo_ms))
    policies = tuple(dict.fromkeys(canonical(p) for p in cfg.policies or default_policies()))
    for p in policies:
        parse_policy(p)  # a precise error before any work
    setups = list(setups) if setups is not None else gpu_setups(cfg, model)
    ex = executor or SerialExecutor()
    if isinstance(trace, pa.Table):
        trace = from_table(trace, seed=cfg.seed)
    require_rate(trace)  # before any work: a plan needs an arrival rate
    pools = gpu_pools(trace, cfg, model, setups)  # the input trace's: before any scaling
    arrays, scaling = planned_trace(trace, cfg, ncfg.window_s)
    # the headroom grows the traffic from the trace as given; else the load points scale the
    # planned arrays (a table's densified copy goes)
    inp = trace if cfg.headroom_steps > 0 else None
    del trace
    ctxs = [prepare_context(arrays, s.gpu, model, s.latency, pool=pool,
                            latency_profile=s.latency_profile)
            for s, pool in zip(setups, pools, strict=True)]  # fmt: skip
    del arrays  # held by the contexts (one copy for all GPUs)
    # the workers' copy is the driver's too, from here on: the load points' setups and the
    # combos ship the shared arrays by reference (exec.blocks), and hold no second copy
    ctxs = ex.share(ctxs)
    lss = [LoadSetup(trace=ctx.arrays, gpu=s.gpu, model=model, latency=s.latency,
                     latency_profile=s.latency_profile, pool_bytes=ctx.pool_bytes, node=ncfg,
                     oracle=cfg.oracle, scale_by=cfg.scale_by, attainment=cfg.attainment,
                     seed=cfg.seed, max_requests=cfg.load_max_requests)
           for s, ctx in zip(setups, ctxs, strict=True)]  # fmt: skip
    f0s = [start_factor(ls) for ls in lss]
    # every GPU's load points in one map per step (a failing best-static point is ~14
    # simulations: one GPU's step alone would leave the other workers waiting)
    curves = load_curves(lss, list(policies),
                         [[f0 / 2, f0, f0 * 2] if cfg.load_curve else [f0] for f0 in f0s],
                         refine_steps=cfg.load_refine_steps if cfg.load_curve else 2,
                         executor=ex, progress=progress)  # fmt: skip
    starts, starts_r, ceilings = {}, {}, {}
    for gi, lc in enumerate(curves):
        for p in policies:
            starts[(gi, p)] = min(first_guess(scaling.qps_after, lc.max_qps[p]), cfg.max_nodes)
            # a curve stopped at its request budget still passing gives a lower bound of one
            # node's capacity, so its guess is a ceiling: searched from below, not galloped
            # down from (a 1M-request plan guessed 5 nodes where one served it all)
            ceilings[(gi, p)] = bool(lc.capped.get(p, False))
            r_max = lc.ratio_at_max.get(p, math.nan)
            starts_r[(gi, p)] = r_max if r_max == r_max else 0.5
    routers = tuple(dict.fromkeys(cfg.routers))
    items = [(gi, p, routers) for gi in range(len(setups)) for p in policies]
    for gi in range(len(setups)):  # every GPU's savings are measured against its baseline
        if BASELINE_POLICY not in policies:
            items.append((gi, BASELINE_POLICY, (cfg.baseline_router,)))
            starts.setdefault((gi, BASELINE_POLICY), starts.get((gi, policies[0]), 1))
        elif cfg.baseline_router not in routers:
            items.append((gi, BASELINE_POLICY, (cfg.baseline_router,)))
    # queued heaviest first (a policy's plan_weight; in order otherwise), so no worker is left
    # with the longest task at the end; the answers are put back in the items' order
    queue = sorted(range(len(items)), key=lambda i: -parse_policy(items[i][1]).plan_weight)
    got = ex.map(_combos, [items[i] for i in queue],
                 shared=(ctxs, ncfg, cfg, starts, starts_r, ceilings),
                 progress=progress,
                 label=lambda it: f"{setups[it[0]].gpu.name} {it[1]}")  # fmt: skip
    groups = [got[queue.index(i)] for i in range(len(items))]
    combos = [c for g in groups for c in g]
    combos = _frontier(combos, ctxs, ncfg, cfg, ex, progress)
    room = []
    if cfg.headroom_steps > 0:
        hs = HeadroomSetup(inp, model, cfg, ncfg, scaling.factor, cfg.headroom_steps)
        picks = [(setups[c.gpu], pools[c.gpu], c.policy, c.router, c.search.nodes,
                  _hint(c, c.search.nodes)) for c in _cheapest(combos).values()]  # fmt: skip
        room = ex.map(headroom_task, picks, shared=hs, progress=progress,
                      label=lambda it: f"headroom {it[0].gpu.name}")  # fmt: skip
    return build_result(cfg, ncfg, scaling, setups, ctxs, curves, combos, policies, routers,
                        room)  # fmt: skip


def _cheapest(combos: list[Combo]) -> dict[int, Combo]:
    """Each GPU's cheapest passing combination (:func:`~.frontier.cheapest`'s rule)."""
    out: dict[int, Combo] = {}
    for gi in dict.fromkeys(c.gpu for c in combos):
        rows = [{"nodes": c.search.nodes, "combo": c,
                 "p99_ms": c.search.at[c.search.nodes].p99_ms if c.search.nodes else None}
                for c in combos if c.gpu == gi]  # fmt: skip
        best = cheapest(rows)
        if best is not None:
            out[gi] = best["combo"]
    return out


def _hint(c: Combo, n: int) -> float:
    r = c.search.at[n].ratio if n in c.search.at else math.nan
    return r if r == r else 0.5


def _size_task(shared, item) -> tuple[Point, tuple[np.ndarray, np.ndarray, float]]:
    """One extra fleet size of one combination (an executor task)."""
    ctxs, ncfg, cfg = shared
    gi, spec, router, n, hint = item
    return evaluate_size(ctxs[gi], ncfg, cfg, spec, router, n, hint)


def _frontier(combos, ctxs, ncfg, cfg, ex, progress) -> list[Combo]:
    """Evaluate the sizes each GPU's frontier needs past its cheapest fleet (plan.frontier)."""
    if not cfg.frontier:
        return combos
    todo = []
    for c in _cheapest(combos).values():
        todo += [(c, n) for n in frontier_sizes(c.search.nodes, cfg.max_nodes, list(c.search.at))]
    if not todo:
        return combos
    got = ex.map(_size_task, [(c.gpu, c.policy, c.router, n, _hint(c, c.search.nodes))
                              for c, n in todo], shared=(ctxs, ncfg, cfg), progress=progress,
                 label=lambda it: f"frontier {it[1]} {it[2]} x{it[3]}")  # fmt: skip
    extra: dict[int, list] = {}
    for (c, n), res in zip(todo, got, strict=True):
        extra.setdefault(id(c), []).append((n, res))
    out = []
    for c in combos:
        if id(c) not in extra:
            out.append(c)
            continue
        pts = tuple(p for _, (p, _) in extra[id(c)])
        counts = {**c.counts, **{n: cnt for n, (_, cnt) in extra[id(c)]}}
        non_mono = c.search.non_monotone or any(not p.passes for p in pts)
        s = dataclasses.replace(c.search, evaluated=c.search.evaluated + pts, non_monotone=non_mono)
        out.append(dataclasses.replace(c, search=s, counts=counts))
    return out
