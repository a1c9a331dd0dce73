"""`helm-plan oracle`: label every window with its offline-optimal EMB share.

Writes a labels parquet (schema: :mod:`helm_plan.oracle_labels`) atomically:
on any error no file, or the previous one, is left at ``-o``. Defaults as in
``simulate``: ``--slo-ms 100``, ``--window-s 10``.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import typer
from helm_plan_cli.options import (
    GpuOpt,
    LatencyOpt,
    ModelOpt,
    OutOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    SeedOpt,
    TraceArg,
    WindowSOpt,
    WorkersOpt,
)
from helm_plan_cli.progress import err_console, out_console, task

from helm_plan import exec as executors
from helm_plan.oracle import OracleConfig, label_windows, write_labels
from helm_plan.sim import DEFAULT_SLO_MS, DEFAULT_WINDOW_S, NodeConfig, load_context

TrialsOpt = Annotated[int, typer.Option("--trials", help="Optuna trials per window.")]
SamplerOpt = Annotated[str, typer.Option("--sampler", help="Optuna sampler: tpe or gp.")]
GridOpt = Annotated[
    float | None,
    typer.Option("--grid", help="Exhaustive grid of this step instead of Optuna (e.g. 0.01)."),
]
SlotsOpt = Annotated[int, typer.Option("--slots", help="Parallel executors of the node's FIFO.")]
WarmupOpt = Annotated[
    int, typer.Option("--warmup-windows", help="Windows before w that warm the caches at r.")
]
WarmupModeOpt = Annotated[
    str,
    typer.Option(
        "--warmup",
        help="window: cold at r on the warm-up windows (parallel); carry: start each window "
        "from the caches and queue backlog the labelled schedule leaves (sequential).",
    ),
]
SloOpt = Annotated[
    float, typer.Option("--slo-ms", help="P99 latency SLO in milliseconds (online ranking budget).")
]


def oracle(
    trace: TraceArg,
    out: OutOpt,
    gpu: GpuOpt = "a100-80g",
    model: ModelOpt = "gr-small",
    latency: LatencyOpt = None,
    slo_ms: SloOpt = DEFAULT_SLO_MS,
    window_s: WindowSOpt = DEFAULT_WINDOW_S,
    trials: TrialsOpt = 30,
    sampler: SamplerOpt = "tpe",
    grid: GridOpt = None,
    workers: WorkersOpt = 0,
    slots: SlotsOpt = 1,
    warmup_windows: WarmupOpt = 1,
    warmup: WarmupModeOpt = "window",
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    seed: SeedOpt = 0,
    quiet: QuietOpt = False,
) -> None:
    """Label each window of TRACE with r* = argmin P99(r) (Optuna per window, or --grid)."""
    ncfg = NodeConfig(slo_ms=slo_ms, window_s=window_s, slots=slots)
    ocfg = OracleConfig(
        trials=trials,
        sampler=sampler,
        grid_step=grid,
        seed=seed,
        warmup_windows=warmup_windows,
        warmup=warmup,
    )
    ctx = load_context(
        trace,
        gpu=gpu,
        model=model,
        latency=latency,
        pool_bytes=pool_bytes,
        pool_fraction=pool_fraction,
        seed=seed,
    )
    for note in ctx.notes:
        err_console.print(f"note: {note}")
    with task("labelling windows", quiet=quiet) as progress:
        labels = label_windows(ctx, ncfg, ocfg, progress, executors.local(workers))
    path = write_labels(labels, out)
    r = labels.r_star
    ok = np.isfinite(r)
    flat = labels.table["flatness"].to_numpy()
    summary = (
        f"wrote {path}: {len(r)} windows of {window_s:g} s; "
        f"r* mean {np.mean(r[ok]):.3f}, range [{np.min(r[ok]):.2f}, {np.max(r[ok]):.2f}]; "
        f"median flatness {np.nanmedian(flat):.2f}"
        if ok.any()
        else f"wrote {path}: {len(r)} windows, none with requests"
    )
    out_console.print(summary)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("oracle")(oracle)
