"""Best static: the single EMB share with the lowest whole-trace P99 (DESIGN.md, Oracle).

The coarse grid (plus the validation grid, if any) is simulated as
independent whole-trace runs mapped over the executor; a seeded Optuna study
warm-started with those points then refines r in this process, reusing
every evaluation. A constant r never reallocates, so the refill mode is
irrelevant here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.search import best_of, ratio_grid, search, seed_for
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import simulate_node

STATIC_SEED_TAG = 2**31 - 1
"""Seed tag of the best-static study (window studies use their window index)."""


@dataclass(frozen=True, eq=False)
class BestStatic:
    """The single EMB share minimising whole-trace P99."""

    ratio: float
    """Best static r."""
    p99_ms: float
    """Whole-trace P99 at ``ratio`` (measured windows), ms."""
    slo_attainment: float
    """Whole-trace SLO attainment at ``ratio``."""
    flatness: float
    """Range of evaluated r whose P99 is within flat_tol of the best."""
    evaluated: pl.DataFrame
    """Every r simulated: r, p99_ms, slo_attainment, emb_hit_rate, kv_reuse_rate (sorted by r)."""
    method: str
    """'optuna-tpe', 'optuna-gp' or 'grid STEP'."""


def static_task(shared: tuple[NodeContext, NodeConfig], r: float) -> tuple[float, ...]:
    """Whole-trace (P99 ms, attainment, EMB hit rate, KV reuse rate) at constant ``r``."""
    ctx, ncfg = shared
    res = simulate_node(ctx, np.array([r]), ncfg)
    return res.p99_ms, res.slo_attainment, res.emb_hit_rate, res.kv_reuse_rate


def best_static(
    ctx: NodeContext,
    node_cfg: NodeConfig,
    oracle_cfg: OracleConfig,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> BestStatic:
    """Search the static r with the lowest whole-trace P99 (grid over the executor, then Optuna)."""
    pre = ratio_grid(oracle_cfg.coarse_step)
    if oracle_cfg.grid_step is not None:
        pre = np.union1d(pre, ratio_grid(oracle_cfg.grid_step))
    pre_r = [round(float(r), 9) for r in pre]
    ex = executor or SerialExecutor()
    shared = (ctx, node_cfg)
    results = ex.map(static_task, pre_r, shared=shared, progress=progress,
                     label=lambda r: f"best static r={r:g}")  # fmt: skip
    cache: dict[float, Any] = dict(zip(pre_r, results, strict=True))

    def objective(r: float) -> tuple[float, float]:
        if r not in cache:
            cache[r] = static_task(shared, r)
        return cache[r][0], cache[r][1]

    evals = search(objective, oracle_cfg, seed_for(oracle_cfg.seed, STATIC_SEED_TAG))
    r_star, flat, _, _ = best_of(evals, oracle_cfg.flat_tol)
    rs = sorted(cache)
    df = pl.DataFrame(
        {
            "r": rs,
            "p99_ms": [cache[r][0] for r in rs],
            "slo_attainment": [cache[r][1] for r in rs],
            "emb_hit_rate": [cache[r][2] for r in rs],
            "kv_reuse_rate": [cache[r][3] for r in rs],
        }
    )
    method = (
        f"grid {oracle_cfg.grid_step}"
        if oracle_cfg.grid_step is not None
        else f"optuna-{oracle_cfg.sampler}"
    )
    return BestStatic(ratio=r_star, p99_ms=cache[r_star][0], slo_attainment=cache[r_star][1],
                      flatness=flat, evaluated=df, method=method)  # fmt: skip
