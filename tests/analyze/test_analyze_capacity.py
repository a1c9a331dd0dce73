"""analyze plans first and fixes one operating point: the invariants between its sections (the
node's P99 in Capacity and Policies, Capacity and Routing to the last digit, one pool), and the
footprint shortcut."""

from __future__ import annotations

import json

import duckdb
from conftest import small_table

from helm_plan import trace
from helm_plan.analyze import build_config, run_analyze
from helm_plan.arrays import from_table
from helm_plan.cache import core

BASE = {
    "analyze": {"window_s": 2.0, "n_boot": 20, "slo_ms": 0.5, "seed": 1, "max_nodes": 12,
                "routers": ["jsq", "helm"], "capacity_max_requests": 20_000,
                "gpus": ["a100-80g"], "headroom_steps": 1},
    "oracle": {"trials": 1, "coarse_step": 0.5},
    "curves": {"n_points": 5},
}  # fmt: skip


def _trace(tmp_path):
    t = small_table(1500, n_users=150, n_items=2000, max_new=6, n_candidates=16,
                    rate_qps=300.0, seed=2)  # fmt: skip
    return trace.write(t, tmp_path / "t.parquet", {"source": "tests.small_table", "seed": 2}), t


def _store(res):
    con = duckdb.connect(str(res.store_path), read_only=True)
    return lambda q: con.sql(q).pl(), con


def test_every_section_analyses_the_one_operating_point(tmp_path):
    tp, t = _trace(tmp_path)
    plan = {**BASE, "analyze": {**BASE["analyze"], "scale": 8.0, "pool_fraction": 0.3,
                                "gpus": ["a100-80g", "h100-80g"]}}  # fmt: skip
    res = run_analyze(tp, build_config(plan), tmp_path / "out")
    s = res.summary
    cap, op = s["capacity"], s["capacity"]["operating"]
    base = [r for r in cap["rows"] if r["baseline"] and r["gpu"] == "a100-80g"][0]
    n = cap["operating_nodes"]
    assert n == base["nodes"] == op["nodes"] and n >= 2 and op["meets"], cap["answer"]
    assert {r["gpu"] for r in cap["rows"]} == {"a100-80g", "h100-80g"}
    # Capacity: the fleet's pooled P99 is the plan's row, and its split the plan's r
    assert op["fleet_p99_ms"] == base["p99_ms"] and op["ratio"] == base["best_static_r"]
    # Policies: the fleet's split replayed on the analysed node is that node's P99 in the fleet
    pols = {p["name"]: p for p in s["policies"]}
    assert pols["fleet-static"]["p99_ms"] == op["p99_ms"]
    assert pols["fleet-static"]["slo_attainment"] == op["slo_attainment"]
    assert pols["fleet-static"]["mean_ratio"] == op["ratio"]
    q, con = _store(res)
    try:
        # the oracle labelled exactly the node's routed requests
        assert int(q("SELECT sum(n_requests) AS n FROM labels")["n"][0]) == op["requests"]
        # Routing and Capacity agree to the last digit at the operating size
        ev = q("SELECT * FROM capacity_evaluated WHERE gpu = 'a100-80g'")
        rt = q("SELECT * FROM routing")
        gpus = q("SELECT * FROM capacity_gpus")
    finally:
        con.close()
    assert rt["router"].to_list() == ["jsq", "helm"] and set(rt["nodes"]) == {n}
    for r in rt.iter_rows(named=True):
        e = ev.filter((ev["policy"] == r["policy"]) & (ev["router"] == r["router"])
                      & (ev["nodes"] == n)).row(0, named=True)  # fmt: skip
        assert (r["p99_ms"], r["slo_attainment"]) == (e["p99_ms"], e["slo_attainment"])
    # one pool: 0.3 of the trace as given, on every GPU and in every section
    given = from_table(t, seed=1)
    assert set(gpus["pool_bytes"]) == {s["setup"]["pool_bytes"]}
    assert s["setup"]["pool_source"].startswith("--pool-fraction 0.3 of the input trace's")
    assert len(given.ts_s) == t.num_rows
    # the first screen opens with the planned traffic; no sentence says the node is overloaded
    # while the fleet meets the SLO
    assert s["verdict"][0] == cap["answer"][0]
    assert not any("overload" in v for v in s["verdict"])
    # Controller and Capacity: the one-node gain says deploy only where the plan's fleet with a
    # controller on every node is no worse than best static's behind the operating router
    ctl, at = s["controller"], (op["gpu"], op["router"])
    rows = {r["policy"]: r for r in cap["rows"] if (r["gpu"], r["router"]) == at}
    c, b = rows["controller"], rows["best-static"]
    if ctl["gain_ci_low"] > 0:
        assert (
            f"needs {c['nodes']} nodes (P99 {c['p99_ms']:.4g} ms) against best static's "
            f"{b['nodes']} (P99 {b['p99_ms']:.4g} ms)"
        ) in ctl["recommendation"]
        assert ctl["recommendation"].startswith("Deploy") == (
            (c["nodes"], c["p99_ms"]) <= (b["nodes"], b["p99_ms"])
        )
    else:
        assert "does not beat it here" in ctl["recommendation"], ctl["recommendation"]
    html = res.report_path.read_text()
    assert '<section id="capacity">' in html and '<section id="routing">' in html
    assert html.index('id="capacity"') < html.index('id="policies"')
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
    v = res.summary["verdict"]
    # one node carries the planned traffic: the plan says it fits, and the node's verdict does
    # not say it twice (nor that the split matters)
    fits = [x for x in v if "fits one pool" in x]
    assert len(fits) == 1 and "footprint of the planned traffic fits one pool" in fits[0]
    assert not any("split matters" in x or "split hardly matters" in x for x in v)
    assert any("first points only" in x for x in v)
    con = duckdb.connect(str(res.store_path), read_only=True)
    try:
        meta = dict(con.execute("SELECT key, value_json FROM run_meta").fetchall())
    finally:
        con.close()
    assert json.loads(meta["oracle_trials_skipped"]) == 1
