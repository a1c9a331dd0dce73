"""fit: the controller and its card; label_traces: every trace in order, with progress."""

from __future__ import annotations

import numpy as np
from controller_fixtures import NODE, made_label_trace, small_ctx

from helm_plan.controller import training
from helm_plan.controller.env import SHIFTS
from helm_plan.controller.features import FEATURE_VERSION
from helm_plan.controller.ppo import Args
from helm_plan.controller.runtime import RuntimeConfig
from helm_plan.oracle import OracleConfig

TINY = Args(total_timesteps=128, num_envs=2, num_steps=32, update_epochs=1, hidden=8, seed=4)


def test_fit_card_lists_what_it_was_trained_on():
    trs = [made_label_trace(1), made_label_trace(2, windows=9)]
    ctrl, res = training.fit(trs, TINY, card_extra={"held_out": ["x"]})
    c = ctrl.card
    assert c["training_set"] == ["made1", "made2"] and c["training_windows"] == 21
    assert c["seed"] == 4 and c["ppo"]["total_timesteps"] == 128 and c["held_out"] == ["x"]
    assert c["feature_version"] == FEATURE_VERSION and c["runtime"]["guard"] is True
    assert c["runtime"] == {k: getattr(RuntimeConfig(), k) for k in c["runtime"]}
    np.testing.assert_array_equal(ctrl.shifts, np.array(SHIFTS))
    np.testing.assert_array_equal(ctrl.arrays()["W0"], res.weights["W0"])


def test_label_traces_in_order_with_progress():
    ctx = small_ctx()
    seen = []
    trs = training.label_traces([("a", ctx, NODE), ("b", ctx, NODE)], OracleConfig(trials=0),
                                progress=lambda i, n: seen.append((i, n)))  # fmt: skip
    assert [t.name for t in trs] == ["a", "b"] and seen == [(1, 2), (2, 2)]
    np.testing.assert_array_equal(trs[0].r_star, trs[1].r_star)
