"""PPO: same seed, same weights; another seed, other weights."""

from __future__ import annotations

import numpy as np
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
