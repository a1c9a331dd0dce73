"""The observation function, the feature-version check and the Gymnasium environments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from controller_fixtures import NODE, small_ctx, small_label_trace
from gymnasium.utils.env_checker import check_env

from helm_plan.controller import dataset
from helm_plan.controller.env import SHIFTS, LabelEnv, NodeEnv, raw_from_labels
from helm_plan.controller.features import FEATURE_NAMES, N_FEATURES, check_version, observation
from helm_plan.controller.runtime import Controller
from helm_plan.errors import ConfigError


def test_observation_neutral_on_missing_values():
    x = observation({"arrival_rate_rps": math.nan, "p99_slo": math.nan})
    assert x.shape == (N_FEATURES,) and np.all(np.isfinite(x))
    assert x[FEATURE_NAMES.index("ratio")] == 0.5


def test_feature_version_mismatch_is_an_error():
    with pytest.raises(ConfigError, match="feature version 0"):
        check_version("0", "old.npz")
    w = {"W0": np.zeros((4, N_FEATURES)), "b0": np.zeros(4),
         "W1": np.zeros((len(SHIFTS), 4)), "b1": np.zeros(len(SHIFTS))}  # fmt: skip
    with pytest.raises(ConfigError, match="trained on feature version 0"):
        Controller(w, np.array(SHIFTS), feature_version="0", source="old.npz")


def test_label_set_roundtrip(tmp_path):
    label_trace = small_label_trace()
    p = dataset.save([label_trace], tmp_path / "set.npz")
    (back,) = dataset.load(p)
    assert back.name == label_trace.name
    np.testing.assert_array_equal(back.grid_p99_ms, label_trace.grid_p99_ms)
    np.testing.assert_array_equal(back.ghost_emb, label_trace.ghost_emb)


def test_label_env_scores_the_oracle_ratio_best():
    label_trace = small_label_trace()
    env = LabelEnv([label_trace])
    check_env(env, skip_render_check=True)
    # from r*, holding is never worse than a move in P99 terms
    w = int(np.nanargmin(label_trace.flat_hi - label_trace.flat_lo))
    rs = label_trace.r_star[w]
    p_star = np.interp(rs, label_trace.grid_r[w], label_trace.grid_p99_ms[w])
    assert p_star == pytest.approx(label_trace.p99_star_ms[w])
    raw = raw_from_labels(label_trace, w, rs)
    assert raw["ratio"] == rs and raw["p99_slo"] == pytest.approx(p_star / label_trace.slo_ms)


def test_node_env_passes_the_checker():
    ctx = small_ctx()
    env = NodeEnv(ctx, NODE)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert info["window"] == 0
    total, done = 0, False
    while not done:
        obs, rew, done, _, info = env.step(SHIFTS.index(0.0))
        total += 1
    assert total == env.runner.n_windows - 1
