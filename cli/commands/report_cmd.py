"""`helm-plan report`: rebuild report.html from a run's helm.duckdb."""

from __future__ import annotations

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import JsonOpt, QuietOpt, RunDirArg
from helm_plan_cli.output import emit_json, emit_table

from helm_plan.report import REPORT_NAME, STORE_NAME, rebuild


def report_command(run_dir: RunDirArg, as_json: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Rebuild DIR/report.html from DIR/helm.duckdb without recomputing anything.

    ``--quiet`` is accepted like on every other command; this one shows no progress.
    """
    guard(inputs=[run_dir / STORE_NAME], outputs={"report": run_dir / REPORT_NAME})
    paths = rebuild(run_dir)
    if as_json:
        emit_json("report", {"run_dir": str(run_dir), "written": [str(p) for p in paths]})
        return
    emit_table(*(f"wrote {p}" for p in paths))


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("report")(report_command)
