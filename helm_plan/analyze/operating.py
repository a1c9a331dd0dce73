"""Where ``analyze`` looks: the capacity stage's inputs, and the one operating point.

:mod:`helm_plan.analyze.capacity` plans and picks the analysed node; this
module adapts ``AnalyzeConfig`` to it, rebuilds that node's traffic (the
planned trace, routed: :mod:`helm_plan.plan.routed`) for the curves, the
oracle and the policy stages, and prices the footprint-fits shortcut.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from helm_plan.analyze.capacity import (
    OPERATING_ROWS,
    Capacity,
    CapacityInputs,
    capacity,
    capacity_meta,
    capacity_tables,
)
from helm_plan.analyze.config import AnalyzeConfig
from helm_plan.analyze.stages import StageOutput
from helm_plan.exec import Executor, Progress
from helm_plan.oracle import Labels
from helm_plan.plan import PlanConfig
from helm_plan.plan.dense import scale_arrays
from helm_plan.plan.routed import routed_node
from helm_plan.policies import POLICIES, canonical
from helm_plan.pool import Pool
from helm_plan.profiles import available
from helm_plan.regimes import RegimeSpan
from helm_plan.sim import NodeContext, prepare_context


def planned_gpus(cfg: AnalyzeConfig) -> tuple[str, ...]:
    """The GPUs analyze plans: the analysed one first, then ``gpus`` (every shipped GPU
    profile by default)."""
    rest = cfg.gpus if cfg.gpus is not None else tuple(available("gpu"))
    return tuple(dict.fromkeys((cfg.gpu, *rest)))


def capacity_inputs(cfg: AnalyzeConfig) -> CapacityInputs:
    """The plan analyze runs: its GPUs, model, pool and SLO, at the planned traffic."""
    pcfg = PlanConfig(
        gpus=planned_gpus(cfg), model=cfg.model, latency=cfg.latency, slo_ms=cfg.slo_ms,
        attainment=cfg.attainment, routers=tuple(cfg.routers),
        policies=tuple(c for p in cfg.plan_policies if (c := canonical(p)).partition(":")[0] in POLICIES),
        peak_qps=cfg.peak_qps, scale=cfg.scale, scale_by=cfg.scale_by, max_nodes=cfg.max_nodes,
        pool_bytes=cfg.pool_bytes, pool_fraction=cfg.pool_fraction, node=dataclasses.replace(cfg.node, window_s=cfg.window_s),
        oracle=cfg.oracle_config(), load_max_requests=cfg.capacity_max_requests,
        headroom_steps=cfg.headroom_steps, n_boot=cfg.n_boot, ci_level=cfg.confidence,
        seed=cfg.seed, spill_dir=cfg.spill_dir,
    )  # fmt: skip
    # the nodes' SLO is the plan's, resolved by plan() from slo_ms
    return CapacityInputs(plan=pcfg, node=pcfg.node, oracle=pcfg.oracle)


def stage_capacity(
    ctx: NodeContext,
    inp: CapacityInputs,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> StageOutput:
    """The capacity stage's tables and scalars (the stage cache stores them)."""
    c: Capacity = capacity(ctx, inp, executor=executor, progress=progress)
    return StageOutput(tables=capacity_tables(c), meta=capacity_meta(c))


def operating_context(
    ctx: NodeContext, cap: StageOutput, seed: int, window_s: float, spill_dir: str | None = None
) -> NodeContext:
    """The analysed node's traffic: the trace scaled as the plan scaled it (its factor,
    traffic model and seed), on ``ctx``'s pool, cut to the requests the router sent that node
    (the whole planned trace when the fleet is one node). Tokens in ``spill_dir`` when given."""
    s = cap.meta["capacity_scaling"]
    t, _ = scale_arrays(ctx.arrays, s["factor"], by=s["method"], window_s=window_s, seed=seed,
                        spill_dir=spill_dir)  # fmt: skip
    planned = prepare_context(t, ctx.gpu, ctx.model, ctx.latency,
                              pool=Pool(ctx.pool_bytes, ctx.pool_source),
                              latency_profile=ctx.latency_profile)  # fmt: skip
    rows = cap.tables[OPERATING_ROWS]["row"].to_numpy()
    if len(rows) == planned.arrays.n_requests:
        return planned  # one node serves everything: the planned trace itself
    return routed_node(planned, np.sort(rows), spill_dir)


def planned_spans(
    spans: Sequence[RegimeSpan], cap: StageOutput | None, t0: float
) -> list[RegimeSpan]:
    """The trace's regime spans on the analysed node's timeline.

    ``users`` keeps the trace's timeline (clones offset by under a second), so the spans
    hold as recorded; ``time`` divides every gap from the first arrival ``t0`` by the factor
    (:func:`~helm_plan.plan.scale.time_scaled`), and the spans with it;
    ``users-shifted`` overlays clones shifted round the span, so a regime no longer holds at
    any one time: no spans. Without a plan (``cap`` None) the trace is served as it is.
    """
    if cap is None or not spans:
        return list(spans)
    s = cap.meta["capacity_scaling"]
    if s["method"] == "users":
        return list(spans)
    if s["method"] == "time":
        k = float(s["factor"])
        return [RegimeSpan(t0 + (sp.start_s - t0) / k, t0 + (sp.end_s - t0) / k, sp.name)
                for sp in spans]  # fmt: skip
    return []


def shortcut_note(cfg: AnalyzeConfig, oracle_s: float | None, labels: Labels) -> dict[str, Any]:
    """What skipping the Optuna trials saved when the footprint fits.

    Timed from this run's own oracle stage (no extra replay): each window
    evaluated its ``n_evals`` points in ``oracle_s`` seconds, and the trials
    would have added ``trials`` evaluations per window at about the same cost
    each. ``None`` when the oracle stage was loaded from the cache (nothing
    was timed this run).
    """
    evals = float(np.nanmean(labels.table["n_evals"].to_numpy())) if labels.table.height else 0.0
    saved = None
    if oracle_s is not None and evals > 0:
        saved = round(cfg.oracle.trials * oracle_s / evals, 3)
    return {
        "footprint_fits": True,
        "oracle_trials_skipped": cfg.oracle.trials,
        "oracle_time_saved_s": saved,
    }


__all__ = [
    "capacity_inputs",
    "operating_context",
    "planned_gpus",
    "planned_spans",
    "shortcut_note",
    "stage_capacity",
]
