"""`analyze` end to end on a small trace, checked against separate simulate-equivalent runs."""

from __future__ import annotations

import dataclasses
import json

import duckdb
import numpy as np
import polars as pl
import pytest
from conftest import small_table

from helm_plan import trace
from helm_plan.analyze import build_config, run_analyze
from helm_plan.oracle import OracleConfig, best_static, label_windows, read_labels
from helm_plan.policies import PolicyEnv, parse_policy
from helm_plan.report import tables as report_tables
from helm_plan.sim import NodeConfig, fill_forward, load_context, simulate_node

PLAN = {
    "analyze": {
        "window_s": 5.0,
        "pool_fraction": 0.3,
        "n_boot": 50,
        "slo_ms": 0.5,
        "seed": 3,
        "gpus": ["a100-80g"],
    },
    "oracle": {"trials": 2, "coarse_step": 0.25},
    "curves": {"n_points": 11},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    t = small_table(2000, n_users=200, n_items=3000, max_new=8, n_candidates=16, rate_qps=50.0,
                    seed=3)  # fmt: skip
    tp = trace.write(t, d / "small.parquet", {"source": "tests.small_table", "seed": 3})
    res = run_analyze(tp, build_config(PLAN), d / "out")
    return tp, res


def test_summary_matches_separate_simulations(run):
    tp, res = run
    s = json.loads(res.summary_path.read_text())
    assert s == json.loads(json.dumps(res.summary))
    # independent: load the trace like `helm-plan simulate`, run each policy on its own
    ctx = load_context(tp, gpu="a100-80g", model="gr-small", pool_fraction=0.3, seed=3)
    ncfg = NodeConfig(slo_ms=0.5, window_s=5.0)
    # analyze labels from the carried state by default (helm_plan.analyze.ORACLE_DEFAULTS),
    # without the coarse grid (its cheaper search), and so searches best static
    ocfg = OracleConfig(trials=2, coarse_step=0.25, seed=3, warmup="carry")
    labels = label_windows(ctx, ncfg, ocfg, grid=False)
    on_disk = read_labels(res.labels_path)
    np.testing.assert_array_equal(on_disk.r_star, labels.r_star)
    assert on_disk.table.equals(labels.table) and on_disk.coarse_grid == ()
    bs = best_static(ctx, ncfg, ocfg, grid=False)
    sched = fill_forward(read_labels(res.labels_path).r_star)
    n_w = ctx.n_windows(5.0)
    expect = {
        "best-static": (np.full(n_w, bs.ratio), "throttled"),
        "emb-max": (np.ones(n_w), "throttled"),
        "kv-max": (np.zeros(n_w), "throttled"),
        "naive-adaptive": (sched, "eager"),
        "adaptive": (sched, "throttled"),
    }
    got = {p["name"]: p for p in s["policies"]}
    assert list(got) == [*expect, "controller", "fleet-static"]
    # the plan's fleet split on the analysed node (here one node: the trace itself)
    expect["fleet-static"] = (np.full(n_w, s["capacity"]["operating"]["ratio"]), "throttled")
    # the shipped controller, run by itself from the policy catalogue on the same node, its
    # guard anchored at the same best static
    ctl = parse_policy("controller").build(ctx, ncfg, PolicyEnv(oracle=ocfg, best_static=bs))
    r = simulate_node(ctx, ctl.policy, dataclasses.replace(ncfg, refill=ctl.refill or ncfg.refill))
    assert got["controller"]["p99_ms"] == pytest.approx(r.p99_ms, rel=1e-12)
    c = s["controller"]
    assert c["regret_vs_oracle"] == pytest.approx(r.p99_ms / s["oracle"]["p99_ms"] - 1)
    assert c["vs_best_static"] == pytest.approx(r.p99_ms / bs.p99_ms - 1)
    for name, (ratios, refill) in expect.items():
        r = simulate_node(ctx, ratios, dataclasses.replace(ncfg, refill=refill))
        m = r.measured_from_window
        assert got[name]["p99_ms"] == pytest.approx(r.p99_ms, rel=1e-12), name
        assert got[name]["slo_attainment"] == pytest.approx(r.slo_attainment, rel=1e-12), name
        assert got[name]["mean_ratio"] == pytest.approx(float(np.mean(ratios[m:])), rel=1e-12)
    assert s["best_static"]["ratio"] == bs.ratio
    assert s["best_static"]["p99_ms"] == pytest.approx(bs.p99_ms, rel=1e-12)
    finite = labels.r_star[np.isfinite(labels.r_star)]
    assert s["oracle"]["ratio_min"] == finite.min() and s["oracle"]["ratio_max"] == finite.max()
    lazy = simulate_node(ctx, sched, dataclasses.replace(ncfg, refill="lazy"))
    # best static is a schedule the oracle could choose: its answer is never worse
    assert s["oracle"]["p99_ms"] == pytest.approx(min(lazy.p99_ms, bs.p99_ms), rel=1e-12)
    assert s["oracle"]["schedule"] == ("labels" if lazy.p99_ms <= bs.p99_ms else "best-static")
    voa = s["value_of_adaptivity"]
    assert voa["p99_reduction"] == pytest.approx(
        1 - got["adaptive"]["p99_ms"] / got["best-static"]["p99_ms"], rel=1e-12
    )
    assert voa["ci_low"] <= voa["ci_high"]
    assert s["seed"] == 3 and s["trace_sha256"] == trace.sha256(tp)
    assert set(s["timings_s"]) == {"inspect", "curves", "capacity", "oracle", "policies", "report"}
    # at its own load one node serves this trace, so the analysed node is the trace itself
    op = s["capacity"]["operating"]
    assert s["capacity"]["operating_nodes"] == 1 and op["share"] == 1.0
    assert op["requests"] == ctx.arrays.n_requests
    assert {"python", "numpy", "numba", "polars", "duckdb", "optuna", "torch", "plotly"} <= set(
        s["versions"]
    )


def test_outputs_and_store_tables(run):
    _, res = run
    names = sorted(p.name for p in res.out_dir.iterdir())
    assert names == [".stages", "helm.duckdb", "labels.parquet", "report.html", "run.json",
                     "summary.json"]  # fmt: skip
    stages = sorted(p.name.split("-")[0] for p in (res.out_dir / ".stages").iterdir())
    assert stages == ["capacity", "curves", "inspect", "oracle", "policies"]
    con = duckdb.connect(str(res.store_path), read_only=True)
    try:
        tables = {
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
        n_pw = con.execute("SELECT count(*) FROM policy_windows").fetchone()[0]
    finally:
        con.close()
    want = {"stats", "curves", "curve_knees", "labels", "labels_grid", "policy_windows",
            "policies", "latency_coef", "latency_terms", "sensitivity", "adaptivity", "config",
            "versions", "timings", "run_meta", "workload_arrivals", "capacity",
            "capacity_savings", "load_curve", "max_qps", "routing", "capacity_frontier",
            "capacity_headroom"}  # fmt: skip
    assert want <= tables and not any(t.startswith("_") for t in tables)
    assert tables - {"run_meta"} <= set(report_tables.ALL)  # every stored table has its name
    assert n_pw == 7 * len(read_labels(res.labels_path).r_star)


def test_rerun_reuses_every_stage_and_report_rebuilds_identically(run):
    from helm_plan.report import rebuild

    tp, res = run
    again = run_analyze(tp, build_config(PLAN), res.out_dir)
    assert [s.cached for s in again.stages] == [True, True, True, True, True, False]
    for a, b in zip(again.summary["policies"], res.summary["policies"], strict=True):
        assert a == b
    before = res.report_path.read_bytes()
    res.report_path.unlink()
    assert rebuild(res.out_dir) == [res.report_path]
    assert res.report_path.read_bytes() == before


def test_stored_curves_are_the_curves_without_the_worst_case(run):
    # analyze's default skips the no-KV-cache pass (its longest stream); the two curves it keeps
    # are compute_curves' own on the same node, and the report says the third was not measured
    from helm_plan.cache.curves import CurvesConfig, compute_curves
    from helm_plan.pool import Pool
    from helm_plan.report.store import read_store

    tp, res = run
    ctx = load_context(tp, gpu="a100-80g", model="gr-small", pool_fraction=0.3, seed=3)
    cfg = CurvesConfig(window_s=5.0, n_points=11, seed=3, worst_case=False)
    want = compute_curves(ctx.workload, ctx.gpu, ctx.model, Pool(ctx.pool_bytes, "t"), cfg)
    got = read_store(res.store_path).table("curves")
    assert set(got["kind"]) == {"emb", "kv"}
    cols = ["kind", "window", "capacity_bytes", "hit_rate", "n_accesses"]
    assert got.select(cols).sort(cols[:3]).equals(want.table.select(cols).sort(cols[:3]))
    html = res.report_path.read_text()
    assert "was not measured" in html and "whole trace, no KV cache" not in html


def test_policies_equal_the_brute_force_node(tmp_path):
    """Every policy row of a tiny analyze run against tests/brute.py (no helm_plan simulation)."""
    from brute import BruteNodeConfig, simulate

    from helm_plan.latency.kernel import COEFFS
    from helm_plan.report.store import read_store

    t = small_table(160, n_users=20, n_items=120, max_new=5, n_candidates=4, rate_qps=40.0,
                    seed=5)  # fmt: skip
    tp = trace.write(t, tmp_path / "tiny.parquet", {"source": "tests.small_table"})
    plan = {"analyze": {"window_s": 1.0, "pool_fraction": 0.2, "n_boot": 20, "slo_ms": 1.0},
            "oracle": {"trials": 0, "coarse_step": 0.5}, "node": {"throttle_share": 0.4}}  # fmt: skip
    res = run_analyze(tp, build_config(plan), tmp_path / "out")
    s = res.summary
    ctx = load_context(tp, gpu="a100-80g", model="gr-small", pool_fraction=0.2)
    coeffs = dict(zip(COEFFS, ctx.latency.coeffs, strict=True))
    n_w = ctx.n_windows(1.0)
    sched = fill_forward(read_labels(res.labels_path).r_star).tolist()
    schedules = {
        "best-static": ([s["best_static"]["ratio"]] * n_w, "throttled"),
        "emb-max": ([1.0] * n_w, "throttled"),
        "kv-max": ([0.0] * n_w, "throttled"),
        "naive-adaptive": (sched, "eager"),
        "adaptive": (sched, "throttled"),
    }
    got = {p["name"]: p for p in s["policies"]}
    run = read_store(res.store_path)
    pw, pol = run.table("policy_windows"), run.table("policies")
    ts = t.column("ts_s").to_numpy()
    win = np.floor(ts / 1.0).astype(int)
    measured = win >= 1  # the first window warms the caches
    for name, (ratios, refill) in schedules.items():
        ref = simulate(t, ctx.model, ctx.pool_bytes, coeffs,
                       BruteNodeConfig(1.0, refill=refill, phi=0.4), ratios)  # fmt: skip
        all_soj, out = np.array(ref.sojourn), np.array(ref.outcomes, np.int64)
        soj = all_soj[measured]
        assert got[name]["p99_ms"] == pytest.approx(np.percentile(soj, 99) * 1e3, rel=1e-9), name
        assert got[name]["slo_attainment"] == pytest.approx(np.mean(soj <= 1e-3)), name
        # the store's per-policy and per-window figures, each from the brute-force requests
        p = pol.filter(pl.col("policy") == name).row(0, named=True)
        hit = 1 - out[measured, 5].sum() / out[measured, 4].sum()
        assert p["emb_hit_rate"] == pytest.approx(hit, rel=1e-9), name
        assert p["requests"] == measured.sum()
        span = np.max(ts[measured] + soj) - 1.0
        assert p["throughput_rps"] == pytest.approx(measured.sum() / span, rel=1e-9), name
        assert p["h2d_gb"] == pytest.approx(sum(ref.h2d_bytes[1:]) / 1e9, rel=1e-12), name
        assert p["blocked_ms"] == pytest.approx(sum(ref.blocked) * 1e3, rel=1e-9, abs=1e-12)
        w = pw.filter(pl.col("policy") == name).sort("window")
        assert w["n_requests"].to_list() == np.bincount(win, minlength=n_w).tolist(), name
        assert w["h2d_bytes"].to_list() == ref.h2d_bytes, name
        assert w["prefetch_bytes"].to_list() == ref.prefetch_bytes, name
        for k in np.unique(win):
            i = win == k
            row = w.row(int(k), named=True)
            assert row["p99_ms"] == pytest.approx(np.percentile(all_soj[i], 99) * 1e3, rel=1e-9)
            hit = 1 - out[i, 5].sum() / out[i, 4].sum()
            assert row["emb_hit_rate"] == pytest.approx(hit, rel=1e-9), (name, k)
