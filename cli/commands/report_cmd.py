"""`helm-plan report`: rebuild report.html from a run's helm.duckdb."""

from __future__ import annotations

import typer
from helm_plan_cli.options import RunDirArg

from helm_plan.report import rebuild


def report_command(run_dir: RunDirArg) -> None:
    """Rebuild DIR/report.html from DIR/helm.duckdb without recomputing anything."""
    paths = rebuild(run_dir)
    for p in paths:
        typer.echo(str(p))


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("report")(report_command)
