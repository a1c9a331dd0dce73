"""Per-window offline-optimal EMB share: the oracle's labels (DESIGN.md, Oracle).

For window ``w``, ``P99_w(r)`` is evaluated in one of two ways:

- ``warmup="window"``: from cold caches at ``r`` at the start of the warm-up
  span (the ``warmup_windows`` previous windows) and an idle queue, over the
  warm-up span and window ``w``; only window ``w``'s requests are measured
  (:func:`helm_plan.sim.span.evaluate_span`). Windows are independent, so they
  are mapped over the executor; window ``w``'s study is seeded with
  ``SeedSequence([seed, w])``, so labels are identical for any worker count.
- ``warmup="carry"``: from the node the labelled schedule leaves behind
  (:mod:`helm_plan.oracle.carry`), in order; a window's forks are stepped
  side by side (threads with a local pool, the first points over Ray).

Then ``r*_w = argmin P99_w(r)`` found by :func:`helm_plan.oracle.search.search`.

``grid=True`` (the default) evaluates the coarse grid in every window and stores it
(the wide ``*_rXXX`` columns the controller's training environment reads);
``grid=False`` (``analyze``) searches only for ``r*`` and the flat band (a bracketing
search warm-started from the previous window's ``r*``) and stores every evaluated
point instead, as list columns (:mod:`helm_plan.oracle.labels`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import polars as pl

from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.oracle.carry import carry_rows
from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.labels import EVAL_METRICS, EVAL_RATIOS, EVAL_SCHEMA, Labels, grid_suffix
from helm_plan.oracle.search import Eval, best_of, ratio_grid, search, seed_for
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.metrics import window_features
from helm_plan.sim.span import evaluate_span

Shared = tuple[NodeContext, NodeConfig, OracleConfig, np.ndarray, bool]


def window_task(shared: Shared, w: int) -> dict[str, Any]:
    """The label row of window ``w`` from cold caches warmed over its warm-up span."""
    ctx, ncfg, ocfg, edges, grid = shared
    s, e = int(edges[w]), int(edges[w + 1])
    if e == s:
        return empty_row(w, ocfg, grid)
    ws = int(edges[max(w - ocfg.warmup_windows, 0)])
    full: dict[float, Any] = {}

    def objective(r: float) -> Eval:
        ev = evaluate_span(ctx, r, ws, s, e, ncfg)
        full[r] = ev
        return ev.p99_ms, ev.slo_attainment, ev.mean_ms

    evals = search(objective, ocfg, seed_for(ocfg.seed, w), grid=grid)
    return label_row(w, evals, full, ctx, ncfg, ocfg, grid=grid)


def label_row(
    w: int,
    evals: dict[float, Eval],
    full: dict[float, Any],
    ctx: NodeContext,
    ncfg: NodeConfig,
    ocfg: OracleConfig,
    prev_r: float | None = None,
    grid: bool = True,
) -> dict[str, Any]:
    """One label row from a window's evaluations (``full``: r -> SpanEval or WindowResult)."""
    row: dict[str, Any] = {"window": w}
    r_star, flat, lo, hi = best_of(evals, ocfg.flat_tol, prev_r)
    b = full[r_star]
    row.update(
        r_star=r_star,
        p99_ms=b.p99_ms,
        p50_ms=b.p50_ms,
        slo_attainment=b.slo_attainment,
        flatness=flat,
        r_flat_lo=lo,
        r_flat_hi=hi,
        n_evals=len(evals),
        emb_hit_rate=b.emb_hit_rate,
        kv_reuse_rate=b.kv_reuse_rate,
        h2d_util=b.miss_bytes / (ctx.latency.h2d_bw_Bps * ncfg.window_s),
    )
    if not grid:  # every evaluated point, in ratio order
        rs = sorted(evals)
        row[EVAL_RATIOS] = rs
        for m, attr in EVAL_METRICS.items():
            row[m] = [float(getattr(full[r], attr)) for r in rs]
        return row
    for r in ratio_grid(ocfg.coarse_step):
        g = full[round(float(r), 9)]
        sfx = grid_suffix(r)
        row[f"p99_ms_{sfx}"] = g.p99_ms
        row[f"slo_att_{sfx}"] = g.slo_attainment
        row[f"emb_hit_{sfx}"] = g.emb_hit_rate
        row[f"kv_reuse_{sfx}"] = g.kv_reuse_rate
    return row


def empty_row(w: int, ocfg: OracleConfig, grid: bool = True) -> dict[str, Any]:
    """The label row of a window without requests (all NaN)."""
    nan = float("nan")
    row: dict[str, Any] = {"window": w, "r_star": nan, "p99_ms": nan, "p50_ms": nan}
    row.update(slo_attainment=nan, flatness=nan, r_flat_lo=nan, r_flat_hi=nan, n_evals=0)
    row.update(emb_hit_rate=nan, kv_reuse_rate=nan, h2d_util=nan)
    if not grid:
        row.update({EVAL_RATIOS: [], **{m: [] for m in EVAL_METRICS}})
        return row
    for r in ratio_grid(ocfg.coarse_step):
        for m in ("p99_ms", "slo_att", "emb_hit", "kv_reuse"):
            row[f"{m}_{grid_suffix(r)}"] = nan
    return row


def longest_first(edges: np.ndarray, warmup_windows: int) -> list[int]:
    """Window indices, most requests replayed (warm-up span included) first.

    Workers take tasks in order, so the longest windows start first and the
    pool's last tasks are short ones (longest-processing-time-first); each
    window's label depends only on the window, and the rows are sorted after.
    """
    e = np.asarray(edges, np.int64)
    n_w = len(e) - 1
    cost = e[1:] - e[np.maximum(np.arange(n_w) - warmup_windows, 0)]
    return sorted(range(n_w), key=lambda w: (-int(cost[w]), w))


def label_windows(
    ctx: NodeContext,
    node_cfg: NodeConfig,
    oracle_cfg: OracleConfig,
    progress: Progress | None = None,
    executor: Executor | None = None,
    grid: bool = True,
) -> Labels:
    """Label every window with its offline-optimal ratio (see the module docstring).

    ``grid``: evaluate and store the coarse grid in every window (the controller's
    training environment reads it); False stores the evaluated points instead and
    searches with fewer evaluations (what ``analyze`` needs: ``r*`` and the flat band).
    """
    node_cfg = node_cfg.for_context(ctx)  # the labels record the SLO they were made for
    edges = ctx.edges(node_cfg.window_s)
    n_w = len(edges) - 1
    run = None
    if oracle_cfg.warmup == "carry":
        rows, run = carry_rows(
            ctx, node_cfg, oracle_cfg,
            lambda w, evals, full, prev: label_row(w, evals, full, ctx, node_cfg, oracle_cfg, prev,
                                                   grid),
            lambda w: empty_row(w, oracle_cfg, grid), progress, executor, grid,
        )  # fmt: skip
        ws = np.zeros(n_w, np.float64)  # the whole past warms every window
    else:
        ex = executor or SerialExecutor()
        rows = ex.map(window_task, longest_first(edges, oracle_cfg.warmup_windows),
                      shared=(ctx, node_cfg, oracle_cfg, edges, grid), progress=progress,
                      label=lambda w: f"window {w}")  # fmt: skip
        ws = np.array([max(w - oracle_cfg.warmup_windows, 0) for w in range(n_w)], np.float64)
    lab = pl.DataFrame(rows, schema_overrides=EVAL_SCHEMA if not grid else None).sort("window")
    feats = window_features(ctx.arrays.ts_s, edges, node_cfg.window_s, ctx.first_visit, ctx.ctx_len)
    head = pl.DataFrame(
        {
            "window": np.arange(n_w, dtype=np.int64),
            "start_s": np.arange(n_w, dtype=np.float64) * node_cfg.window_s,
            "end_s": (np.arange(n_w, dtype=np.float64) + 1) * node_cfg.window_s,
            "requests": np.diff(edges).astype(np.int64),
            "warmup_start_s": ws * node_cfg.window_s,
            **feats,
        }
    )
    lab = lab.with_columns(
        pl.col("emb_hit_rate").shift(1).alias("emb_hit_prev"),
        pl.col("kv_reuse_rate").shift(1).alias("kv_reuse_prev"),
        pl.col("n_evals").cast(pl.Int64),
        pl.col("window").cast(pl.Int64),
    )
    head_obs = ["emb_hit_rate", "kv_reuse_rate", "h2d_util", "emb_hit_prev", "kv_reuse_prev"]
    label_cols = ["r_star", "p99_ms", "p50_ms", "slo_attainment", "flatness"]
    label_cols += ["r_flat_lo", "r_flat_hi", "n_evals"]
    grid_cols = [c for c in lab.columns if c not in {"window", *head_obs, *label_cols}]
    table = head.join(lab, on="window", how="left").select(
        [*head.columns, *head_obs, *label_cols, *grid_cols]
    )
    table = table.with_columns(pl.col(pl.Float64).fill_null(float("nan")))
    meta = {
        "node": asdict(node_cfg),
        "oracle": asdict(oracle_cfg),
        "gpu": ctx.gpu.name,
        "model": ctx.model.name,
        "pool_bytes": ctx.pool_bytes,
        "pool_source": ctx.pool_source,
        **({} if grid else {"grid": False}),
    }
    return Labels(
        table=table,
        window_s=node_cfg.window_s,
        coarse_grid=tuple(float(r) for r in ratio_grid(oracle_cfg.coarse_step)) if grid else (),
        meta=meta,
        schedule_run=run,
    )
