"""analyze plans first: the operating fleet, one node's share, routing, and the footprint shortcut."""

from __future__ import annotations

import json

import duckdb
import pytest
from conftest import small_table

from helm_plan import trace
from helm_plan.analyze import build_config, run_analyze
from helm_plan.arrays import from_table
from helm_plan.cache import core
from helm_plan.plan.scale import scale

BASE = {
    "analyze": {"window_s": 2.0, "n_boot": 20, "slo_ms": 0.5, "seed": 1, "max_nodes": 12,
                "routers": ["jsq", "helm"], "capacity_max_requests": 20_000},
    "oracle": {"trials": 1, "coarse_step": 0.5},
    "curves": {"n_points": 5},
}  # fmt: skip


def _trace(tmp_path):
    t = small_table(1500, n_users=150, n_items=2000, max_new=6, n_candidates=16,
                    rate_qps=300.0, seed=2)  # fmt: skip
    return trace.write(t, tmp_path / "t.parquet", {"source": "tests.small_table", "seed": 2}), t


def test_scaled_traffic_is_analysed_on_one_node_of_the_binding_fleet(tmp_path):
    tp, t = _trace(tmp_path)
    plan = {**BASE, "analyze": {**BASE["analyze"], "scale": 8.0, "pool_fraction": 0.3}}
    res = run_analyze(tp, build_config(plan), tmp_path / "out")
    cap = res.summary["capacity"]
    base = [r for r in cap["rows"] if r["baseline"]][0]
    n = cap["operating_nodes"]
    assert n == base["nodes"] and n >= 2, cap["answer"]
    assert cap["per_node_factor"] == pytest.approx(8.0 / n)
    # the oracle and the policies replayed one node's share: the trace scaled 8/N by users
    share, _ = scale(t, 8.0 / n, by="users", window_s=2.0, seed=1)
    want = from_table(share, seed=1).n_requests
    con = duckdb.connect(str(res.store_path), read_only=True)
    try:
        got = con.execute("SELECT sum(n_requests) FROM labels").fetchone()[0]
        routers = [r[0] for r in con.execute("SELECT router FROM routing").fetchall()]
    finally:
        con.close()
    assert got == want
    assert routers == ["jsq", "helm"]
    html = res.report_path.read_text()
    assert '<section id="capacity">' in html and '<section id="routing">' in html
    assert html.index('id="capacity"') < html.index('id="policies"')
    assert res.summary["verdict"][0] == cap["answer"][0]
    # tokens on disk never change a result, so a rerun with them reuses every stage
    spill = tmp_path / "spill"
    spill.mkdir()
    before = core.REPLAYED["requests"]
    again = run_analyze(tp, build_config({**plan, "analyze": {**plan["analyze"],
                                                              "spill_dir": str(spill)}}),
                        tmp_path / "out")  # fmt: skip
    assert core.REPLAYED["requests"] == before
    assert again.summary["capacity"] == cap and not list(spill.iterdir())


def test_footprint_that_fits_says_so_first_and_skips_the_trials(tmp_path):
    tp, _ = _trace(tmp_path)
    plan = {**BASE, "analyze": {**BASE["analyze"], "pool_fraction": 1.5}}
    res = run_analyze(tp, build_config(plan), tmp_path / "out")
    first = res.summary["verdict"][0]
    assert first.startswith("The trace's whole EMB+KV footprint") and "does not matter" in first
    assert "--scale" in first and "--pool-fraction" in first
    assert "first points only" in res.summary["verdict"][1]
    con = duckdb.connect(str(res.store_path), read_only=True)
    try:
        meta = dict(con.execute("SELECT key, value_json FROM run_meta").fetchall())
    finally:
        con.close()
    assert json.loads(meta["oracle_trials_skipped"]) == 1
