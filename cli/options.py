"""Shared CLI options, defined once as ``Annotated`` aliases."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TraceArg = Annotated[
    Path, typer.Argument(help="Canonical request trace (parquet).", show_default=False)
]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output file.", show_default=False)]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU profile name or TOML path.")]
ModelOpt = Annotated[str, typer.Option("--model", help="Model profile name or TOML path.")]
LatencyOpt = Annotated[
    str | None,
    typer.Option(
        "--latency",
        help="Latency profile name or TOML path (default: the shipped GPU_MODEL profile).",
    ),
]
PoolBytesOpt = Annotated[
    int | None,
    typer.Option("--pool-bytes", help="Cache pool size in bytes (overrides HBM sizing)."),
]
PoolFractionOpt = Annotated[
    float | None,
    typer.Option("--pool-fraction", help="Cache pool as a share of the trace's EMB+KV footprint."),
]
SloMsOpt = Annotated[float, typer.Option("--slo-ms", help="P99 latency SLO in milliseconds.")]
WindowSOpt = Annotated[float, typer.Option("--window-s", help="Window length in seconds.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for every random choice.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON object instead of a table.")]
WorkersOpt = Annotated[
    int, typer.Option("--workers", help="Parallel worker processes (0 = all cores).")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]
ModelOptionalOpt = Annotated[
    str | None,
    typer.Option("--model", help="Model profile name or TOML path (adds its footprints)."),
]
RegimeOpt = Annotated[
    str | None,
    typer.Option(
        "--regime", help="Arrival regime: steady, trend, burst or mixed (default: steady)."
    ),
]
QpsOpt = Annotated[
    float | None, typer.Option("--qps", help="Base arrival rate, requests per second.")
]
DurationSOpt = Annotated[
    float | None, typer.Option("--duration-s", help="Trace duration in seconds.")
]
SessionGapSOpt = Annotated[
    float,
    typer.Option("--session-gap-s", help="A user's interactions within this gap form one request."),
]
CandidatesOpt = Annotated[
    int, typer.Option("--candidates", help="Candidates scored per request (n_candidates).")
]
ArrivalsOpt = Annotated[
    Path | None,
    typer.Option(
        "--arrivals",
        help="Re-time from a real arrival trace: Azure LLM CSV, ServeGen CSV or folder, Mooncake JSONL.",
    ),
]
ReplicateOpt = Annotated[
    int,
    typer.Option("--replicate", help="Clone every user K times in all (id offsets, time shifts)."),
]
ColumnMapOpt = Annotated[
    str | None, typer.Option("--map", help="csv kind: column map user=COL,item=COL[,ts=COL].")
]
BehaviorsOpt = Annotated[
    str,
    typer.Option(
        "--behaviors", help="taobao kind: comma list of behaviours kept (pv,buy,cart,fav)."
    ),
]
SampleRateOpt = Annotated[
    float,
    typer.Option("--sample-rate", help="SHARDS sampling rate for EMB curves (1 = exact)."),
]
SampleSizeOpt = Annotated[
    int | None,
    typer.Option("--sample-size", help="Fixed-size SHARDS: max distinct sampled items."),
]
# --- analyze / report ---
RunDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Run directory (default: reports/out/TRACE-STEM, or reports/out/demo).",
        show_default=False,
    ),
]
RunDirArg = Annotated[
    Path, typer.Argument(help="Run directory written by `helm-plan analyze`.", show_default=False)
]
PlanFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="TOML plan file with sections analyze, node, oracle, curves, demo; flags override it.",
        show_default=False,
    ),
]
DemoOpt = Annotated[
    bool, typer.Option("--demo", help="Generate and analyze the embedded mixed-regime demo trace.")
]
GpuOptionalOpt = Annotated[
    str | None, typer.Option("--gpu", help="GPU profile name or TOML path (default: a100-80g).")
]
ModelProfileOptionalOpt = Annotated[
    str | None, typer.Option("--model", help="Model profile name or TOML path (default: gr-small).")
]
SloMsOptionalOpt = Annotated[
    float | None, typer.Option("--slo-ms", help="P99 latency SLO in milliseconds (default: 100).")
]
WindowSOptionalOpt = Annotated[
    float | None, typer.Option("--window-s", help="Window length in seconds (default: 10).")
]
SeedOptionalOpt = Annotated[
    int | None, typer.Option("--seed", help="Seed for every random choice (default: 0).")
]
WorkersOptionalOpt = Annotated[
    int | None,
    typer.Option("--workers", help="Parallel worker processes (0 = all cores) (default: 1)."),
]
