"""Page assembly: one self-contained HTML file from a :class:`RunData`.

The sections (:data:`helm_plan.report.sections.SECTIONS`) render in order
into one page; plotly.js is inlined once in a single ``<script>``; every
figure travels as JSON in one ``application/json`` block and is drawn by
``Plotly.newPlot``. No CDN, no fonts or images from the network. The page is
deterministic: the same run store gives byte-identical HTML.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from string import Template
from typing import Any

from helm_plan import io
from helm_plan._data import data_dir
from helm_plan._version import __version__
from helm_plan.report.page import Page, pct_text
from helm_plan.report.sections import SECTIONS
from helm_plan.report.store import RunData

__all__ = ["pct_text", "render", "write_report"]


def _template(name: str) -> str:
    return (data_dir("helm_plan._reports", "reports") / "templates" / name).read_text("utf-8")


def render(run: RunData) -> str:
    """The whole report page as a string."""
    figures: dict[str, Any] = {}
    bodies = [(s, s.render(run, Page(s.key, figures))) for s in SECTIONS]
    shown = [(s, body) for s, body in bodies if body is not None]
    toc = "\n".join(f'    <li><a href="#{s.key}">{html.escape(s.title)}</a></li>' for s, _ in shown)
    body = "\n".join(
        f'<section id="{s.key}"><h2>{html.escape(s.title)}</h2>{b}</section>' for s, b in shown
    )
    import plotly.offline

    stem = str(run.meta.get("trace_stem", "trace"))
    subtitle = (
        f"{stem} · {run.meta.get('gpu')} · {run.meta.get('model')} · "
        f"SLO {run.meta.get('slo_ms')} ms · sha256 {str(run.meta.get('trace_sha256', ''))[:12]}"
    )
    fig_json = json.dumps(figures, separators=(",", ":"), sort_keys=True).replace("</", "<\\/")
    return Template(_template("report.html")).substitute(
        title=html.escape(f"helm-plan report: {stem}"),
        subtitle=html.escape(subtitle),
        version=html.escape(__version__),
        css=_template("report.css"),
        toc=toc,
        body=body,
        plotlyjs=plotly.offline.get_plotlyjs(),
        figures=fig_json,
    )


def write_report(path: str | os.PathLike[str], run: RunData) -> Path:
    """Render and atomically write the report to ``path``."""
    return io.write_text(path, render(run))
