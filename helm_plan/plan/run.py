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
from helm_plan.cluster import ClusterConfig
from helm_plan.errors import TraceError
from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.plan.config import BASELINE_POLICY, PlanConfig
from helm_plan.plan.dense import scale_arrays
from helm_plan.plan.evaluate import meets
from helm_plan.plan.gpus import GpuSetup, default_policies, gpu_setups
from helm_plan.plan.loadcurve import LoadSetup, load_curve, start_factor
from helm_plan.plan.result import Combo, PlanResult, build_result
from helm_plan.plan.scale import factor_for_ts
from helm_plan.plan.search import Point, first_guess, minimal_nodes
from helm_plan.policies import parse_policy
from helm_plan.profiles import load_model, resolve_slo_ms
from helm_plan.sim import NodeConfig
from helm_plan.sim.context import NodeContext, prepare_context


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


def _scaled(arrays: TraceArrays, cfg: PlanConfig, window_s: float):
    if cfg.peak_qps is not None:
        k = factor_for_ts(arrays.ts_s, peak_qps_target=cfg.peak_qps, window_s=window_s)
    else:
        k = cfg.scale if cfg.scale is not None else 1.0
    return scale_arrays(arrays, k, by=cfg.scale_by, window_s=window_s, seed=cfg.seed,
                        spill_dir=cfg.spill_dir)  # fmt: skip


def _combo(shared: tuple[list[NodeContext], NodeConfig, PlanConfig, dict], item) -> Combo:
    """Minimal nodes for one (GPU index, policy, router): an executor task."""
    ctxs, ncfg, cfg, starts, starts_r = shared
    gi, spec, router = item
    ctx = ctxs[gi]
    counts: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
    n_w = ctx.n_windows(ncfg.window_s)

    hint = [starts_r.get((gi, spec), 0.5)]

    def evaluate(n: int) -> Point:
        ccfg = ClusterConfig(nodes=n, router=router, node=ncfg, seed=cfg.seed)
        ev = meets(ctx, ccfg, spec, cfg.oracle, cfg.attainment, hint=hint[0])
        size = np.bincount(ev.window_idx, minlength=n_w).astype(np.int64)
        met = np.bincount(ev.window_idx, weights=ev.sojourn_s <= ncfg.slo_ms / 1e3,
                          minlength=n_w).astype(np.int64)  # fmt: skip
        counts[n] = (size, met, ev.ratio)
        if ev.passes and ev.ratio == ev.ratio:
            hint[0] = ev.ratio  # the next size tries the r that just passed first
        return Point(n, ev.passes, ev.p99_ms, ev.slo_attainment)

    s = minimal_nodes(evaluate, start=starts[(gi, spec)], max_nodes=cfg.max_nodes)
    return Combo(gi, spec, router, s, counts)


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
    policies = tuple(dict.fromkeys(cfg.policies or default_policies()))
    for p in policies:
        parse_policy(p)  # a precise error before any work
    setups = list(setups) if setups is not None else gpu_setups(cfg, model)
    ex = executor or SerialExecutor()
    if isinstance(trace, pa.Table):
        trace = from_table(trace, seed=cfg.seed)
    require_rate(trace)  # before any work: a plan needs an arrival rate
    arrays, scaling = _scaled(trace, cfg, ncfg.window_s)
    del trace  # the load points scale the planned arrays (a table's densified copy goes)
    ctxs = [prepare_context(arrays, s.gpu, model, s.latency, pool_bytes=cfg.pool_bytes,
                            pool_fraction=cfg.pool_fraction, latency_profile=s.latency_profile)
            for s in setups]  # fmt: skip
    del arrays  # held by the contexts (one copy for all GPUs)
    # the workers' copy is the driver's too, from here on: the load points' setups and the
    # combos ship the shared arrays by reference (exec.blocks), and hold no second copy
    ctxs = ex.share(ctxs)
    curves, starts, starts_r = [], {}, {}
    for gi, (s, ctx) in enumerate(zip(setups, ctxs, strict=True)):
        ls = LoadSetup(trace=ctx.arrays, gpu=s.gpu, model=model, latency=s.latency,
                       latency_profile=s.latency_profile, pool_bytes=ctx.pool_bytes, node=ncfg,
                       oracle=cfg.oracle, scale_by=cfg.scale_by, attainment=cfg.attainment,
                       seed=cfg.seed, max_requests=cfg.load_max_requests)  # fmt: skip
        f0 = start_factor(ls)
        factors = [f0 / 2, f0, f0 * 2] if cfg.load_curve else [f0]
        lc = load_curve(ls, list(policies), factors,
                        refine_steps=cfg.load_refine_steps if cfg.load_curve else 2,
                        executor=ex, progress=progress)  # fmt: skip
        curves.append(lc)
        for p in policies:
            starts[(gi, p)] = min(first_guess(scaling.qps_after, lc.max_qps[p]), cfg.max_nodes)
            r_max = lc.ratio_at_max.get(p, math.nan)
            starts_r[(gi, p)] = r_max if r_max == r_max else 0.5
    routers = tuple(dict.fromkeys(cfg.routers))
    items = [(gi, p, r) for gi in range(len(setups)) for p in policies for r in routers]
    base = (BASELINE_POLICY, cfg.baseline_router)
    for gi in range(len(setups)):
        if (gi, *base) not in items:  # every GPU's savings are measured against its baseline
            items.append((gi, *base))
            starts.setdefault((gi, BASELINE_POLICY), starts.get((gi, policies[0]), 1))
    combos = ex.map(_combo, items, shared=(ctxs, ncfg, cfg, starts, starts_r), progress=progress,
                    label=lambda it: f"{setups[it[0]].gpu.name} {it[1]} {it[2]}")  # fmt: skip
    return build_result(cfg, ncfg, scaling, setups, ctxs, curves, combos, policies, routers)
