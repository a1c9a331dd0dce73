"""`helm-plan profile`: EMB hit-rate and KV-reuse curves of a trace, written as parquet.

Writes the curves table (schema: ``helm_plan.cache.curves.SCHEMA``) atomically
and prints the whole-trace hit rates at 10%, 20%, ..., 100% of the pool and the
knee of each curve. Warns on stderr when the trace's EMB+KV footprint fits in
the pool (the caches then do not compete).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.options import (
    GpuOpt,
    ModelOpt,
    OutOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    SampleRateOpt,
    SampleSizeOpt,
    SeedOpt,
    TraceArg,
    WindowSOpt,
)
from helm_plan_cli.progress import out_console, task
from rich.table import Table

from helm_plan import trace as T
from helm_plan.cache import curves as C
from helm_plan.profiles import Pool
from helm_plan.sim import load_context

RatioOpt = Annotated[
    float,
    typer.Option("--ratio", help="EMB share r whose KV capacity (1-r)*pool fixes the emb curve."),
]


StreamOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--stream-out",
        help="Also write the EMB access stream behind the emb curve (parquet: request, ts_s, "
        "item_id), to check the curve with another cache simulator.",
    ),
]


def _gib(b: float) -> str:
    return f"{b / (1 << 30):,.3f} GiB" if b >= 1 << 26 else f"{b / (1 << 20):,.2f} MiB"


def profile_command(
    trace: TraceArg,
    out: OutOpt,
    gpu: GpuOpt = "a100-80g",
    model: ModelOpt = "gr-small",
    window_s: WindowSOpt = 10.0,
    sample_rate: SampleRateOpt = 1.0,
    sample_size: SampleSizeOpt = None,
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    ratio: RatioOpt = 0.5,
    stream_out: StreamOutOpt = None,
    seed: SeedOpt = 0,
    quiet: QuietOpt = False,
) -> None:
    """Measure EMB hit-rate and KV-reuse curves over the cache pool (whole trace and per window)."""
    cfg = C.CurvesConfig(
        window_s=window_s, ratio=ratio, sample_rate=sample_rate, sample_size=sample_size, seed=seed
    )
    ctx = load_context(
        trace, gpu=gpu, model=model, pool_bytes=pool_bytes, pool_fraction=pool_fraction, seed=seed
    )
    g, m, arrays = ctx.gpu, ctx.model, ctx.arrays
    pool = Pool(ctx.pool_bytes, ctx.pool_source)
    for note in ctx.notes:
        typer.echo(f"warning: {note}", err=True)
    with task("curves", quiet=quiet) as update:
        cv = C.compute_curves(arrays, g, m, pool, cfg, progress=update)
    prov = {"trace": str(trace), "trace_sha256": T.sha256(trace)}
    C.write(cv, out, prov)
    if stream_out is not None:
        C.write_stream(
            C.emb_stream(arrays, m, pool, ratio), stream_out, {**prov, "ratio": str(ratio)}
        )

    tab = Table(
        title=f"{trace.name}: {g.name} x {m.name}, pool {_gib(pool.pool_bytes)} ({pool.source})"
    )
    tab.add_column("pool share", justify="right")
    for kind in C.KINDS:
        tab.add_column(kind, justify="right")
    for k in range(1, 11):
        f = k / 10
        tab.add_row(f"{k * 10}%", *(f"{cv.hit_rate_at(kind, f):.4f}" for kind in C.KINDS))
    knees = cv.knees.filter(cv.knees["window"] == C.WHOLE)
    cells = []
    for kind in C.KINDS:
        row = knees.filter(knees["kind"] == kind).row(0, named=True)
        cells.append(
            "-"
            if row["pool_fraction"] is None
            else f"{row['pool_fraction']:.0%} -> {row['hit_rate']:.4f}"
        )
    tab.add_row("knee", *cells, style="bold")
    out_console.print(tab)
    note = "exact" if not cfg.sampled else f"SHARDS rate {cfg.sample_rate}"
    out_console.print(
        f"emb: KV fixed at {cv.emb_kv_tokens:,} tokens (ratio {ratio}); EMB curves {note}; "
        f"wrote {out}"
    )


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("profile")(profile_command)
