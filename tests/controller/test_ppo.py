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
def test_shipped_default_retrains_to_the_same_weights(tmp_path):
    # the whole default recipe (labels of the default set, PPO seed 0): ~12 min on 2 cores
    from helm_plan.controller import training
    from helm_plan.controller.runtime import DEFAULT_PATH, Controller
    from helm_plan.datasets import default_dir

    shipped = Controller.load(DEFAULT_PATH)
    named = [(s.name, training.synth_context(s)) for s in training.DEFAULT_SET]
    ds = default_dir(Path(__file__).resolve().parents[2])
    if ds.is_dir():
        named += training.real_trace_contexts(ds)
    assert [n for n, _ in named] == shipped.card["training_set"]
    ctrl, _ = training.fit(
        training.label_traces(named),
        Args(seed=shipped.card["seed"], total_timesteps=shipped.card["ppo"]["total_timesteps"]),
    )
    for k, v in ctrl.arrays().items():
        if k.startswith(("W", "b")):
            np.testing.assert_array_equal(v, shipped.arrays()[k])
