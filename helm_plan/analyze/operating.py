"""Where ``analyze`` looks: the capacity stage's inputs, and one node of the SLO-binding fleet.

:mod:`helm_plan.analyze.capacity` plans; this module adapts ``AnalyzeConfig``
to it, turns its per-node share into the node context the oracle and the
policy stages replay, and prices the footprint-fits shortcut.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from helm_plan.analyze.capacity import (
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
from helm_plan.policies import POLICIES
from helm_plan.sim import NodeContext, prepare_context


def capacity_inputs(cfg: AnalyzeConfig) -> CapacityInputs:
    """The plan analyze runs: the analysed GPU, model, pool and SLO, at the planned traffic."""
    pcfg = PlanConfig(
        gpus=(cfg.gpu,), model=cfg.model, latency=cfg.latency, slo_ms=cfg.slo_ms,
        attainment=cfg.attainment, routers=tuple(cfg.routers),
        policies=tuple(p for p in cfg.plan_policies if p.partition(":")[0] in POLICIES), peak_qps=cfg.peak_qps,
        scale=cfg.scale, max_nodes=cfg.max_nodes, pool_bytes=cfg.pool_bytes,
        pool_fraction=cfg.pool_fraction, node=cfg.node, oracle=cfg.oracle,
        load_max_requests=cfg.capacity_max_requests, n_boot=cfg.n_boot,
        ci_level=cfg.confidence, seed=cfg.seed, spill_dir=cfg.spill_dir,
    )  # fmt: skip
    return CapacityInputs(plan=pcfg, node=cfg.node, oracle=cfg.oracle)


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
    ctx: NodeContext, factor: float, seed: int, window_s: float, spill_dir: str | None = None
) -> NodeContext:
    """One node's share of the planned traffic: the trace scaled by ``factor`` (users); its
    tokens in ``spill_dir`` when given, as the trace's."""
    if abs(factor - 1.0) < 1e-12:
        return ctx
    t, _ = scale_arrays(ctx.arrays, factor, by="users", window_s=window_s, seed=seed,
                        spill_dir=spill_dir)  # fmt: skip
    return prepare_context(t, ctx.gpu, ctx.model, ctx.latency,
                           pool_bytes=ctx.pool_bytes, latency_profile=ctx.latency_profile)  # fmt: skip


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
    "shortcut_note",
    "stage_capacity",
]
