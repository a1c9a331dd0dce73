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


def test_window_regret_is_exact_on_labels_and_undefined_across_a_cliff():
    grid = np.array([0.0, 0.5, 1.0])
    # window 0: r* = 0.6 with P99 0.9 (off the grid); window 1 flat; window 2: a cliff at 0
    g = np.array([[1.2, 1.0, 1.4], [1.0, 1.0, 1.0], [40.0, 1.0, 1.1]])
    r_star = np.array([0.6, 0.5, 0.5])
    p_star = np.array([0.9, 1.0, 1.0])
    # the oracle's own schedule: regret exactly 0, even off the grid
    np.testing.assert_array_equal(window_regret(grid, g, r_star, r_star, p_star), [0, 0, 0])
    # on a grid point: that point's P99 over the best; inside a smooth cell: interpolated
    got = window_regret(grid, g, np.array([0.5, 0.75, 0.75]), r_star, p_star)
    np.testing.assert_allclose(got, [1.0 / 0.9 - 1, 0.0, 1.05 - 1])
    # inside the cell [0, 0.5] of window 2 (1.0 vs 40 ms): undefined, not 20x interpolated
    assert np.isnan(window_regret(grid, g, np.array([0.1, 0.1, 0.1]), r_star, p_star)[2])
    assert window_regret(grid, g, np.array([0.1, 0.1, 0.1]), r_star, p_star)[0] == (
        pytest.approx((1.2 + (1.0 - 1.2) * 0.2) / 0.9 - 1)
    )


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


def test_compiled_bootstrap_quantiles_equal_the_cumulative_sum_definition():
    from helm_plan.oracle.sensitivity import _boot_quantiles, weighted_quantile

    rng = np.random.default_rng(11)
    n_w, n = 40, 5000
    win = rng.integers(0, n_w, n)
    x = rng.lognormal(0, 1, n)
    o = np.argsort(x, kind="stable")
    xs, ws = x[o], win[o]
    mult = rng.integers(0, 4, (50, n_w)).astype(np.float64)
    mult[0] = 0.0
    mult[0, 3] = 1.0  # a replicate of one window
    counts = np.bincount(win, minlength=n_w).astype(np.float64)
    for q in (0.5, 0.99, 0.999):
        got = _boot_quantiles(xs, ws, mult, counts, q)
        want = [weighted_quantile(xs, m[ws], q) for m in mult]
        np.testing.assert_array_equal(got, want)


def test_ci_level_is_the_percentile_interval_of_the_replicates():
    """A 90% interval is the 5th..95th percentile of the replicates, not the 2.5th..97.5th."""
    from helm_plan.oracle.sensitivity import weighted_quantile

    rng = np.random.default_rng(2)
    n_w, per = 25, 100
    win = np.repeat(np.arange(n_w), per)
    s = rng.exponential(1.0, n_w * per)
    a = s * rng.uniform(0.6, 1.1, n_w)[win]
    ci = adaptivity_ci(s, a, win, n_boot=200, level=0.9, seed=9)
    # the replicates, drawn by hand with the same seeded stream
    gen = np.random.default_rng(9)
    os_, oa = np.argsort(s, kind="stable"), np.argsort(a, kind="stable")
    reps = []
    for _ in range(200):
        m = np.bincount(gen.integers(0, n_w, n_w), minlength=n_w).astype(float)
        reps.append(1 - weighted_quantile(a[oa], m[win[oa]], 0.99)
                    / weighted_quantile(s[os_], m[win[os_]], 0.99))  # fmt: skip
    lo, hi = np.quantile(reps, [0.05, 0.95])
    assert ci.lo == pytest.approx(lo, rel=1e-12) and ci.hi == pytest.approx(hi, rel=1e-12)
    assert ci.level == 0.9
