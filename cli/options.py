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
        "--latency", help="Latency profile name or TOML path [default: shipped GPU_MODEL profile]."
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
