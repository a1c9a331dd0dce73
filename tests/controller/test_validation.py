"""Validation against independent runs of the same policies, the figures a planner reads and
the verdict."""

from __future__ import annotations

import numpy as np
import pytest
from controller_fixtures import NODE, small_ctx
from test_guard import _actor

from helm_plan.controller import validation as V
from helm_plan.controller.policy import ControllerPolicy, ThresholdPolicy
from helm_plan.oracle import OracleConfig, best_static, label_windows
from helm_plan.oracle.band import resolve_bands
from helm_plan.oracle.sensitivity import adaptivity_ci
from helm_plan.sim import simulate_node
from helm_plan.sim.policy import SchedulePolicy

OCFG = OracleConfig(trials=0)


@pytest.fixture(scope="module")
def val():
    return V.validate(_actor(0.1), small_ctx(), "small", NODE, OCFG)


def test_figures_are_those_of_independent_runs(val):
    ctx = small_ctx()
    bs = best_static(ctx, NODE, OCFG)
    static = simulate_node(ctx, np.array([bs.ratio]), NODE)
    ctrl = simulate_node(ctx, ControllerPolicy(ctx, NODE, _actor(0.1), "c", anchor=bs.ratio), NODE)
    thr = simulate_node(ctx, ThresholdPolicy(ctx, NODE), NODE)
    assert val.best_static_r == bs.ratio
    assert val.p99_ms["best-static"] == static.p99_ms and val.p99_ms["controller"] == ctrl.p99_ms
    assert val.p99_ms["threshold"] == thr.p99_ms
    i0 = len(ctrl.sojourn_s) - ctrl.requests
    ci = adaptivity_ci(static.sojourn_s[i0:], ctrl.sojourn_s[i0:], ctrl.window_idx[i0:], seed=0)
    g = val.vs_best_static["controller"]
    assert (g.value, g.lo, g.hi) == (ci.value, ci.lo, ci.hi)
    ci = adaptivity_ci(thr.sojourn_s[i0:], ctrl.sojourn_s[i0:], ctrl.window_idx[i0:], seed=0)
    assert val.controller_vs_threshold.value == ci.value
    np.testing.assert_array_equal(val.ratios, ctrl.ratios)
    st = ctrl.policy_stats
    assert val.fallback_share == st["guard_fallback_windows"] / st["decisions"]
    assert val.override_share == st["guard_overrides"] / st["decisions"]
    # the oracle is never reported worse than best static
    assert val.p99_ms["oracle"] <= val.p99_ms["best-static"] and val.oracle_gain >= 0.0
    # the oracle one window late: the labels shifted by hand, the first window at best static
    lab = label_windows(ctx, NODE, OCFG)
    late = np.r_[bs.ratio, lab.r_star[:-1]]
    assert np.isfinite(late).all()  # (every window of this trace is labelled)
    run = simulate_node(ctx, SchedulePolicy(late, "late"), NODE)
    np.testing.assert_array_equal(run.ratios, late)
    assert val.p99_ms["oracle-late"] == run.p99_ms
    assert val.late_gain == 1.0 - run.p99_ms / static.p99_ms


def test_late_schedule_hand_worked():
    np.testing.assert_array_equal(V.late_schedule(np.array([0.1, np.nan, 0.3]), 0.5),
                                  [0.5, 0.1, 0.1])  # fmt: skip
    np.testing.assert_array_equal(V.late_schedule(np.array([np.nan, 0.2]), 0.4), [0.4, 0.4])
    assert len(V.late_schedule(np.array([]), 0.4)) == 0


@pytest.mark.parametrize("tol", [OCFG.flat_tol, 0.0])  # 0: a narrow window, band resolved
def test_narrow_band_distance_and_guard_shares(tol):
    ctx = small_ctx()
    ocfg = OracleConfig(trials=0, flat_tol=tol)
    val = V.validate(_actor(0.1), ctx, "small", NODE, ocfg, baselines=False)
    lab = label_windows(ctx, NODE, ocfg)
    flat = lab.table["flatness"].to_numpy()
    w = np.arange(len(lab.r_star))
    ok = (w >= 1) & np.isfinite(lab.r_star)
    narrow = ok & (flat < 0.1)
    assert val.narrow_windows == int(narrow.sum())
    d = np.abs(val.ratios - lab.r_star)
    assert val.abs_dr_all == pytest.approx(d[ok].mean())
    if narrow.any():
        assert val.abs_dr_narrow == pytest.approx(d[narrow].mean())
    else:
        assert np.isnan(val.abs_dr_narrow)
    # the narrow windows' bands resolved on the lattice: r* is in its band, so the distance to
    # the band is never more than |r - r*|, and 0 where r is in the band
    bands = resolve_bands(ctx, NODE, lab, ocfg, narrow)
    assert (bands.probes > 0) == (tol == 0.0)  # this trace's bands are narrow only at tol 0
    assert np.all(bands.lo[narrow] <= lab.r_star[narrow])
    assert np.all(lab.r_star[narrow] <= bands.hi[narrow])
    resolved = narrow & (bands.hi - bands.lo < 0.1)
    assert val.band_windows == int(resolved.sum()) and val.band_probes == bands.probes
    b = np.maximum(np.maximum(bands.lo - val.ratios, val.ratios - bands.hi), 0.0)
    assert np.all(b[narrow] <= d[narrow] + 1e-12)
    if resolved.any():
        assert val.band_dr_narrow == pytest.approx(b[resolved].mean())
    else:
        assert np.isnan(val.band_dr_narrow)
    # this actor pushes r up 0.1 every window: the guard overrode some of those moves
    assert val.override_share > 0.0
    assert val.latency_us["n"] == val.windows - 1 and val.latency_us["median"] > 0


def test_captured_share_only_where_the_oracle_gains():
    v = V.validate(_actor(0.0), small_ctx(), "s", NODE, OCFG, baselines=False)
    assert "threshold" not in v.p99_ms and np.isnan(v.controller_vs_threshold.value)
    if v.oracle_gain < V.ORACLE_GAINS:
        assert np.isnan(v.captured)
    else:
        assert v.captured == pytest.approx(
            (1 - v.p99_ms["controller"] / v.p99_ms["best-static"]) / v.oracle_gain
        )


def test_rows_and_verdict(val):
    (row,) = V.format_rows([val])
    assert len(row) == len(V.COLUMNS) and row[0] == "small"
    assert row[2] == val.vs_best_static["controller"].text()
    beats = V.Gain(0.05, 0.01, 0.09)
    loses = V.Gain(0.01, -0.02, 0.04)
    import dataclasses

    win = dataclasses.replace(val, vs_best_static={**val.vs_best_static, "controller": beats})
    lose = dataclasses.replace(val, vs_best_static={**val.vs_best_static, "controller": loses})
    assert "deploy the controller" in V.verdict(win)
    assert "use best static" in V.verdict(lose) and f"r = {val.best_static_r:.2f}" in V.verdict(
        lose
    )
    f = val.figures()
    assert f["vs_best_static"]["controller"]["value"] == val.vs_best_static["controller"].value
    assert "ratios" not in f


def test_latency_summary():
    empty = V.latency_summary([])
    assert np.isnan(empty["median"]) and np.isnan(empty["p99"]) and empty["n"] == 0
    s = V.latency_summary([1000, 3000, 2000])
    assert s == {"median": 2.0, "p99": pytest.approx(2.98), "n": 3}
