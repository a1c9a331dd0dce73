"""analyze reports P99 and SLO attainment per regime span, checked against separate runs."""

from __future__ import annotations

import dataclasses
import json

import duckdb
import numpy as np
import pytest

from helm_plan import regimes, synth
from helm_plan.analyze import build_config, run_analyze
from helm_plan.oracle import OracleConfig, best_static, read_labels
from helm_plan.sim import NodeConfig, fill_forward, load_context, simulate_node

PLAN = {
    "analyze": {"window_s": 4.0, "pool_fraction": 0.2, "n_boot": 50, "slo_ms": 0.4, "seed": 2,
                "capacity": False},
    "oracle": {"trials": 0, "coarse_step": 0.25},
    "curves": {"n_points": 5},
}  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("regimes")
    cfg = synth.SynthConfig(regime="mixed", qps=40.0, duration_s=48.0, items=5_000,
                            candidates=8, max_seq_len=256, returning_share=0.0, seed=2)  # fmt: skip
    tp = synth.write(cfg, d / "mixed.parquet").path
    return tp, run_analyze(tp, build_config(PLAN), d / "out")


def test_regimes_in_store_summary_and_page(run):
    tp, res = run
    spans = regimes.read_spans(tp)
    assert [s.name for s in spans] == ["steady", "trend", "burst"]
    s = json.loads(res.summary_path.read_text())
    assert s["schema_version"] == "1.1"
    got = {(r["regime"], r["policy"]): r for r in s["regimes"]}
    pols = {"best-static", "emb-max", "kv-max", "naive-adaptive", "adaptive", "controller",
            "oracle"}  # fmt: skip
    assert {p for _, p in got} == pols and {g for g, _ in got} == {"steady", "trend", "burst"}
    with duckdb.connect(str(res.store_path), read_only=True) as con:
        assert con.execute("select count(*) from regimes").fetchone()[0] == 3 * len(pols)
    html = res.report_path.read_text()
    assert "By regime" in html and "P99 per regime" in html

    # independent: each policy run by itself, its measured requests cut by the spans by hand
    ctx = load_context(tp, pool_fraction=0.2, seed=2)
    ncfg = NodeConfig(slo_ms=0.4, window_s=4.0)
    bs = best_static(ctx, ncfg, OracleConfig(trials=0, coarse_step=0.25, seed=2))
    sched = fill_forward(read_labels(res.labels_path).r_star)
    runs = {
        "best-static": simulate_node(ctx, np.array([bs.ratio]), ncfg),
        "adaptive": simulate_node(ctx, sched, ncfg),
        "oracle": simulate_node(ctx, sched, dataclasses.replace(ncfg, refill="lazy")),
    }
    ts = ctx.arrays.ts_s
    for name, r in runs.items():
        measured = np.arange(len(ts)) >= len(ts) - r.requests
        for sp in spans:
            inside = (ts >= sp.start_s) & ((ts < sp.end_s) | (sp is spans[-1])) & measured
            row = got[(sp.name, name)]
            assert row["requests"] == int(inside.sum())
            p99 = np.percentile(r.sojourn_s[inside], 99) * 1e3
            assert row["p99_ms"] == pytest.approx(p99, rel=1e-9), (name, sp.name)
            att = np.mean(r.sojourn_s[inside] <= 0.4e-3)
            assert row["slo_attainment"] == pytest.approx(att, rel=1e-9), (name, sp.name)
