"""`analyze` at scale: each simulation runs once, and workers never change a result (issue 15)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import small_table, untimed

from helm_plan import trace
from helm_plan.analyze import build_config, run_analyze
from helm_plan.cache import core
from helm_plan.oracle import read_labels

PLAN = {
    "analyze": {"window_s": 5.0, "pool_fraction": 0.3, "n_boot": 50, "slo_ms": 0.5, "seed": 3,
                "capacity": False},
    "oracle": {"trials": 4, "coarse_step": 0.25},
    "curves": {"n_points": 11},
}  # fmt: skip
N_ADAPTIVE = 3
"""naive-adaptive, adaptive and the controller: the only policies that are not static splits."""


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("scale")
    t = small_table(2000, n_users=200, n_items=3000, max_new=8, n_candidates=16, rate_qps=50.0,
                    seed=3)  # fmt: skip
    return trace.write(t, d / "small.parquet", {"source": "tests.small_table", "seed": 3})


@pytest.fixture(scope="module")
def serial(small_trace, tmp_path_factory):
    before = core.REPLAYED["requests"]
    res = run_analyze(small_trace, build_config(PLAN), tmp_path_factory.mktemp("w1") / "out")
    return res, core.REPLAYED["requests"] - before


def test_each_simulation_runs_once(serial):
    """Requests replayed = the oracle's evaluations + the static memo + the adaptive policies.

    The carry oracle steps window w once per evaluated r (``n_evals``, its own count); the
    static memo runs the whole trace once per distinct ratio (``static_replays``); each
    adaptive policy runs it once. Anything else (emb-max, kv-max and best static again, the
    oracle's pooled run, the report) must reuse those runs: one request more fails this.
    """
    res, replayed = serial
    lab = read_labels(res.labels_path).table
    n = int(lab["requests"].sum())
    oracle = int((lab["requests"] * lab["n_evals"]).sum())
    meta = json.loads((res.out_dir / "summary.json").read_text())
    static = _static_replays(res)
    assert replayed == oracle + (static + N_ADAPTIVE) * n
    # the pinned budget (issue 37): at most 15 replays of the trace. Measured 14.26: the
    # oracle's bracketing search 5.26 evaluations a window (no coarse grid: train labels its
    # own traces), best static 6 runs (0, 1, 0.38, 0.62 and two bracket steps; emb-max and
    # kv-max are two of them) and the three adaptive policies. The search with the grid gave
    # 27.76 here (10.76 = 7 grid and edge points a window and the trials, 14 static runs).
    assert replayed / n <= 15
    assert oracle / n <= 6 and static <= 7 and meta["schema_version"]


def _static_replays(res) -> int:
    import duckdb

    with duckdb.connect(str(res.store_path), read_only=True) as con:
        row = con.execute("select value_json from run_meta where key = 'static_replays'").fetchone()
    return int(json.loads(row[0]))


def test_workers_do_not_change_results(serial, small_trace, tmp_path):
    res1, replayed1 = serial
    plan = {**PLAN, "analyze": {**PLAN["analyze"], "workers": 2}}
    before = core.REPLAYED["requests"]
    res2 = run_analyze(small_trace, build_config(plan), tmp_path / "out")
    # the same work, wherever it ran: the workers' replays come back to the driver's count
    assert core.REPLAYED["requests"] - before == replayed1
    s1, s2 = (untimed(r.summary) for r in (res1, res2))
    assert json.dumps(s1, sort_keys=True, default=str).replace(str(res1.out_dir), "") == json.dumps(
        s2, sort_keys=True, default=str).replace(str(res2.out_dir), "")  # fmt: skip
    a, b = read_labels(res1.labels_path).table, read_labels(res2.labels_path).table
    assert a.equals(b)
    assert np.isfinite(a["r_star"].to_numpy()).any()


def test_footprint_fits_costs_no_extra_replay_and_a_cached_rerun_none(small_trace, tmp_path):
    # the whole footprint fits: the oracle runs its first points only, and what that saved
    # is timed from the oracle stage itself, not from a replay of its own
    plan = {**PLAN, "analyze": {**PLAN["analyze"], "pool_fraction": 1.5}}
    before = core.REPLAYED["requests"]
    res = run_analyze(small_trace, build_config(plan), tmp_path / "out")
    replayed = core.REPLAYED["requests"] - before
    lab = read_labels(res.labels_path).table
    n = int(lab["requests"].sum())
    oracle = int((lab["requests"] * lab["n_evals"]).sum())
    assert replayed == oracle + (_static_replays(res) + N_ADAPTIVE) * n
    bullets = json.dumps(res.summary)
    assert "no search steps" in bullets and "s saved on an answer known up front" in bullets
    before = core.REPLAYED["requests"]
    again = run_analyze(small_trace, build_config(plan), tmp_path / "out")
    assert core.REPLAYED["requests"] == before  # every stage cached: nothing replays
    assert "s saved on an answer known up front" not in json.dumps(again.summary)
