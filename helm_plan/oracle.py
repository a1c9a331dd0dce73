"""The oracle: offline-optimal EMB share per window, and the best static share.

For window ``w`` (DESIGN.md, Oracle), ``P99_w(r)`` is simulated from cold
caches at ``r`` at the start of the warm-up span (the ``warmup_windows``
previous windows), over the warm-up span and window ``w``, queue included;
only window ``w``'s requests are measured (:func:`helm_plan.sim.span.evaluate_span`).
Then ``r*_w = argmin P99_w(r)``; ties go to the higher SLO attainment, then
the smaller ``r``.

Search per window:

1. the coarse grid (``coarse_step``, default 0.0..1.0 step 0.1) is always
   simulated: the label table stores it for the controller's training
   environment;
2. a seeded Optuna study (TPE by default, GP optional) is warm-started with
   those points (``study.add_trial``) and runs ``trials`` more trials on the
   ``ratio_step`` lattice (default 0.01; repeated suggestions are memoised,
   so ``n_evals`` may be below ``trials`` + grid);
3. or, with ``grid_step``, an exhaustive grid replaces Optuna (validation).

With ``warmup="carry"`` (:mod:`helm_plan.oracle_carry`) each window instead
starts from the caches and queue backlog the labelled schedule leaves behind;
windows are then labelled in order.

Window ``w``'s study is seeded with ``SeedSequence([seed, w])``, and each
window is an independent task, so labels are identical for any ``workers``.
Windows run in ``spawn`` worker processes (the compiled kernels load from
numba's on-disk cache). Optuna's own logging is set to WARNING.

:func:`best_static` searches the single ``r`` minimising whole-trace P99
(over the node's measured windows) the same way.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError
from helm_plan.oracle_carry import carry_rows
from helm_plan.oracle_labels import (
    Labels,
    grid_suffix,
    read_labels,
    window_features,
    write_labels,
)
from helm_plan.oracle_search import best_of as _best
from helm_plan.oracle_search import ratio_grid, search
from helm_plan.oracle_search import seed_for as _seed
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import NodeConfig, simulate_node
from helm_plan.sim.span import evaluate_span

Progress = Callable[[int, int], None]
SAMPLERS = ("tpe", "gp")
WARMUPS = ("window", "carry")

__all__ = [
    "BestStatic",
    "Labels",
    "OracleConfig",
    "best_static",
    "label_windows",
    "read_labels",
    "write_labels",
]


@dataclass(frozen=True)
class OracleConfig:
    """How the oracle searches r per window."""

    trials: int = 30
    """Optuna trials per window, on top of the coarse-grid warm start."""
    sampler: str = "tpe"
    """Optuna sampler: tpe (default) or gp."""
    grid_step: float | None = None
    """If set, an exhaustive grid of this step replaces Optuna (validation, e.g. 0.01)."""
    ratio_step: float | None = 0.01
    """Lattice of r that Optuna searches (None = continuous)."""
    coarse_step: float = 0.1
    """Step of the coarse grid stored in the labels (a multiple of 0.01)."""
    seed: int = 0
    """Base seed; window w's study uses SeedSequence([seed, w])."""
    workers: int = 1
    """Worker processes (0 = all cores)."""
    warmup_windows: int = 1
    """Windows before w on which the caches are warmed at r (0 = cold at the window start)."""
    warmup: str = "window"
    """'window': cold at r on the warm-up windows, windows in parallel (DESIGN.md); 'carry':
    each window starts from the caches and queue the labelled schedule leaves (sequential)."""
    flat_tol: float = 0.02
    """Relative P99 tolerance of the flatness measure."""

    def __post_init__(self) -> None:
        _require_int("trials", self.trials, 0)
        if self.sampler not in SAMPLERS:
            raise ConfigError(
                f"unknown sampler {self.sampler!r}", hint=f"use one of {', '.join(SAMPLERS)}"
            )
        if self.grid_step is not None:
            require_positive("grid_step", self.grid_step)
            require_range("grid_step", self.grid_step, 0.0, 1.0)
        if self.ratio_step is not None:
            require_positive("ratio_step", self.ratio_step)
            require_range("ratio_step", self.ratio_step, 0.0, 1.0)
        require_positive("coarse_step", self.coarse_step)
        require_range("coarse_step", self.coarse_step, 0.01, 1.0)
        if abs(self.coarse_step * 100 - round(self.coarse_step * 100)) > 1e-6:
            raise ConfigError(f"coarse_step must be a multiple of 0.01, got {self.coarse_step}")
        _require_int("seed", self.seed, 0)
        _require_int("workers", self.workers, 0)
        _require_int("warmup_windows", self.warmup_windows, 0)
        if self.warmup not in WARMUPS:
            raise ConfigError(
                f"unknown warmup {self.warmup!r}", hint=f"use one of {', '.join(WARMUPS)}"
            )
        require_range("flat_tol", self.flat_tol, 0.0, 1.0)

    @property
    def n_workers(self) -> int:
        return self.workers if self.workers > 0 else (os.cpu_count() or 1)


def _require_int(name: str, v: Any, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < lo:
        what = "positive" if lo == 1 else f">= {lo}"
        raise ConfigError(f"{name} must be an integer {what}, got {v!r}")


# ------------------------------------------------------------------ worker plumbing

_G: dict[str, Any] = {}


def _init(ctx: NodeContext, ncfg: NodeConfig, ocfg: OracleConfig) -> None:
    _G.update(ctx=ctx, ncfg=ncfg, ocfg=ocfg, edges=ctx.edges(ncfg.window_s))


def _run(
    task: Callable[[Any], Any],
    items: Sequence[Any],
    ctx: NodeContext,
    ncfg: NodeConfig,
    ocfg: OracleConfig,
    progress: Progress | None,
) -> list[Any]:
    out: list[Any] = [None] * len(items)
    total = len(items)
    if progress:
        progress(0, total)
    workers = min(ocfg.n_workers, total)
    if workers <= 1:
        saved = dict(_G)
        _init(ctx, ncfg, ocfg)
        try:
            for i, it in enumerate(items):
                out[i] = task(it)
                if progress:
                    progress(i + 1, total)
        finally:
            _G.clear()
            _G.update(saved)
        return out
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("spawn"),
        initializer=_init,
        initargs=(ctx, ncfg, ocfg),
    ) as ex:
        futs = {ex.submit(task, it): i for i, it in enumerate(items)}
        try:
            for done, f in enumerate(as_completed(futs), 1):
                out[futs[f]] = f.result()
                if progress:
                    progress(done, total)
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)
            raise
    return out


def _label_task(w: int) -> dict[str, Any]:
    ctx: NodeContext = _G["ctx"]
    ncfg: NodeConfig = _G["ncfg"]
    ocfg: OracleConfig = _G["ocfg"]
    edges = _G["edges"]
    s, e = int(edges[w]), int(edges[w + 1])
    ws = int(edges[max(w - ocfg.warmup_windows, 0)])
    full: dict[float, Any] = {}

    def objective(r: float) -> tuple[float, float]:
        ev = evaluate_span(ctx, r, ws, s, e, ncfg)
        full[r] = ev
        return ev.p99_ms, ev.slo_attainment

    if e == s:
        return empty_row(w, ocfg)
    evals = search(objective, ocfg, _seed(ocfg.seed, w))
    return label_row(w, evals, full, ctx, ncfg, ocfg)


def label_row(
    w: int,
    evals: dict[float, tuple[float, float]],
    full: dict[float, Any],
    ctx: NodeContext,
    ncfg: NodeConfig,
    ocfg: OracleConfig,
) -> dict[str, Any]:
    """One label row from a window's evaluations (``full``: r -> SpanEval)."""
    row: dict[str, Any] = {"window": w}
    r_star, flat, lo, hi = _best(evals, ocfg.flat_tol)
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
        h2d_util=b.h2d_bytes / (ctx.latency.h2d_bw_Bps * ncfg.window_s),
    )
    for r in ratio_grid(ocfg.coarse_step):
        g = full[round(float(r), 9)]
        sfx = grid_suffix(r)
        row[f"p99_ms_{sfx}"] = g.p99_ms
        row[f"slo_att_{sfx}"] = g.slo_attainment
        row[f"emb_hit_{sfx}"] = g.emb_hit_rate
        row[f"kv_reuse_{sfx}"] = g.kv_reuse_rate
    return row


def empty_row(w: int, ocfg: OracleConfig) -> dict[str, Any]:
    """The label row of a window without requests (all NaN)."""
    nan = float("nan")
    row: dict[str, Any] = {"window": w, "r_star": nan, "p99_ms": nan, "p50_ms": nan}
    row.update(slo_attainment=nan, flatness=nan, r_flat_lo=nan, r_flat_hi=nan, n_evals=0)
    row.update(emb_hit_rate=nan, kv_reuse_rate=nan, h2d_util=nan)
    for r in ratio_grid(ocfg.coarse_step):
        for m in ("p99_ms", "slo_att", "emb_hit", "kv_reuse"):
            row[f"{m}_{grid_suffix(r)}"] = nan
    return row


def label_windows(
    ctx: NodeContext,
    node_cfg: NodeConfig,
    oracle_cfg: OracleConfig,
    progress: Progress | None = None,
) -> Labels:
    """Label every window with its offline-optimal ratio (see the module docstring)."""
    edges = ctx.edges(node_cfg.window_s)
    n_w = len(edges) - 1
    if oracle_cfg.warmup == "carry":
        rows = carry_rows(ctx, node_cfg, oracle_cfg, label_row, empty_row, progress)
        ws = np.zeros(n_w, np.float64)  # the whole past warms every window
    else:
        rows = _run(_label_task, list(range(n_w)), ctx, node_cfg, oracle_cfg, progress)
        ws = np.array([max(w - oracle_cfg.warmup_windows, 0) for w in range(n_w)], np.float64)
    lab = pl.DataFrame(rows).sort("window")
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
        "oracle": asdict(oracle_cfg) | {"workers": None},
        "gpu": ctx.gpu.name,
        "model": ctx.model.name,
        "pool_bytes": ctx.pool_bytes,
        "pool_source": ctx.pool_source,
    }
    return Labels(
        table=table,
        window_s=node_cfg.window_s,
        coarse_grid=tuple(float(r) for r in ratio_grid(oracle_cfg.coarse_step)),
        meta=meta,
    )


# ------------------------------------------------------------------ best static


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


def _static_task(r: float) -> tuple[float, float, float, float]:
    res = simulate_node(_G["ctx"], np.array([r]), _G["ncfg"])
    return res.p99_ms, res.slo_attainment, res.emb_hit_rate, res.kv_reuse_rate


def best_static(
    ctx: NodeContext,
    node_cfg: NodeConfig,
    oracle_cfg: OracleConfig,
    progress: Progress | None = None,
) -> BestStatic:
    """Search the static r with the lowest whole-trace P99 (coarse grid in parallel, then Optuna)."""
    # A constant r never reallocates, so the refill mode is irrelevant here.
    pre = ratio_grid(oracle_cfg.coarse_step)
    if oracle_cfg.grid_step is not None:
        pre = np.union1d(pre, ratio_grid(oracle_cfg.grid_step))
    pre_r = [round(float(r), 9) for r in pre]
    results = _run(_static_task, pre_r, ctx, node_cfg, oracle_cfg, progress)
    cache = dict(zip(pre_r, results, strict=True))
    saved = dict(_G)
    _init(ctx, node_cfg, oracle_cfg)
    try:

        def objective(r: float) -> tuple[float, float]:
            if r not in cache:
                cache[r] = _static_task(r)
            return cache[r][0], cache[r][1]

        evals = search(objective, oracle_cfg, _seed(oracle_cfg.seed, 2**31 - 1))
    finally:
        _G.clear()
        _G.update(saved)
    r_star, flat, _, _ = _best(evals, oracle_cfg.flat_tol)
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
    return BestStatic(
        ratio=r_star,
        p99_ms=cache[r_star][0],
        slo_attainment=cache[r_star][1],
        flatness=flat,
        evaluated=df,
        method=method,
    )
