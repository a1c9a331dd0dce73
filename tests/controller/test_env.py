"""The environments: raw measurements and rewards by hand, the curve action, the checkers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from controller_fixtures import NODE, made_label_trace, small_ctx
from gymnasium.utils.env_checker import check_env

from helm_plan.cache.ghost import GhostCurves, gains
from helm_plan.controller.env import (
    CURVE_ACTION,
    HOLD,
    SHIFTS,
    LabelEnv,
    NodeEnv,
    RewardConfig,
    raw_from_labels,
    window_reward,
)
from helm_plan.controller.features import N_FEATURES, NARROW_BAND, OPT_INDEX
from helm_plan.controller.measure import raw_from_window
from helm_plan.errors import ConfigError
from helm_plan.sim.step import NodeRunner


def test_shifts():
    assert SHIFTS[HOLD] == 0.0 and math.isnan(SHIFTS[CURVE_ACTION])
    assert len(SHIFTS) == 10 and max(abs(s) for s in SHIFTS if s == s) == 0.5


def test_raw_from_window_by_hand():
    ctx = small_ctx()
    node = NodeRunner(ctx, NODE)
    node.step(0.4)
    res = node.step(0.4)
    raw = raw_from_window(res, {"cold_user_share": 0.25}, None, 2.0, 1e9, 2, 1024)
    busy = float(res.service_s.sum())
    assert raw["busy_s"] == busy and raw["utilisation"] == busy / (NODE.window_s * 2)
    assert raw["p99_slo"] == res.p99_ms / 2.0 and raw["slo_attainment"] == res.slo_attainment
    assert raw["h2d_util"] == res.miss_bytes / (1e9 * NODE.window_s)
    assert raw["ratio"] == 0.4 and raw["max_seq_len"] == 1024.0 and raw["cold_user_share"] == 0.25
    assert "ghost_net_up_s" not in raw


def test_raw_from_labels_by_hand():
    tr = made_label_trace(1)
    w, r = 3, 0.25
    raw, gain = raw_from_labels(tr, w, r)
    saved = tr.ghost_emb[w] * tr.emb_s_per_byte + tr.ghost_kv[w] * tr.kv_s_per_token
    ks = round(tr.sched_r[w] * 100)
    busy = tr.busy_s[w] + saved[ks] - saved[25]
    assert raw["busy_s"] == pytest.approx(busy) and raw["utilisation"] == pytest.approx(busy / 5.0)
    assert raw["p99_slo"] == pytest.approx(np.interp(r, tr.grid_r[w], tr.grid_p99_ms[w]) / 4.0)
    assert raw["slo_attainment"] == pytest.approx(np.interp(r, tr.grid_r[w], tr.grid_slo_att[w]))
    g = gains(GhostCurves(np.linspace(0, 1, 101), tr.ghost_emb[w], 1000.0, tr.ghost_kv[w], 600.0),
              r, 0.05, tr.emb_s_per_byte, tr.kv_s_per_token)  # fmt: skip
    assert raw["ghost_net_up_s"] == g.net_up_s
    # the curve is relative to r: log-ratios add, 0 at r
    np.testing.assert_allclose(gain, tr.gain[w] - tr.gain[w][25])
    assert gain[25] == 0.0
    empty = dataclasses.replace(tr, ghost_lookup_bytes=np.zeros(12), ghost_ctx_tokens=np.zeros(12))
    assert raw_from_labels(empty, w, r)[1] is None


def test_window_reward_by_hand():
    cfg = RewardConfig(attainment_weight=2.0, violation_penalty=3.0, shift_cost=0.5)
    assert window_reward(cfg, 5.0, 0.75, 10.0, -0.2) == pytest.approx(-0.1 - 0.5 - 0.5)
    assert window_reward(cfg, 12.0, 0.5, 10.0, 0.0) == pytest.approx(-1.2 - 3.0 - 1.0)
    assert window_reward(cfg, 10.0, 1.0, 10.0, 0.0) == pytest.approx(-1.0)  # at the SLO: no
    assert window_reward(cfg, math.nan, math.nan, 10.0, 0.1) == pytest.approx(-0.05)  # empty


def test_label_env_step_by_hand():
    wide = made_label_trace(2)  # flat bands of 0.2: |r - r*| is not charged there
    narrow = dataclasses.replace(wide, flat_lo=wide.r_star - 0.04, flat_hi=wide.r_star + 0.04)
    cfg = RewardConfig(band_weight=0.5, rstar_weight=2.0)
    w, r = 1, 0.5
    for tr in (wide, narrow):
        env = LabelEnv([tr], cfg)
        env.reset(seed=0, options={"trace": 0, "ratio": 0.4})
        _, rew, done, _, info = env.step(SHIFTS.index(0.1))
        p99 = np.interp(r, tr.grid_r[w], tr.grid_p99_ms[w])
        att = np.interp(r, tr.grid_r[w], tr.grid_slo_att[w])
        want = window_reward(cfg, p99, att, 4.0, 0.1)
        want -= 0.5 * max(tr.flat_lo[w] - r, r - tr.flat_hi[w], 0.0)
        if tr.flat_hi[w] - tr.flat_lo[w] < NARROW_BAND:
            want -= 2.0 * abs(r - tr.r_star[w])
        assert info["ratio"] == pytest.approx(r) and rew == pytest.approx(want) and not done


def test_curve_action_jumps_to_the_smoothed_curves_optimum():
    tr = made_label_trace(3)
    env = LabelEnv([tr])
    x, _ = env.reset(seed=0, options={"trace": 0, "ratio": 0.9})
    # window 0 served at 0.9: its curve peaks at window 0's r* (relative gains only shift it)
    assert x[OPT_INDEX] == pytest.approx(round(tr.r_star[0], 2))
    _, _, _, _, info = env.step(CURVE_ACTION)
    assert info["ratio"] == pytest.approx(x[OPT_INDEX])


def test_env_checkers_and_refusals():
    env = LabelEnv([made_label_trace(1), made_label_trace(2)])
    check_env(env, skip_render_check=True)
    assert env.observation_space.shape == (N_FEATURES,)
    with pytest.raises(ConfigError, match="at least one label trace"):
        LabelEnv([])
    with pytest.raises(ConfigError, match="fewer than 2 windows"):
        LabelEnv([made_label_trace(1, windows=1)])
    ctx = small_ctx()
    node = NodeEnv(ctx, NODE)
    check_env(node, skip_render_check=True)
    obs, info = node.reset(seed=0)
    assert info["window"] == 0 and obs[OPT_INDEX] == 0.5  # nothing known yet: stay
    steps, done = 0, False
    while not done:
        obs, rew, done, _, info = node.step(CURVE_ACTION)
        steps += 1
        assert 0.0 <= info["ratio"] <= 1.0 and np.isfinite(rew)
    assert steps == node.runner.n_windows - 1
