"""The stage calls behind ``helm-plan analyze``: one function per stage, tables out.

Each stage calls the library stage that owns the computation (inspect, cache
curves, oracle) and turns its typed result into the named tables of the run
store (:mod:`helm_plan.report.store`); the policies stage, the largest, has its
own module (:mod:`helm_plan.analyze.policies_stage`). Nothing here prints or
writes files; :mod:`helm_plan.analyze.run` caches the outputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from helm_plan.arrays import TraceArrays
from helm_plan.cache.curves import CurvesConfig, compute_curves
from helm_plan.exec import Executor, Progress
from helm_plan.inspect import inspect_trace
from helm_plan.io import spans
from helm_plan.latency.model import LatencyModel
from helm_plan.oracle import Labels, OracleConfig, label_windows
from helm_plan.pool import Pool
from helm_plan.report.tables import (
    CURVE_KNEES,
    CURVES,
    LABELS,
    LABELS_GRID,
    STATS,
    WORKLOAD_ARRIVALS,
    WORKLOAD_HISTORY,
    WORKLOAD_POPULARITY,
)
from helm_plan.sim import NodeConfig, NodeContext, NodeResult, replay_span

_TOKEN_SPAN = 1 << 24
"""History tokens counted at a time (their pages are dropped after each span when spilled)."""


def no_progress(done: int, total: int) -> None:
    """Every stage's default progress callback (the policies stage's too): reports nowhere."""
    return None


@dataclass(frozen=True)
class StageOutput:
    """What a stage hands downstream and to the run store."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    """Named tables for the run store."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Scalar JSON-able results."""


# ------------------------------------------------------------------ inspect


def stage_inspect(
    trace_path: Path, ctx: NodeContext, progress: Progress = no_progress
) -> StageOutput:
    """Trace statistics (DuckDB, :func:`helm_plan.inspect.inspect_trace`) and workload series."""
    stats = inspect_trace(trace_path, ctx.model, progress=progress).to_json()
    stats.pop("trace", None)
    stats.pop("schema_version", None)
    names, values, texts = [], [], []
    for k, v in stats.items():
        names.append(k)
        num = isinstance(v, int | float) and not isinstance(v, bool)
        values.append(float(v) if num else None)
        texts.append(None if num or v is None else str(v))
    tables = {
        STATS: pl.DataFrame(
            {"name": names, "value": values, "text": texts},
            schema={"name": pl.String, "value": pl.Float64, "text": pl.String},
        ),
        **workload_tables(ctx.arrays, ctx.model.max_seq_len),
    }
    return StageOutput(tables=tables, meta={"stats_schema_version": "1"})


def workload_tables(a: TraceArrays, max_seq_len: int) -> dict[str, pl.DataFrame]:
    """Arrival rate per bin, context-length histogram and item popularity by rank."""
    dur = float(a.ts_s[-1]) if a.n_requests else 0.0
    bin_s = max(1.0, float(np.ceil(dur / 600.0)))
    n_bins = int(dur // bin_s) + 1
    cnt = np.bincount((a.ts_s // bin_s).astype(np.int64), minlength=n_bins)
    arrivals = pl.DataFrame(
        {"t_s": np.arange(n_bins) * bin_s, "requests": cnt.astype(np.int64), "qps": cnt / bin_s}
    )
    L = np.minimum(a.hist_end, max_seq_len)
    top = max(int(L.max()) if len(L) else 1, 1)
    edges = np.unique(np.concatenate([[0], 2 ** np.arange(0, int(np.ceil(np.log2(top))) + 1)]))
    edges = edges[edges <= top]
    idx = np.searchsorted(edges, L, side="right") - 1
    hcnt = np.bincount(idx, minlength=len(edges))
    hi = np.append(edges[1:] - 1, top)
    hi = np.maximum(hi, edges)
    history = pl.DataFrame(
        {"len_lo": edges.astype(np.int64), "len_hi": hi.astype(np.int64), "requests": hcnt}
    ).filter(pl.col("requests") > 0)
    occ = np.zeros(a.n_items, np.int64)
    for i, j in spans(0, len(a.hist_values), _TOKEN_SPAN):  # spilled tokens: a span at a time
        occ += np.bincount(a.hist_values[i:j], minlength=a.n_items)
    occ = np.sort(occ)[::-1]
    occ = occ[occ > 0]
    ranks = np.unique(np.geomspace(1, max(len(occ), 1), num=min(len(occ), 200)).astype(np.int64))
    popularity = pl.DataFrame({"rank": ranks, "count": occ[ranks - 1].astype(np.int64)})
    return {
        WORKLOAD_ARRIVALS: arrivals,
        WORKLOAD_HISTORY: history,
        WORKLOAD_POPULARITY: popularity,
    }


# ------------------------------------------------------------------ curves


def stage_curves(
    ctx: NodeContext, cfg: CurvesConfig, progress: Progress = no_progress, kv_first: bool = False
) -> StageOutput:
    """EMB hit-rate and KV reuse curves over the pool (:func:`compute_curves`; ``kv_first``:
    its KV pass before its EMB ones, the same curves)."""
    pool = Pool(ctx.pool_bytes, ctx.pool_source)
    cv = compute_curves(ctx.workload, ctx.gpu, ctx.model, pool, cfg, progress, kv_first=kv_first)
    keep = ["kind", "window", "window_start_s", "window_end_s", "capacity_bytes",
            "pool_fraction", "hit_rate", "n_accesses", "exact"]  # fmt: skip
    table = cv.table.select(keep).with_columns(pl.col("window").cast(pl.Int64))
    knees = cv.knees.with_columns(pl.col("window").cast(pl.Int64))
    return StageOutput(
        tables={CURVES: table, CURVE_KNEES: knees},
        meta={"curves_emb_kv_tokens": cv.emb_kv_tokens, "curves_ratio": cfg.ratio},
    )


def curves_task(shared: tuple[NodeContext], cfg: CurvesConfig) -> StageOutput:
    """:func:`stage_curves` as an executor task (in the background of the oracle)."""
    return stage_curves(shared[0], cfg)


# ------------------------------------------------------------------ oracle


def stage_oracle(
    ctx: NodeContext,
    node_cfg: NodeConfig,
    oracle_cfg: OracleConfig,
    progress: Progress = no_progress,
    executor: Executor | None = None,
) -> Labels:
    """Per-window offline-optimal ratio (:func:`helm_plan.oracle.label_windows`).

    Without the coarse grid: analyze needs each window's ``r*`` and flat band, and the
    controller's training environment (``helm-plan train``) labels its traces itself.
    """
    return label_windows(ctx, node_cfg, oracle_cfg, progress, executor, grid=False)


def labels_tables(labels: Labels) -> dict[str, pl.DataFrame]:
    """The labels as report tables: one row per window, plus the long table of the points
    each window's search evaluated (:meth:`Labels.points`)."""
    t = labels.table
    lab = t.select(
        pl.col("window").cast(pl.Int64),
        pl.col("start_s").alias("t_start_s"),
        pl.col("end_s").alias("t_end_s"),
        pl.col("requests").cast(pl.Int64).alias("n_requests"),
        "r_star", "p99_ms", "slo_attainment",
        pl.col("r_flat_lo").alias("flat_lo"),
        pl.col("r_flat_hi").alias("flat_hi"),
        pl.col("flatness").alias("flat_width"),
        pl.col("n_evals").cast(pl.Int64),
    )  # fmt: skip
    return {LABELS: lab, LABELS_GRID: labels.points()}


def oracle_pooled(
    ctx: NodeContext, labels: Labels, node_cfg: NodeConfig, oracle_cfg: OracleConfig
) -> NodeResult | tuple[float, float]:
    """The oracle's whole-trace figures: each measured window at its r*.

    With ``warmup="carry"`` it is the carry oracle's own run on its schedule
    with demand (lazy) refill, exactly how those labels were evaluated (no
    replay). With ``warmup="window"`` every window is evaluated from caches
    cold at r* at the start of its warm-up span, queue included, and the
    measured windows' sojourns are pooled: (P99 ms, SLO attainment).
    """
    if labels.schedule_run is not None:
        return labels.schedule_run
    warmup_windows = oracle_cfg.warmup_windows
    edges = ctx.edges(node_cfg.window_s)
    soj: list[np.ndarray] = []
    for w, r in enumerate(labels.r_star):
        s, e = int(edges[w]), int(edges[w + 1])
        if w < node_cfg.warmup_windows or e == s or not np.isfinite(r):
            continue
        ws = int(edges[max(w - warmup_windows, 0)])
        soj.append(replay_span(ctx, float(r), ws, s, e, node_cfg)[1])
    if not soj:
        return float("nan"), float("nan")
    x = np.concatenate(soj)
    return float(np.percentile(x, 99) * 1e3), float(np.mean(x <= node_cfg.slo_ms / 1e3))


def latency_table(lat: LatencyModel, source: str) -> pl.DataFrame:
    """The resolved latency coefficients with units."""
    units = {
        "t_launch_s": "s / batch", "t_request_s": "s / request", "weight_read_s": "s / batch",
        "dense_s_per_token": "s / token at full efficiency",
        "mfu_half_tokens": "tokens (efficiency half-point)",
        "attn_s_per_pair": "s / (query, key) pair", "hbm_bw_Bps": "bytes / s",
        "h2d_bw_Bps": "bytes / s", "h2d_latency_s": "s / batch with misses",
        "host_gather_Bps": "bytes / s",
    }  # fmt: skip
    names = [f.name for f in dataclasses.fields(lat)]
    return pl.DataFrame(
        {
            "name": names,
            "value": [float(getattr(lat, n)) for n in names],
            "unit": [units.get(n, "") for n in names],
            "source": [source] * len(names),
        }
    )
