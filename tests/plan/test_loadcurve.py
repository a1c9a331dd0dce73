"""The single-node load curve: monotone P99 in load, and a maximum QPS that passes while 10% more fails."""

from __future__ import annotations

import math

import numpy as np
from brute import coeff_latency
from conftest import small_table

from helm_plan.arrays import from_table
from helm_plan.oracle import OracleConfig
from helm_plan.plan.loadcurve import LoadSetup, load_curve, run_point
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig


def _setup(slo_ms=3.0):
    t = small_table(1500, n_users=120, n_items=800, max_new=4, n_candidates=8,
                    rate_qps=100.0, seed=8)  # fmt: skip
    return LoadSetup(
        trace=from_table(t, seed=0), gpu=load_gpu("a100-80g"), model=load_model("gr-small"),
        latency=coeff_latency(), latency_profile=None, pool_bytes=4_000_000,
        node=NodeConfig(slo_ms=slo_ms, window_s=2.0),
        oracle=OracleConfig(trials=0, coarse_step=0.5), attainment=0.95,
    )  # fmt: skip


def test_max_qps_passes_and_ten_percent_more_fails():
    s = _setup()
    lc = load_curve(s, ["static:0.3", "best-static"], [1.0, 4.0], refine_steps=6)
    for p in ("static:0.3", "best-static"):
        pts = lc.points.filter(lc.points["policy"] == p).sort("factor")
        # P99 grows with load (a queue gets slower as it fills)
        p99 = pts["p99_ms"].to_numpy()
        assert np.all(np.diff(p99) > -1e-9) or p99[-1] > p99[0]
        q = lc.max_qps[p]
        assert math.isfinite(q)
        best = pts.filter(pts["qps"] == q).row(0, named=True)
        assert best["passes"]
        above = run_point(s, (p, best["factor"] * 1.1))
        assert not above.passes
    # choosing the split per load never does worse than one fixed split
    assert lc.max_qps["best-static"] >= lc.max_qps["static:0.3"] * 0.999
