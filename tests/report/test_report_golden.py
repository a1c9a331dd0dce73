"""The report page against a stored snapshot of what it says and draws.

Every section's HTML, the page shell (CSS, table of contents) and every
figure's data and layout are compared with ``tests/report/golden/<case>.json``.
A change to the page is a reviewed change of those files: rerun with
``HELM_PLAN_UPDATE_GOLDEN=1`` to rewrite them and read their diff. Only the
inlined plotly.js and the figures' shared theme (``layout.template``) are left
out; both come from the plotly package, not from helm-plan.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import plotly.offline
import pytest
from fake_run import make_fleet_run, make_run

from helm_plan.report.html import render

GOLDEN = Path(__file__).with_name("golden")
CASES = {
    "plain": make_run,
    "flat": lambda: make_run(flat=True),
    "fleet": make_fleet_run,
    "fleet-static": lambda: make_fleet_run(spread=False),
}
_SECTION = re.compile(r'<section id="([^"]+)"><h2>(.*?)</h2>(.*?)</section>', re.S)
_FIGURES = re.compile(r'(<script type="application/json" id="helm-figures">)(.*?)(</script>)', re.S)
_BREAK = re.compile(r"(?=<(?:p|table|thead|tbody|tr|div|h3|ul|li|section)\b)")


def _lines(text: str) -> list[str]:
    """HTML split before block tags, so a golden diff shows the line that changed."""
    return [s for s in _BREAK.split(text) if s]


def snapshot(page: str) -> dict:
    """What the page says and draws, as JSON-able data (plotly.js and its theme left out)."""
    js = plotly.offline.get_plotlyjs()
    assert page.count(js) == 1
    page = page.replace(js, "PLOTLY_JS")
    figs = json.loads(_FIGURES.search(page).group(2).replace("<\\/", "</"))
    for f in figs.values():
        f["layout"].pop("template", None)
    shell = _FIGURES.sub(r"\1FIGURES\3", page)
    sections = [{"id": k, "title": t, "body": _lines(b)} for k, t, b in _SECTION.findall(shell)]
    shell = _SECTION.sub(lambda m: f"SECTION {m.group(1)}", shell)
    return {"shell": shell.splitlines(), "sections": sections, "figures": figs}


@pytest.mark.parametrize("case", sorted(CASES))
def test_page_matches_its_golden_snapshot(case):
    got = snapshot(render(CASES[case]()))
    path = GOLDEN / f"{case}.json"
    if os.environ.get("HELM_PLAN_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", "utf-8")
    want = json.loads(path.read_text("utf-8"))
    assert [s["id"] for s in got["sections"]] == [s["id"] for s in want["sections"]]
    for g, w in zip(got["sections"], want["sections"], strict=True):
        assert g == w, f"section {g['id']} differs from {path.name}"
    assert got["shell"] == want["shell"]
    assert sorted(got["figures"]) == sorted(want["figures"])
    for fid, fig in got["figures"].items():
        assert fig == want["figures"][fid], f"figure {fid} differs from {path.name}"
