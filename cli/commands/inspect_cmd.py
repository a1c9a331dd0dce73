"""`helm-plan inspect`: workload statistics of a trace (DuckDB, bounded memory)."""

from __future__ import annotations

from typing import Annotated

import typer
from helm_plan_cli.options import JsonOpt, ModelOptionalOpt, QuietOpt, TraceArg
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan.inspect import DEFAULT_MEMORY_LIMIT, inspect_trace
from helm_plan.profiles import load_model


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def inspect_command(
    trace: TraceArg,
    as_json: JsonOpt = False,
    model: ModelOptionalOpt = None,
    memory_limit: Annotated[
        str, typer.Option("--memory-limit", help="DuckDB memory cap; it spills to disk past it.")
    ] = DEFAULT_MEMORY_LIMIT,
    quiet: QuietOpt = False,
) -> None:
    """Requests, users, items, QPS, history lengths, revisit gaps, Zipf skew and footprints."""
    prof = load_model(model) if model else None
    with task("inspect", quiet=quiet or as_json) as update:
        stats = inspect_trace(trace, prof, memory_limit=memory_limit, progress=update)
    obj = stats.to_json()
    if as_json:
        emit_json("inspect", obj)
        return
    table = Table(title=f"{trace}", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in obj.items():
        if k in ("trace",) or (v is None and k in ("model", "max_seq_len")):
            continue
        table.add_row(k, _fmt(v))
    emit_table(table)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("inspect")(inspect_command)
