"""`helm-plan ingest KIND PATH -o OUT.parquet`: convert a public log into a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    ArrivalsOpt,
    BehaviorsOpt,
    CandidatesOpt,
    ColumnMapOpt,
    DurationSOpt,
    JsonOpt,
    OutOpt,
    QpsOpt,
    QuietOpt,
    RegimeOpt,
    ReplicateOpt,
    SeedOpt,
    SessionGapSOpt,
)
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan.ingest import (
    KINDS,
    IngestConfig,
    IngestReport,
    check_kind,
    ingest_to_file,
    parse_column_map,
)
from helm_plan.mixshift import parse_shift

KindArg = Annotated[
    str, typer.Argument(help=f"Source kind: {', '.join(KINDS)}.", show_default=False)
]
PathArg = Annotated[Path, typer.Argument(help="Source log file.", show_default=False)]
ShiftOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--shift",
        help="Mix shift in each burst of --regime burst|mixed, KIND=SHARE, repeatable: "
        "flash-crowd (share of burst requests from new users), new-items (share of burst items "
        "never seen before), returning-wave (share of burst requests from users seen earlier).",
        show_default=False,
    ),
]
INGEST = IngestConfig(kind=KINDS[0])
"""The ingest defaults (every field but the kind), read once here."""


def ingest(
    kind: KindArg,
    path: PathArg,
    out: OutOpt,
    session_gap_s: SessionGapSOpt = INGEST.session_gap_s,
    candidates: CandidatesOpt = INGEST.n_candidates,
    qps: QpsOpt = None,
    duration_s: DurationSOpt = None,
    regime: RegimeOpt = None,
    arrivals: ArrivalsOpt = None,
    replicate: ReplicateOpt = INGEST.replicate,
    column_map: ColumnMapOpt = None,
    behaviors: BehaviorsOpt = ",".join(INGEST.behaviors),
    shift: ShiftOpt = None,
    seed: SeedOpt = INGEST.seed,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Convert a public log (MovieLens, Amazon, Taobao, Mooncake, any CSV) into a request trace.

    Logs with timestamps become one request per user session; logs without one
    request per interaction. Recommender logs are re-timed to serving speed
    (default: steady regime at 100 req/s); Mooncake and csv keep their
    timestamps unless --qps, --duration-s, --regime or --arrivals is given.
    """
    check_kind(kind)
    guard(inputs=[path, arrivals], outputs={"-o": out})
    cfg = IngestConfig(
        kind=kind,
        session_gap_s=session_gap_s,
        n_candidates=candidates,
        qps=qps,
        duration_s=duration_s,
        regime=regime,
        arrivals=arrivals,
        replicate=replicate,
        seed=seed,
        behaviors=tuple(b.strip().lower() for b in behaviors.split(",") if b.strip()),
        shifts=tuple(parse_shift(s) for s in shift or ()),
        **(parse_column_map(column_map) if column_map else {}),
    )
    with task(f"ingest {kind}", quiet=quiet or as_json) as update:
        update(0, 1)
        report = ingest_to_file(path, out, cfg)
        update(1, 1)
    if as_json:
        emit_json("ingest", report)
    else:
        emit_table(render(report))


def render(r: IngestReport) -> Table:
    """The report as a two-column rich table."""
    t = Table(title=f"ingest {r.kind} ({r.variant})", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("source", r.source)
    t.add_row("rows read", f"{r.rows_read:,}")
    if r.dropped:
        for reason, count in r.dropped:
            t.add_row("rows dropped", f"{count:,}  ({reason})")
    else:
        t.add_row("rows dropped", "0")
    if r.requests_truncated:
        t.add_row("requests cut", f"{r.requests_truncated:,}  (beyond --duration-s)")
    t.add_row("requests", f"{r.requests:,}")
    t.add_row("users", f"{r.users:,}")
    t.add_row("items", f"{r.items:,}")
    t.add_row("history tokens", f"{r.new_items:,}")
    t.add_row("span", f"{r.span_s:,.1f} s  ({r.qps:.3g} req/s)")
    t.add_row("timing", r.timing)
    for note in r.notes:
        t.add_row("note", note)
    for b in r.shift_bursts:
        t.add_row(
            "burst",
            f"{b['start_s']:.4g}-{b['end_s']:.4g} s: {b['requests']:,} requests "
            f"(+{b['added_cold']:,} cold, +{b['added_returning']:,} returning); cold share "
            f"{b['cold_share']:.1%}, new items {b['new_item_share']:.1%}",
        )
    t.add_row("written", str(r.out))
    return t


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("ingest")(ingest)
