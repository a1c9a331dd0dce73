"""Reproducibility: the trace hash, seed and command, the configuration, versions and timings."""

from __future__ import annotations

from helm_plan.report.page import Page, f_fixed, f_text, rows, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import CONFIG, TIMINGS, VERSIONS

TITLE = "Reproducibility"
ORDER = 110


def render(run: RunData, page: Page) -> str:
    """What a rerun needs: identity, configuration, package versions and stage timings."""
    m = run.meta
    ids = [
        {"k": "trace SHA-256", "v": m.get("trace_sha256")},
        {"k": "seed", "v": m.get("seed")},
        {"k": "command", "v": m.get("command")},
    ]
    cfg = rows(run.table(CONFIG))
    ver = rows(run.table(VERSIONS))
    tim = rows(run.table(TIMINGS))
    return (
        table(ids, [("k", "item", f_text), ("v", "value", f_text)])
        + "<h3>Configuration</h3>"
        + table(
            cfg,
            [("section", "section", f_text), ("key", "option", f_text), ("value", "value", f_text)],
        )  # fmt: skip
        + '<div class="grid2"><div><h3>Versions</h3>'
        + table(ver, [("package", "package", f_text), ("version", "version", f_text)])
        + "</div><div><h3>Stage timings</h3>"
        + table(
            tim,
            [
                ("stage", "stage", f_text),
                ("seconds", "time (s)", f_fixed(2)),
                ("cached", "reused from cache", f_text),
            ],
        )  # fmt: skip
        + "</div></div>"
    )
