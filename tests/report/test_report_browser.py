"""report.html in headless Chromium from file://: renders every figure, no errors, no network,
and fits a phone's width."""

from __future__ import annotations

import shutil

import pytest
from conftest import small_table
from fake_run import make_fleet_run

from helm_plan import trace
from helm_plan.analyze import build_config, run_analyze
from helm_plan.report.html import write_report

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PLAN = {
    "analyze": {
        "window_s": 5.0,
        "pool_fraction": 0.3,
        "n_boot": 50,
        "slo_ms": 0.5,
        "gpus": ["a100-80g", "h100-80g"],
    },
    "oracle": {"trials": 2, "coarse_step": 0.25},
    "curves": {"n_points": 11},
}
ALL_DRAWN = (
    "Array.from(document.querySelectorAll('div.plot')).every(d => d.querySelector('.main-svg'))"
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("browser")
    t = small_table(2000, n_users=200, n_items=3000, max_new=8, n_candidates=16, rate_qps=50.0)
    tp = trace.write(t, d / "t.parquet", {"source": "tests.small_table"})
    return run_analyze(tp, build_config(PLAN), d / "out").report_path


def _browse(path, viewport, evaluate, screenshot=None):
    """Open ``path`` in Chromium at ``viewport``, wait for every figure, evaluate the scripts:
    (their results, console errors and warnings, every URL requested)."""
    from playwright.sync_api import sync_playwright

    url = path.resolve().as_uri()
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport=viewport)
            page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url, wait_until="load")
            page.wait_for_function(ALL_DRAWN, timeout=30_000)
            out = [page.evaluate(js) for js in evaluate]
            if screenshot:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    assert requests == [url]  # the document itself, nothing else
    return out, problems


@pytest.mark.browser
def test_report_renders_offline_in_chromium(report, tmp_path):
    assert report.stat().st_size < 10 * 2**20
    (counts, sections), problems = _browse(
        report, {"width": 1400, "height": 1000},
        ["Array.from(document.querySelectorAll('div.plot'))"
         ".map(d => d.querySelectorAll('.main-svg').length)",
         "Array.from(document.querySelectorAll('section')).map(s => s.id)"],
        screenshot=tmp_path / "report.png",
    )  # fmt: skip
    assert problems == []
    assert len(counts) >= 12 and all(c > 0 for c in counts)
    assert sections == ["summary", "capacity", "routing", "workload", "curves", "latency",
                        "oracle", "policies", "controller", "sensitivity",
                        "reproducibility"]  # fmt: skip
    assert (tmp_path / "report.png").stat().st_size > 10_000


@pytest.mark.browser
def test_the_report_opens_with_the_planners_questions(report):
    """The first thing under Summary is one row per GPU: the fleet meeting the SLO, its price
    per day and per million requests, one GPU's capacity and the headroom; then the verdict,
    whose first sentence states the traffic model."""
    (heads, rows, first), problems = _browse(
        report, {"width": 1400, "height": 1000},
        ["Array.from(document.querySelector('#summary .table-wrap')"
         ".querySelectorAll('th')).map(h => h.textContent)",
         "document.querySelector('#summary .table-wrap').querySelectorAll('tbody tr').length",
         "document.querySelector('#summary .verdict li').textContent"],
    )  # fmt: skip
    assert problems == []
    assert heads[0] == "fleet meeting the SLO" and heads[2] == "USD/day"
    assert heads[3].startswith("USD per M req (at ") and "max req/s per GPU" in heads[4]
    assert heads[5] == "headroom until N + 1"
    assert rows == 2  # the two GPUs planned
    assert first.startswith("Planned traffic:") and "bursts are planned at full height" in first


@pytest.mark.browser
@pytest.mark.parametrize("source", ["analyze", "fleet"])
def test_report_fits_a_390px_phone_without_sideways_scroll(report, source, tmp_path):
    """At 390 × 844 the page never scrolls sideways: figures shrink to the screen and a table
    wider than it scrolls inside its own wrapper."""
    path = report if source == "analyze" else write_report(tmp_path / "r.html", make_fleet_run())
    (width, wide_tables, loose), problems = _browse(
        path, {"width": 390, "height": 844},
        ["document.documentElement.scrollWidth",
         # tables wider than their wrapper (the wrapper scrolls, the page does not)
         "Array.from(document.querySelectorAll('.table-wrap'))"
         ".filter(w => w.scrollWidth > w.clientWidth).length",
         # HTML boxes reaching past the screen outside a table wrapper (plotly's clipped
         # SVG text aside)
         "Array.from(document.querySelectorAll('main *, header *'))"
         ".filter(e => !(e instanceof SVGElement) && !e.closest('.table-wrap'))"
         ".filter(e => e.getBoundingClientRect().right > 390.5)"
         ".map(e => e.tagName + '.' + e.className)"],
    )  # fmt: skip
    assert problems == []
    assert width <= 390
    assert loose == []
    assert wide_tables >= 1  # the case is real: some table is wider than a phone
