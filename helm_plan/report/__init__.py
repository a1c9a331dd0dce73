"""Report stage: the DuckDB run store, plotly figures, the HTML page and summary.json."""

from __future__ import annotations

import os
from pathlib import Path

from helm_plan.report.store import RunData, read_store, write_store

STORE_NAME = "helm.duckdb"
REPORT_NAME = "report.html"

__all__ = ["REPORT_NAME", "STORE_NAME", "RunData", "read_store", "rebuild", "write_store"]


def rebuild(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Rebuild ``run_dir``/report.html from ``run_dir``/helm.duckdb (no recomputation)."""
    from helm_plan.report.html import write_report

    d = Path(run_dir)
    run = read_store(d / STORE_NAME)
    return [write_report(d / REPORT_NAME, run)]
