"""summary.json's derived figures, each computed again by hand from the fake run's tables."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from fake_run import make_fleet_run, make_run

from helm_plan.plan.verdict import verdicts
from helm_plan.report.summary import (
    build_summary,
    capacity_bullets,
    facts,
    sensitivity_summary,
    verdict,
)


def _with_p99(run, **p99):
    """The run with some policies' overall P99 (ms) replaced (keys use _ for -)."""
    want = {k.replace("_", "-"): v for k, v in p99.items()}
    pol = run.tables["policies"].with_columns(
        pl.struct("policy", "p99_ms")
        .map_elements(lambda r: want.get(r["policy"], r["p99_ms"]), return_dtype=pl.Float64)
        .alias("p99_ms")
    )
    return dataclasses.replace(run, tables={**run.tables, "policies": pol})


def test_extreme_split_penalty_is_the_worse_extreme_against_best_static():
    run = make_run()  # best static 12, emb-max 30, kv-max 25
    s = sensitivity_summary(run)
    assert s["extreme_split_penalty"] == pytest.approx(30.0 / 12.0 - 1.0)
    assert s["split_matters"] is True and s["flat_tolerance"] == 0.02
    widths = run.tables["labels"]["flat_width"].to_numpy()
    assert s["median_flat_width"] == pytest.approx(float(np.median(widths)))
    # the worse extreme is kv-max now
    s = sensitivity_summary(_with_p99(run, emb_max=13.0, kv_max=15.0))
    assert s["extreme_split_penalty"] == pytest.approx(15.0 / 12.0 - 1.0)


def test_split_matters_only_strictly_above_the_run_tolerance():
    run = _with_p99(make_run(), emb_max=18.0, kv_max=11.0)  # penalty 18/12 - 1 = 0.5 exactly
    at = dataclasses.replace(run, meta={**run.meta, "flat_tol": 0.5})
    s = sensitivity_summary(at)
    assert s["extreme_split_penalty"] == 0.5 and s["flat_tolerance"] == 0.5
    assert s["split_matters"] is False
    below = dataclasses.replace(run, meta={**run.meta, "flat_tol": 0.49})
    assert sensitivity_summary(below)["split_matters"] is True
    flat = sensitivity_summary(make_run(flat=True))
    assert flat["extreme_split_penalty"] == 0.0 and flat["split_matters"] is False


def test_no_penalty_without_a_baseline_or_an_extreme():
    run = make_run()
    pol = run.tables["policies"].filter(pl.col("policy") != "best-static")
    s = sensitivity_summary(dataclasses.replace(run, tables={**run.tables, "policies": pol}))
    assert s["extreme_split_penalty"] is None and s["split_matters"] is None
    s = sensitivity_summary(_with_p99(run, kv_max=float("nan")))
    assert s["extreme_split_penalty"] is None and s["split_matters"] is None
    pol = run.tables["policies"].filter(pl.col("policy") != "emb-max")
    s = sensitivity_summary(dataclasses.replace(run, tables={**run.tables, "policies": pol}))
    assert s["extreme_split_penalty"] == pytest.approx(25.0 / 12.0 - 1.0)


def test_summary_sections_and_numbers_by_hand():
    run = make_run()
    s = build_summary(run)
    assert s["schema"] == "helm-plan/summary"
    assert s["trace"] == {"path": "t.parquet", "requests": 3000, "users": 200,
                          "zipf_alpha": 1.05, "model": "gr-small"}  # fmt: skip
    assert s["setup"]["gpu"] == "h100-80g" and s["setup"]["pool_bytes"] == 2**31
    assert s["setup"]["footprint_bytes"] is None
    assert s["oracle"] == {
        "p99_ms": 10.0, "slo_attainment": 0.99, "schedule": "labels",
        "ratio_min": run.tables["labels"]["r_star"].min(),
        "ratio_max": run.tables["labels"]["r_star"].max(),
    }  # fmt: skip
    assert s["value_of_adaptivity"] == {
        "policy": "adaptive", "baseline": "best-static", "p99_reduction": 1 - 10.5 / 12.0,
        "ci_low": 1 - 10.5 / 12.0 - 0.05, "ci_high": 1 - 10.5 / 12.0 + 0.05,
        "confidence": 0.95, "n_boot": 1000,
    }  # fmt: skip
    pol = {p["name"]: p for p in s["policies"]}
    assert pol["kv-max"] == {"name": "kv-max", "p99_ms": 25.0, "slo_attainment": 0.97,
                             "mean_ratio": 0.0}  # fmt: skip
    assert s["sensitivity"] == sensitivity_summary(run)
    assert s["verdict"] == verdict(run)
    assert s["timings_s"] == {"inspect": 0.5, "curves": 1.5}
    assert s["stages_cached"] == ["curves"]
    assert s["versions"] == {"python": "3.11", "numpy": "2.4"}
    json.dumps(s, allow_nan=False)


def test_the_verdict_is_the_plans_answer_then_the_rules_on_the_facts():
    # every sentence is decided by plan.verdict (its truth table: tests/plan/test_verdict.py)
    for run in (make_run(), make_fleet_run(), make_run(flat=True)):
        assert verdict(run) == capacity_bullets(run) + verdicts(facts(run))
    v = verdict(make_run())  # no plan: one node, best static serves 97% within the SLO
    assert v[0] == ("One node does not serve the trace within the SLO (P99 12 ms, 97.0% within "
                    "100 ms): it is overloaded; plan a fleet (--peak-qps / --scale) rather than "
                    "a different split.")  # fmt: skip


def test_facts_read_from_the_run_by_hand():
    run = make_run()
    f = facts(run)
    pol = {r["policy"]: r for r in run.tables["policies"].iter_rows(named=True)}
    bs = pol["best-static"]["p99_ms"]
    assert (f.slo_ms, f.max_nodes, f.nodes) == (100.0, None, None)  # no plan
    assert (f.node_p99_ms, f.node_attainment) == (bs, pol["best-static"]["slo_attainment"])
    emb, kv = pol["emb-max"]["p99_ms"] / bs - 1, pol["kv-max"]["p99_ms"] / bs - 1
    assert f.extremes == pytest.approx((emb, kv)) and f.spread == pytest.approx(max(emb, kv))
    assert (f.ratio, f.robust_ratio, f.band) == (0.5, 0.6, (0.4, 0.8))
    ad = run.tables["adaptivity"].filter(pl.col("policy") == "adaptive").row(0, named=True)
    assert f.adapt == (ad["p99_reduction"], ad["ci_low"], ad["ci_high"], ad["confidence"])
    assert f.refill == (pol["naive-adaptive"]["p99_ms"], pol["adaptive"]["p99_ms"])
    assert f.fits is False and f.scope == "the trace"
    # a planned run: the fleet and the analysed node come from the operating point, the node's
    # figures from the fleet's split replayed on it (the fleet-static row) when there is one
    fleet = make_fleet_run()
    op = fleet.meta["operating"]
    g = facts(fleet)
    assert (g.nodes, g.max_nodes, g.fleet_p99_ms, g.fleet_ratio) == (
        op["nodes"], 64, op["fleet_p99_ms"], op["ratio"])  # fmt: skip
    assert g.scope == "the analysed node's traffic" and g.flat_tol == 0.05
    row = {"policy": "fleet-static", "p99_ms": 84.0, "slo_attainment": 0.993}
    pols = pl.concat([fleet.tables["policies"], pl.DataFrame([row])], how="diagonal_relaxed")
    h = facts(dataclasses.replace(fleet, tables={**fleet.tables, "policies": pols}))
    assert (h.node_p99_ms, h.node_attainment) == (84.0, 0.993)
    missed = dataclasses.replace(fleet, meta={**fleet.meta, "operating": {**op, "meets": False}})
    assert facts(missed).nodes is None


def _without(run, *names):
    return dataclasses.replace(run, tables={k: v for k, v in run.tables.items() if k not in names})


def _policies(run, **cols):
    """The run with policies-table columns replaced: ``p99_ms={"kv-max": 3.0}`` etc."""
    pol = run.tables["policies"]
    for col, by_name in cols.items():
        pol = pol.with_columns(
            pl.Series(col, [by_name.get(p, v) for p, v in zip(pol["policy"], pol[col], strict=True)],
                      dtype=pl.Float64)
        )  # fmt: skip
    return dataclasses.replace(run, tables={**run.tables, "policies": pol})


def _adaptivity(run, **vals):
    ad = run.tables["adaptivity"].with_columns(
        *[pl.when(pl.col("policy") == "adaptive").then(pl.lit(v, pl.Float64)).otherwise(pl.col(k)).alias(k)
          for k, v in vals.items()]
    )  # fmt: skip
    return dataclasses.replace(run, tables={**run.tables, "adaptivity": ad})


def _ok(run):
    """Every policy meets the SLO (no overload sentence)."""
    pol = run.tables["policies"].with_columns(pl.lit(0.999).alias("slo_attainment"))
    return dataclasses.replace(run, tables={**run.tables, "policies": pol})


def test_setup_stats_and_oracle_schedule_from_the_meta():
    run = make_run()
    run = dataclasses.replace(
        run, meta={**run.meta, "footprint_bytes": 123, "oracle_schedule": "best-static"}
    )
    s = build_summary(run)
    assert s["setup"] == {"gpu": "h100-80g", "model": "gr-small", "latency": "h100-80g_gr-small",
                          "slo_ms": 100.0, "window_s": 10.0, "windows": 6, "pool_bytes": 2**31,
                          "pool_source": "test", "footprint_bytes": 123}  # fmt: skip
    assert s["oracle"]["schedule"] == "best-static"
    stats = pl.DataFrame({"name": ["a", "b", "c"], "value": [3.0, 2.0**53 - 1, 2.0**53],
                          "text": [None, None, None]})  # fmt: skip
    t = build_summary(dataclasses.replace(run, tables={**run.tables, "stats": stats}))["trace"]
    assert t == {"path": "t.parquet", "a": 3, "b": 2**53 - 1, "c": 2.0**53}
    assert (
        type(t["a"]) is int and type(t["b"]) is int and type(t["c"]) is float
    )  # beyond 2**53 a float is not an int


def test_a_run_with_no_tables_summarises_to_nones():
    run = _without(make_run(), *make_run().tables)
    s = build_summary(run)
    assert s["policies"] == [] and s["timings_s"] == {} and s["stages_cached"] == []
    assert s["versions"] == {}
    assert s["oracle"]["ratio_min"] is None and s["oracle"]["ratio_max"] is None
    assert s["best_static"]["p99_ms"] is None and s["best_static"]["ratio"] == 0.5
    assert set(s["value_of_adaptivity"].values()) == {"adaptive", "best-static", None}
    assert s["sensitivity"]["median_flat_width"] is None
    # no policies, labels or adaptivity: only the best static search's meta is left
    assert s["verdict"] == [
        "Deploy r = 0.60, the middle of the flat band (band [0.40, 0.80]): every r in it is "
        "within 2% of the best P99; the argmin r = 0.50 sits near its edge."
    ]


def test_headroom_text_is_the_bracket_and_the_cli_shows_the_reports():
    """The headroom as the search found it: "+0%" alone read as none where the fleet takes up
    to the next step (the demo's one h100 printed "headroom +0%" for a bracket [0, 25%)). The
    CLI's headline table and the report's planner table print one text."""
    from types import SimpleNamespace

    from helm_plan_cli.commands.analyze_cmd import headline_table
    from rich.console import Console

    from helm_plan.report.sections.summary import planner_table
    from helm_plan.report.summary import headroom_text, planner_rows

    def row(lo, hi):
        return {"headroom": lo, "headroom_fails_at": hi}

    assert headroom_text(row(0.0, 0.25)) == "+0% (fails at +25%)"
    assert headroom_text(row(0.5, None)) == "≥ +50%"  # nothing failed up to the largest growth
    assert headroom_text(row(None, None)) == "–"
    run = make_fleet_run()  # growth 25% passes, 31.25% fails
    (r,) = [g for g in planner_rows(run) if g["headroom"] is not None]
    assert headroom_text(r) == "+25% (fails at +31%)" and "+25% (fails at +31%)" in planner_table(
        run
    )
    console = Console(width=300, record=True)
    res = SimpleNamespace(summary=build_summary(run), out_dir="run", stages=[], report_path="r")
    console.print(headline_table(res))
    assert f"headroom {headroom_text(r)}" in console.export_text()
