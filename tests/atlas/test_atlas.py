"""The atlas: a 2x2 grid, each cell checked against `analyze` of the same settings.

Every cell is exported (its trace, model, GPU and plan file) and measured again
by ``run_analyze``, the whole analyze pipeline reading those files: the best
static split, the oracle's pooled P99 and r* range, the value of adaptivity and
its interval must be the atlas's. The cell's load is checked independently:
static replays of the exported trace give the mean service times, and the
trace's rate times the lowest of them is the cell's utilisation.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import polars as pl
import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import atlas
from helm_plan.analyze import build_config, run_analyze
from helm_plan.config import load_plan
from helm_plan.exec import local
from helm_plan.sim import NodeConfig, load_context, simulate_node

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SMALL = {
    "atlas": {"requests": 1500, "windows": 6, "trials": 1, "n_boot": 50,
              "panels": [["pool_fraction", "utilisation"]]},
    "base": {"stack": "4x256", "emb_row_bytes": 2048, "candidates": 16, "history": 512.0},
    "levels": {"pool_fraction": [0.02, 0.1], "utilisation": [0.3, 0.7]},
}  # fmt: skip


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    d = tmp_path_factory.mktemp("atlas")
    cfg = atlas.build_config(SMALL)
    return d, cfg, atlas.run_atlas(cfg, d / "out")


def test_grid_cells_and_where_they_sit(grid):
    _, cfg, res = grid
    df = res.cells
    assert df.height == 4 and res.measured == 4 and res.cached == 0
    got = {(r["pool_fraction"], r["utilisation"]) for r in df.to_dicts()}
    assert got == {(0.02, 0.3), (0.02, 0.7), (0.1, 0.3), (0.1, 0.7)}
    for r in df.to_dicts():
        assert json.loads(r["panels"]) == [[0, r["pool_fraction"], r["utilisation"]]]
        assert r["stack"] == "4x256" and r["candidates"] == 16  # the base elsewhere
        assert r["oracle_gain_lo"] <= r["oracle_gain"] <= r["oracle_gain_hi"]
        assert r["gain_lo"] <= r["gain"] <= r["gain_hi"]
        assert 0 <= r["r_star_min"] <= r["r_star_max"] <= 1
        assert r["oracle_p99_ms"] <= r["static_p99_ms"]  # best static is a schedule too


def test_each_cell_is_what_analyze_says(grid):
    d, cfg, res = grid
    for r in res.cells.to_dicts():
        cell = atlas.Cell(**{f.name: r[f.name] for f in dataclasses.fields(atlas.Cell)})
        files = atlas.export(cell, cfg, d / "cells" / r["key"])
        plan = load_plan(files["plan"])
        acfg = build_config(plan, {"gpu": files["gpu"], "model": files["model"]})
        s = run_analyze(files["trace"], acfg, d / "cells" / r["key"] / "analyze").summary
        assert s["setup"]["pool_bytes"] == r["pool_bytes"]
        assert s["setup"]["slo_ms"] == r["slo_ms"] == atlas.cell_model(cell).default_slo_ms
        assert s["trace"]["requests"] == r["requests"]
        bs, orc, voa = s["best_static"], s["oracle"], s["value_of_adaptivity"]
        assert bs["ratio"] == r["static_ratio"]
        assert bs["p99_ms"] == pytest.approx(r["static_p99_ms"], rel=1e-12)
        assert bs["slo_attainment"] == pytest.approx(r["static_attainment"], rel=1e-12)
        assert orc["p99_ms"] == pytest.approx(r["oracle_p99_ms"], rel=1e-12)
        assert orc["slo_attainment"] == pytest.approx(r["oracle_attainment"], rel=1e-12)
        assert (orc["ratio_min"], orc["ratio_max"]) == (r["r_star_min"], r["r_star_max"])
        assert 1 - orc["p99_ms"] / bs["p99_ms"] == pytest.approx(r["oracle_gain"], abs=1e-12)
        assert voa["p99_reduction"] == pytest.approx(r["gain"], abs=1e-12)
        assert (voa["ci_low"], voa["ci_high"]) == pytest.approx((r["gain_lo"], r["gain_hi"]))
        pols = {p["name"]: p for p in s["policies"]}
        assert pols["adaptive"]["p99_ms"] == pytest.approx(r["adaptive_p99_ms"], rel=1e-12)
        assert pols["emb-max"]["p99_ms"] == pytest.approx(r["emb_max_p99_ms"], rel=1e-12)
        # the load, from the exported trace alone: rate x the lowest mean service time
        ctx = load_context(files["trace"], gpu=files["gpu"], model=files["model"],
                           pool_fraction=r["pool_fraction"])  # fmt: skip
        one = NodeConfig(window_s=1e9, warmup_windows=0, slo_ms=r["slo_ms"])
        svc = min(float(simulate_node(ctx, np.array([x]), one).service_s.mean())
                  for x in (0.0, 0.25, 0.5, 0.75, 1.0))  # fmt: skip
        span = s["setup"]["window_s"] * cfg.windows
        assert r["requests"] / span * svc == pytest.approx(r["utilisation"], rel=1e-9)


def test_rerun_reuses_every_cell_and_a_change_measures_again(grid):
    d, cfg, res = grid
    again = atlas.run_atlas(cfg, d / "out")
    assert again.cached == 4 and again.measured == 0
    cols = [c for c in res.cells.columns if c != "cached"]
    assert again.cells.select(cols).equals(res.cells.select(cols))
    other = dataclasses.replace(cfg, levels=(("pool_fraction", (0.02,)), ("utilisation", (0.3,))),
                                trials=2)  # fmt: skip
    assert atlas.run_atlas(other, d / "out").measured == 1


def test_workers_give_the_same_cells(grid, tmp_path):
    _, cfg, res = grid
    two = dataclasses.replace(cfg, levels=(("pool_fraction", (0.02, 0.1)), ("utilisation", (0.3,))))
    with local(2) as ex:
        par = atlas.run_atlas(two, tmp_path, executor=ex)
    keep = [c for c in res.cells.columns if c not in ("seconds", "cached", "panels")]
    want = res.cells.filter(pl.col("utilisation") == 0.3).sort("key").select(keep)
    assert par.cells.sort("key").select(keep).equals(want)


def test_cli_writes_the_page_and_the_cells_and_exports(grid, tmp_path):
    d, cfg, res = grid
    conf = tmp_path / "atlas.toml"
    from helm_plan import io

    io.write_toml(conf, SMALL)
    out = d / "out"  # the grid's own folder: every cell is cached
    r = CliRunner().invoke(app, ["atlas", "--config", str(conf), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["cells"] == 4 and doc["cached"] == 4 and doc["measured"] == 0
    for name in ("atlas.html", "cells.csv", "cells.parquet", "atlas.json"):
        assert (out / name).is_file()
    csv = pl.read_csv(out / "cells.csv")
    assert csv.height == 4 and set(csv["key"]) == set(res.cells["key"])
    html = (out / "atlas.html").read_text()
    assert html.count('class="plot"') == 2 and "cdn" not in html.lower().split("<script>")[0]
    key = res.cells["key"][0]
    r = CliRunner().invoke(app, ["atlas", "--config", str(conf), "-o", str(out), "--export", key])
    assert r.exit_code == 0, r.output
    assert "helm-plan analyze" in r.stdout and (out / "cells" / key / "trace.parquet").is_file()
    # an output never overwrites an input: the config given as the page
    bad = CliRunner().invoke(app, ["atlas", "--config", str(out / "atlas.html"), "-o", str(out)])
    assert bad.exit_code == 2 and "error:" in bad.output
    r = CliRunner().invoke(app, ["atlas", "--config", str(conf), "--export", "nope"])
    assert r.exit_code == 2 and "no cell 'nope'" in r.output


@pytest.mark.browser
def test_page_renders_offline_in_chromium(grid, tmp_path):
    from playwright.sync_api import sync_playwright

    _, _, res = grid
    page_file = tmp_path / "atlas.html"
    page_file.write_text(atlas.render(res))
    url = page_file.resolve().as_uri()
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
            cells = page.evaluate("document.querySelectorAll('div.plot .heatmaplayer').length")
            page.hover("#fig-atlas-0 .nsewdrag")
        finally:
            browser.close()
    assert problems == []
    assert requests == [url]  # the document itself, nothing else
    assert cells == 2
