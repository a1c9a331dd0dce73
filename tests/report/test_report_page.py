"""Page assembly and summary.json from hand-made run tables."""

from __future__ import annotations

import json
import re

import plotly.offline
from fake_run import make_run

from helm_plan.report import html as report_html
from helm_plan.report.summary import SUMMARY_SCHEMA_VERSION, build_summary, verdict


def test_page_is_self_contained_with_plotly_once():
    page = report_html.render(make_run())
    js = plotly.offline.get_plotlyjs()
    assert page.count(js) == 1
    # no external resources: no src/href to http(s), no CDN
    ours = page.replace(js, "")
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", ours)
    assert "cdn.plot.ly" not in ours and "<link" not in ours
    assert page.count("<script") == 3  # plotly.js, figure JSON, the newPlot loop


def test_sections_toc_and_no_placeholders():
    page = report_html.render(make_run())
    for sec in ("summary", "workload", "curves", "latency", "oracle", "policies", "sensitivity",
                "reproducibility"):  # fmt: skip
        assert f'<section id="{sec}">' in page
        assert f'href="#{sec}"' in page
    for absent in ("controller", "routing", "capacity"):
        assert f'id="{absent}"' not in page
    figs = json.loads(
        re.search(r'id="helm-figures">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</")
    )
    # every figure has its div, every div has its figure
    divs = set(re.findall(r'<div class="plot" id="([^"]+)"', page))
    assert divs == set(figs) and len(divs) >= 12
    assert '<td class="num">0.25</td>' in page  # the EMB knee, in GiB


def test_render_is_deterministic():
    assert report_html.render(make_run()) == report_html.render(make_run())


def test_summary_numbers_come_from_the_tables():
    run = make_run()
    s = build_summary(run)
    assert s["schema_version"] == SUMMARY_SCHEMA_VERSION
    keys = list(s)
    order = ["trace", "best_static", "oracle", "policies", "value_of_adaptivity", "timings_s",
             "versions", "seed", "trace_sha256"]  # fmt: skip
    assert [k for k in keys if k in order] == order
    pol = {r["policy"]: r for r in run.tables["policies"].to_dicts()}
    assert [p["name"] for p in s["policies"]] == list(pol)
    for p in s["policies"]:
        assert p["p99_ms"] == pol[p["name"]]["p99_ms"]
        assert p["mean_ratio"] == pol[p["name"]]["mean_ratio"]
    assert s["best_static"] == {"ratio": 0.5, "robust_ratio": 0.6, "flat_lo": 0.4,
                                "flat_hi": 0.8, "p99_ms": 12.0, "slo_attainment": 0.97}  # fmt: skip
    lab = run.tables["labels"]
    assert s["oracle"]["ratio_min"] == lab["r_star"].min()
    assert s["oracle"]["ratio_max"] == lab["r_star"].max()
    ad = run.tables["adaptivity"].to_dicts()[1]
    assert s["value_of_adaptivity"]["p99_reduction"] == ad["p99_reduction"]
    assert s["value_of_adaptivity"]["ci_low"] == ad["ci_low"]
    assert s["seed"] == 7 and s["trace_sha256"] == "ab" * 32
    json.dumps(s, allow_nan=False)


def test_verdict_says_plainly_when_the_split_hardly_matters():
    flat = " ".join(verdict(make_run(flat=True)))
    assert "hardly matters" in flat
    steep = " ".join(verdict(make_run()))
    assert "split matters" in steep and "split hardly" not in steep
    assert "cuts P99 by 12.5%" in steep


def test_verdict_flags_an_overloaded_node():
    import dataclasses

    import polars as pl

    from helm_plan.report.summary import verdict

    run = make_run()
    pol = run.tables["policies"].with_columns(pl.lit(0.7).alias("slo_attainment"))
    over = dataclasses.replace(run, tables={**run.tables, "policies": pol})
    # no plan: the trace on one node, judged with the best static split
    assert any("does not serve the trace within the SLO" in v and "70.0% within" in v
               and "overloaded" in v for v in verdict(over))  # fmt: skip
    ok = run.tables["policies"].with_columns(pl.lit(0.999).alias("slo_attainment"))
    fine = dataclasses.replace(run, tables={**run.tables, "policies": ok})
    assert not any("overloaded" in v for v in verdict(fine))


def test_table_names_live_in_one_module():
    """The analyze stages and the report name every run-store table by its constant."""
    from pathlib import Path

    import helm_plan
    from helm_plan.report import tables

    root = Path(helm_plan.__file__).parent
    literal = re.compile(r"""\.table\(\s*["']|tables\[\s*["']""")
    for pkg in ("report", "analyze"):
        for f in sorted((root / pkg).rglob("*.py")):
            assert not literal.search(f.read_text("utf-8")), f"{f.name} names a table by a literal"
    assert len(set(tables.ALL)) == len(tables.ALL)
    declared = {v for k, v in vars(tables).items() if k.isupper() and k != "ALL"}
    assert declared == set(tables.ALL)
    from fake_run import make_fleet_run

    assert set(make_fleet_run().tables) <= set(tables.ALL)
