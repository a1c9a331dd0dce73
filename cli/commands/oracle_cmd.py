"""`helm-plan oracle`: label every window with its offline-optimal EMB share.

Writes a labels parquet (schema: :mod:`helm_plan.oracle.labels`) atomically:
on any error no file, or the previous one, is left at ``-o``. Defaults come
from :class:`~helm_plan.sim.NodeConfig` and :class:`~helm_plan.oracle.OracleConfig`
(as in ``simulate`` and ``analyze``).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    EXECUTOR,
    NODE,
    ExecutorOpt,
    GpuOpt,
    JsonOpt,
    LatencyOpt,
    ModelOpt,
    OutOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    RayAddressOpt,
    SeedOpt,
    SloMsOpt,
    SlotsOpt,
    TraceArg,
    WindowSOpt,
    WorkersOpt,
)
from helm_plan_cli.output import emit_json, emit_notes, emit_table
from helm_plan_cli.progress import task

from helm_plan import exec as executors
from helm_plan.oracle import OracleConfig, label_windows, write_labels
from helm_plan.profiles import DEFAULT_GPU, DEFAULT_MODEL
from helm_plan.sim import NodeConfig, load_context

ORACLE = OracleConfig()
"""The oracle's defaults, read once here."""

TrialsOpt = Annotated[int, typer.Option("--trials", help="Optuna trials per window.")]
SamplerOpt = Annotated[str, typer.Option("--sampler", help="Optuna sampler: tpe or gp.")]
GridOpt = Annotated[
    float | None,
    typer.Option("--grid", help="Exhaustive grid of this step instead of Optuna (e.g. 0.01)."),
]
WarmupOpt = Annotated[
    int, typer.Option("--warmup-windows", help="Windows before w that warm the caches at r.")
]
WarmupModeOpt = Annotated[
    str,
    typer.Option(
        "--warmup",
        help="carry (default): start each window from the caches, queue backlog and refill "
        "the labelled schedule leaves (sequential: what a running node sees); window: cold at r "
        "on the warm-up windows and an idle queue (windows in parallel).",
    ),
]


def oracle(
    trace: TraceArg,
    out: OutOpt,
    gpu: GpuOpt = DEFAULT_GPU,
    model: ModelOpt = DEFAULT_MODEL,
    latency: LatencyOpt = None,
    slo_ms: SloMsOpt = NODE.slo_ms,
    window_s: WindowSOpt = NODE.window_s,
    trials: TrialsOpt = ORACLE.trials,
    sampler: SamplerOpt = ORACLE.sampler,
    grid: GridOpt = ORACLE.grid_step,
    workers: WorkersOpt = EXECUTOR.workers,
    executor: ExecutorOpt = EXECUTOR.kind,
    ray_address: RayAddressOpt = None,
    slots: SlotsOpt = NODE.slots,
    warmup_windows: WarmupOpt = ORACLE.warmup_windows,
    warmup: WarmupModeOpt = ORACLE.warmup,
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    seed: SeedOpt = ORACLE.seed,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Label each window of TRACE with r* = argmin P99(r) (Optuna per window, or --grid)."""
    guard(inputs=[trace, gpu, model, latency], outputs={"-o": out})
    ncfg = NodeConfig(slo_ms=slo_ms, window_s=window_s, slots=slots)
    ocfg = OracleConfig(
        trials=trials,
        sampler=sampler,
        grid_step=grid,
        seed=seed,
        warmup_windows=warmup_windows,
        warmup=warmup,
    )
    ex = executors.get_executor(executor, workers, ray_address)  # checks its options first
    ctx = load_context(
        trace,
        gpu=gpu,
        model=model,
        latency=latency,
        pool_bytes=pool_bytes,
        pool_fraction=pool_fraction,
        seed=seed,
    )
    ncfg = ncfg.for_context(ctx)  # the one SLO rule: --slo-ms, else the model's default
    if not as_json:
        emit_notes(ctx.notes)
    with ex, task("labelling windows", quiet=quiet or as_json) as progress:
        labels = label_windows(ctx, ncfg, ocfg, progress, ex)
    path = write_labels(labels, out)
    r = labels.r_star
    ok = np.isfinite(r)
    flat = labels.table["flatness"].to_numpy()
    if as_json:
        emit_json(
            "oracle",
            {
                "trace": str(trace),
                "out": str(path),
                "gpu": ctx.gpu.name,
                "model": ctx.model.name,
                "pool_bytes": ctx.pool_bytes,
                "window_s": window_s,
                "slo_ms": ncfg.slo_ms,
                "warmup": warmup,
                "windows": len(r),
                "windows_with_requests": int(ok.sum()),
                "r_star_mean": float(np.mean(r[ok])) if ok.any() else None,
                "r_star_min": float(np.min(r[ok])) if ok.any() else None,
                "r_star_max": float(np.max(r[ok])) if ok.any() else None,
                "flatness_median": float(np.nanmedian(flat)) if ok.any() else None,
                "notes": list(ctx.notes),
            },
        )
        return
    summary = (
        f"wrote {path}: {len(r)} windows of {window_s:g} s; "
        f"r* mean {np.mean(r[ok]):.3f}, range [{np.min(r[ok]):.2f}, {np.max(r[ok]):.2f}]; "
        f"median flatness {np.nanmedian(flat):.2f}"
        if ok.any()
        else f"wrote {path}: {len(r)} windows, none with requests"
    )
    emit_table(summary)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("oracle")(oracle)
