"""report.html in headless Chromium from file://: renders every figure, no errors, no network."""

from __future__ import annotations

import shutil

import pytest
from conftest import small_table

from helm_plan import trace
from helm_plan.analyze import build_config, run_analyze

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PLAN = {
    "analyze": {"window_s": 5.0, "pool_fraction": 0.3, "n_boot": 50, "slo_ms": 0.5},
    "oracle": {"trials": 2, "coarse_step": 0.25},
    "curves": {"n_points": 11},
}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("browser")
    t = small_table(2000, n_users=200, n_items=3000, max_new=8, n_candidates=16, rate_qps=50.0)
    tp = trace.write(t, d / "t.parquet", {"source": "tests.small_table"})
    return run_analyze(tp, build_config(PLAN), d / "out").report_path


@pytest.mark.browser
def test_report_renders_offline_in_chromium(report, tmp_path):
    from playwright.sync_api import sync_playwright

    assert report.stat().st_size < 10 * 2**20
    url = report.resolve().as_uri()
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url, wait_until="load")
            page.wait_for_function(
                "Array.from(document.querySelectorAll('div.plot'))"
                ".every(d => d.querySelector('.main-svg'))",
                timeout=30_000,
            )
            counts = page.evaluate(
                "Array.from(document.querySelectorAll('div.plot'))"
                ".map(d => d.querySelectorAll('.main-svg').length)"
            )
            sections = page.evaluate(
                "Array.from(document.querySelectorAll('section')).map(s => s.id)"
            )
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert requests == [url]  # the document itself, nothing else
    assert len(counts) >= 12 and all(c > 0 for c in counts)
    assert sections == ["summary", "capacity", "routing", "workload", "curves", "latency",
                        "oracle", "policies", "controller", "sensitivity",
                        "reproducibility"]  # fmt: skip
    assert (tmp_path / "report.png").stat().st_size > 10_000
