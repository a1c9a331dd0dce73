"""PPO: same seed, same weights; another seed, other weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from controller_fixtures import small_label_trace

from helm_plan.controller.ppo import Args, train

TINY = dict(total_timesteps=256, num_envs=2, num_steps=32, update_epochs=2, hidden=8)


def test_retrain_same_seed_reproduces_weights():
    label_trace = small_label_trace()
    a = train([label_trace], Args(seed=5, **TINY))
    b = train([label_trace], Args(seed=5, **TINY))
    c = train([label_trace], Args(seed=6, **TINY))
    assert a.weights.keys() == b.weights.keys()
    for k in a.weights:
        np.testing.assert_array_equal(a.weights[k], b.weights[k])
    assert any(not np.array_equal(a.weights[k], c.weights[k]) for k in a.weights)


@pytest.mark.slow
def test_shipped_default_retrains_to_the_same_weights():
    # the whole recipe (the training suite's labels, PPO with the card's seed): ~30 min
    from helm_plan.controller import suite, training
    from helm_plan.controller.runtime import DEFAULT_PATH, Controller
    from helm_plan.datasets import default_dir

    shipped = Controller.load(DEFAULT_PATH)
    ds = default_dir(Path(__file__).resolve().parents[2])
    if not ds.is_dir():
        pytest.skip("the training suite reads the public logs (set HELM_PLAN_DATASETS)")
    named = [(s.name, *suite.build(s, ds)) for s in suite.TRAIN]
    assert [n for n, _, _ in named] == shipped.card["training_set"]
    ctrl, _ = training.fit(
        training.label_traces(named),
        Args(seed=shipped.card["seed"], total_timesteps=shipped.card["ppo"]["total_timesteps"]),
    )
    for k, v in ctrl.arrays().items():
        if k.startswith(("W", "b")):
            np.testing.assert_array_equal(v, shipped.arrays()[k])
