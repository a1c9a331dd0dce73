"""`helm-plan profile`: EMB hit-rate and KV-reuse curves of a trace, written as parquet.

Writes the curves table (schema: ``helm_plan.cache.curves.SCHEMA``) atomically
and prints the whole-trace hit rates at 10%, 20%, ..., 100% of the pool and the
knee of each curve. Notes on stderr when the trace's EMB+KV footprint fits in
the pool (the caches then compete only outside the band of r where neither evicts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    NODE,
    GpuOpt,
    JsonOpt,
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
from helm_plan_cli.output import emit_json, emit_notes, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan import trace as T
from helm_plan.cache import curves as C
from helm_plan.cache import embstream, sampled
from helm_plan.cache.core import Workload, capacities
from helm_plan.pool import Pool
from helm_plan.profiles import DEFAULT_GPU, DEFAULT_MODEL, load_model
from helm_plan.sim import load_context

CURVES = C.CurvesConfig()
"""The curve defaults, read once here."""

RatioOpt = Annotated[
    float,
    typer.Option("--ratio", help="EMB share r whose KV capacity (1-r)*pool fixes the emb curve."),
]


StreamOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--stream-out",
        help="Also write the EMB lookup stream behind the emb curve, while the curve is "
        "measured (parquet: request, table, row, bytes), to check the curve with another "
        "cache simulator.",
    ),
]


def _gib(b: float) -> str:
    return f"{b / (1 << 30):,.3f} GiB" if b >= 1 << 26 else f"{b / (1 << 20):,.2f} MiB"


def profile_command(
    trace: TraceArg,
    out: OutOpt,
    gpu: GpuOpt = DEFAULT_GPU,
    model: ModelOpt = DEFAULT_MODEL,
    window_s: WindowSOpt = NODE.window_s,
    sample_rate: SampleRateOpt = CURVES.sample_rate,
    sample_size: SampleSizeOpt = CURVES.sample_size,
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    ratio: RatioOpt = CURVES.ratio,
    stream_out: StreamOutOpt = None,
    seed: SeedOpt = CURVES.seed,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Measure EMB hit-rate and KV-reuse curves over the cache pool (whole trace and per window)."""
    guard(inputs=[trace, gpu, model], outputs={"-o": out, "--stream-out": stream_out})
    cfg = C.CurvesConfig(
        window_s=window_s, ratio=ratio, sample_rate=sample_rate, sample_size=sample_size, seed=seed
    )
    source: Path | Workload = trace
    shards: sampled.SampledWorkload | None = None
    if cfg.sample_rate < 1.0 and stream_out is None:  # hold only the tokens SHARDS can sample
        shards = sampled.load(trace, load_model(model), sample_rate=cfg.sample_rate, seed=seed,
                              candidate_seed=seed)  # fmt: skip
        source = shards.workload
    ctx = load_context(
        source, gpu=gpu, model=model, pool_bytes=pool_bytes, pool_fraction=pool_fraction, seed=seed
    )
    g, m, wl = ctx.gpu, ctx.model, ctx.workload
    pool = Pool(ctx.pool_bytes, ctx.pool_source)
    notes = list(ctx.notes)
    if not as_json:
        emit_notes(notes)
    prov = {"trace": str(trace), "trace_sha256": T.sha256(trace)}
    with task("curves", quiet=quiet or as_json) as update:
        if stream_out is None:
            cv = C.compute_curves(shards or wl, g, m, pool, cfg, progress=update)
        else:  # written by the emb pass itself: no second KV replay or stream build
            kv_tokens = capacities(ratio, pool.pool_bytes, m)[1]
            meta = embstream.write_stream_meta(
                {**prov, "ratio": str(ratio)}, embstream.stream_metadata(wl, m, kv_tokens)
            )
            with embstream.StreamWriter(stream_out, wl, m, meta) as sink:
                cv = C.compute_curves(wl, g, m, pool, cfg, progress=update, sink=sink)
    C.write(cv, out, prov)

    knees = cv.knees.filter(cv.knees["window"] == C.WHOLE)
    if as_json:
        emit_json(
            "profile",
            {
                "trace": str(trace),
                "out": str(out),
                "stream_out": None if stream_out is None else str(stream_out),
                "gpu": g.name,
                "model": m.name,
                "pool_bytes": pool.pool_bytes,
                "pool_source": pool.source,
                "footprint_bytes": ctx.footprint_bytes,
                "ratio": ratio,
                "emb_kv_tokens": cv.emb_kv_tokens,
                "exact": not cfg.sampled,
                "hit_rates": [
                    {"pool_fraction": k / 10, **{kd: cv.hit_rate_at(kd, k / 10) for kd in C.KINDS}}
                    for k in range(1, 11)
                ],
                "knees": knees.drop("window").to_dicts(),
                "notes": notes,
            },
        )
        return
    tab = Table(
        title=f"{trace.name}: {g.name} x {m.name}, pool {_gib(pool.pool_bytes)} ({pool.source})"
    )
    tab.add_column("pool share", justify="right")
    for kind in C.KINDS:
        tab.add_column(kind, justify="right")
    for k in range(1, 11):
        f = k / 10
        tab.add_row(f"{k * 10}%", *(f"{cv.hit_rate_at(kind, f):.4f}" for kind in C.KINDS))
    cells = []
    for kind in C.KINDS:
        row = knees.filter(knees["kind"] == kind).row(0, named=True)
        cells.append(
            "-"
            if row["pool_fraction"] is None
            else f"{row['pool_fraction']:.0%} -> {row['hit_rate']:.4f}"
        )
    tab.add_row("knee", *cells, style="bold")
    note = "exact" if not cfg.sampled else f"SHARDS rate {cfg.sample_rate}"
    emit_table(
        tab,
        f"emb: KV fixed at {cv.emb_kv_tokens:,} tokens (ratio {ratio}); EMB curves {note}; "
        f"wrote {out}",
    )


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("profile")(profile_command)
