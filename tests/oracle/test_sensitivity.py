"""Regret, ratio distance, flatness and the bootstrap CI of the value of adaptivity."""

from __future__ import annotations

import numpy as np
import pytest

from helm_plan.errors import ConfigError
from helm_plan.oracle.sensitivity import (
    adaptivity_ci,
    flatness,
    ratio_distance,
    regret,
    window_regret,
)


def test_regret_distance_flatness_by_hand():
    np.testing.assert_allclose(regret([10.0, 12.0], 10.0), [0.0, 0.2])
    np.testing.assert_allclose(ratio_distance([0.2, 0.7], [0.5, 0.5]), [0.3, 0.2])
    r = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    p = np.array([5.0, 1.01, 1.0, 1.02, 1.03])
    assert flatness(r, p, 0.02) == pytest.approx(0.2)  # 0.1..0.3 are within 2% of 1.0
    assert flatness(r, p, tol=0.05) == pytest.approx(0.3)
    assert np.isnan(flatness(r, np.full(5, np.nan), 0.02))


def test_window_regret_interpolates_the_grid():
    grid = np.array([0.0, 0.5, 1.0])
    g = np.array([[2.0, 1.0, 3.0], [1.0, 1.0, 1.0]])
    np.testing.assert_allclose(window_regret(grid, g, np.array([0.25, 0.9])), [0.5, 0.0])


def _inv_cdf_p99(x):
    return np.percentile(x, 99, method="inverted_cdf")


def test_adaptivity_ci_value_and_determinism():
    rng = np.random.default_rng(1)
    n_w, per = 30, 200
    win = np.repeat(np.arange(n_w), per)
    static = rng.exponential(1.0, n_w * per)
    adaptive = static * 0.7
    ci = adaptivity_ci(static, adaptive, win, n_boot=300, seed=5)
    assert ci.value == pytest.approx(0.3)
    assert ci.static_p99_ms == pytest.approx(_inv_cdf_p99(static) * 1e3)
    assert ci.lo == pytest.approx(0.3) and ci.hi == pytest.approx(0.3)
    # noisy improvement: CI brackets the point estimate; same seed -> same CI
    adaptive2 = static * rng.uniform(0.5, 1.0, n_w)[win]
    a = adaptivity_ci(static, adaptive2, win, n_boot=300, seed=5)
    b = adaptivity_ci(static, adaptive2, win, n_boot=300, seed=5)
    assert a == b
    assert a.lo < a.value < a.hi
    assert a.value == pytest.approx(1 - _inv_cdf_p99(adaptive2) / _inv_cdf_p99(static))
    # one replicate drawn by hand: the pooled requests of the drawn windows
    rng_b = np.random.default_rng(7)
    draw = rng_b.integers(0, n_w, n_w)
    pooled_s = np.concatenate([static[win == w] for w in draw])
    pooled_a = np.concatenate([adaptive2[win == w] for w in draw])
    one = adaptivity_ci(static, adaptive2, win, n_boot=1, seed=7, level=0.0)
    assert one.lo == pytest.approx(1 - _inv_cdf_p99(pooled_a) / _inv_cdf_p99(pooled_s))


def test_adaptivity_ci_errors():
    with pytest.raises(ConfigError, match="equal non-empty"):
        adaptivity_ci(np.ones(3), np.ones(2), np.zeros(3))
    with pytest.raises(ConfigError, match="n_boot must be positive, got 0"):
        adaptivity_ci(np.ones(3), np.ones(3), np.zeros(3), n_boot=0)
