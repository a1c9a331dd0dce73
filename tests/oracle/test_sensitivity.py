"""Regret, ratio distance, flatness and the bootstrap CI of the value of adaptivity.

Sensitivity measures on tiny hand-worked inputs: the edges the broad tests do not reach.

Pins (DESIGN.md, Sensitivity): regret and ratio distance computed in float64; the flat band's
inclusive tolerance and NaN handling; ``window_regret``'s undefined cases (no best P99, a
ratio off either end of the grid, a cliff cell, an infinite cell end) and its interpolation
in an uneven cell; ``weighted_quantile`` as the inverted CDF (ties go to the lower value,
zero total weight is NaN); ``adaptivity_ci``'s checks and reported fields; and
``sensitivity_table``'s columns for a two-window label table worked out by hand.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from helm_plan.errors import ConfigError
from helm_plan.oracle.sensitivity import (
    adaptivity_ci,
    flat_band,
    flatness,
    ratio_distance,
    regret,
    sensitivity_table,
    weighted_quantile,
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


def test_regret_and_distance_are_float64():
    a, b = np.float32(1.3), np.float32(1.1)
    got = regret(np.array([a]), np.array([b]))
    assert got.dtype == np.float64
    assert got[0] == float(a) / float(b) - 1.0  # not the float32 quotient
    d = ratio_distance(np.array([a]), np.array([b]))
    assert d.dtype == np.float64 and d[0] == abs(float(a) - float(b))
    # unsigned inputs: |0 - 1| is 1, not the wrapped-around 255
    u = ratio_distance(np.array([0], np.uint8), np.array([1], np.uint8))
    assert u.dtype == np.float64 and u[0] == 1.0
    assert regret(12.0, 10.0) == pytest.approx(0.2) and regret(10.0, 10.0) == 0.0
    assert ratio_distance(0.25, 0.75) == 0.5


def test_flat_band_edges():
    r = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    # 1.02 is exactly 2% above the best 1.0: inside (inclusive); 1.03 is outside
    p = np.array([1.03, 1.02, 1.0, 1.5, np.nan])
    assert flat_band(r, p, 0.02) == (0.25, 0.5)
    assert flatness(r, p, 0.02) == 0.25
    # tolerance 0: only the best point(s); ties at both ends
    assert flat_band(r, np.array([2.0, 2.0, 3.0, 2.0, np.nan]), 0.0) == (0.0, 0.75)
    # NaN P99s are ignored even where their r would widen the band
    assert flat_band(r, np.array([np.nan, 1.0, 1.0, np.nan, np.nan]), 0.5) == (0.25, 0.5)
    lo, hi = flat_band(r, np.full(5, np.nan), 0.02)
    assert math.isnan(lo) and math.isnan(hi)
    # infinite P99s are not finite either: they neither set the best nor join the band
    assert flat_band(r, np.array([np.inf, 1.0, np.inf, 1.0, np.inf]), 10.0) == (0.25, 0.75)
    # float32 P99s are compared in float64: float32(1.02) = 1.0199999809 is more than
    # 1.01999998 (tolerance 0.01999998 above 1.0), although the tolerance rounds to it in float32
    p32 = np.array([1.0, 1.02, 9.0, 9.0, 9.0], np.float32)
    assert flat_band(r, p32, 0.01999998) == (0.0, 0.0)
    assert flat_band(r, p32, 0.02) == (0.0, 0.25)


def test_window_regret_undefined_and_uneven_cells():
    grid = np.array([0.2, 0.6, 1.0])
    smooth = [2.8, 2.0, 2.4]  # cells 1.4x and 1.2x: no cliff
    g = np.array(
        [
            smooth,  # 0: interpolated
            smooth,  # 1: best P99 0 -> undefined
            smooth,  # 2: best P99 infinite -> undefined
            smooth,  # 3: r below the grid -> undefined
            smooth,  # 4: r above the grid -> undefined
            [2.0, 3.0, 1.2],  # 5: a cell whose ends differ by exactly 1.5x: not a cliff
            [1.0, np.inf, 1.2],  # 6: an infinite cell end -> undefined
            smooth,  # 7: r NaN -> undefined
            smooth,  # 8: r* NaN, r on the grid -> that point's P99
            [2.0, 3.2, 1.2],  # 9: ends 1.6x apart: a cliff
        ]
    )
    ratios = np.array([0.3, 0.3, 0.3, 0.1, 1.1, 0.5, 0.3, np.nan, 1.0, 0.5])
    r_star = np.array([0.6, 0.6, 0.6, 0.6, 0.6, 0.2, 0.2, 0.6, np.nan, 0.2])
    p_star = np.array([1.6, 0.0, np.inf, 1.6, 1.6, 1.0, 1.0, 1.6, 1.6, 1.0])
    with np.errstate(divide="ignore"):
        got = window_regret(grid, g, ratios, r_star, p_star)
    # window 0: r = 0.3 is a quarter of the way from 0.2 (2.8) to 0.6 (2.0): 2.6
    assert got[0] == pytest.approx(2.6 / 1.6 - 1, rel=1e-12)
    # window 5: r = 0.5 is three quarters from 0.2 (2.0) to 0.6 (3.0): 2.75
    assert got[5] == pytest.approx(1.75, rel=1e-12)
    assert got[8] == pytest.approx(2.4 / 1.6 - 1, rel=1e-12)
    assert np.isnan(got[[1, 2, 3, 4, 6, 7, 9]]).all()
    # a ratio within 1e-9 of r* (but not equal) is the optimum; 1e-6 away is not
    one = window_regret(grid, g[:1], np.array([0.6 + 1e-10]), np.array([0.6]), np.array([1.6]))
    assert one[0] == 0.0
    off = window_regret(grid, g[:1], np.array([0.45 + 1e-6]), np.array([0.45]), np.array([1.6]))
    # (0.25 + 1e-6) / 0.4 of the way from 2.8 down to 2.0
    assert off[0] == pytest.approx((2.8 - 0.8 * (0.25 + 1e-6) / 0.4) / 1.6 - 1, rel=1e-12)


def test_window_regret_tolerance_is_strict():
    """1e-9 exactly (representable here: 0 +- 1e-9) is outside the "same ratio" tolerance."""
    grid = np.array([0.0, 0.5, 1.0])
    g = np.array([[1.0, 1.2, 1.4]])
    # r* = 0 (best 1.0) and r = 1e-9: not r*, so interpolated in [0, 0.5]
    got = window_regret(grid, g, np.array([1e-9]), np.array([0.0]), np.array([1.0]))
    assert got[0] != 0.0
    assert got[0] == pytest.approx(0.2 * 1e-9 / 0.5, rel=1e-6)
    # r = -1e-9 is 1e-9 below the first grid point: off the grid, undefined
    got = window_regret(grid, g, np.array([-1e-9]), np.array([0.5]), np.array([1.0]))
    assert np.isnan(got[0])


def test_window_regret_in_float64_whatever_the_inputs():
    """float32 grids and P99s are widened first: the interpolation is the float64 one."""
    grid32 = np.array([0.0, 0.3, 1.0], np.float32)
    g32 = np.array([[1.1, 1.3, 1.7]], np.float32)
    got = window_regret(grid32, g32, np.array([0.1]), np.array([1.0]), np.array([1.7]))
    gr = [float(v) for v in grid32]  # the float32 values, exactly, in float64
    lo, hi = float(g32[0, 0]), float(g32[0, 1])
    want = (lo + (hi - lo) * (0.1 - gr[0]) / (gr[1] - gr[0])) / 1.7 - 1.0
    assert got[0] == pytest.approx(want, rel=1e-14, abs=1e-15)
    # a grid point given in float32 is its float64 value: 0.3 is 1.2e-8 away from float32(0.3)
    got = window_regret(grid32, g32, np.array([float(grid32[1])]), np.array([1.0]), np.array([1.7]))
    assert got[0] == float(g32[0, 1]) / 1.7 - 1.0
    got = window_regret(grid32, g32, np.array([0.3]), np.array([1.0]), np.array([1.7]))
    assert got[0] != float(g32[0, 1]) / 1.7 - 1.0  # interpolated, not the grid point


def test_weighted_quantile_is_the_inverted_cdf():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    w = np.ones(4)
    # F(2) = 0.5 exactly: the smallest value whose cumulative weight reaches q
    assert weighted_quantile(x, w, 0.5) == 2.0
    assert weighted_quantile(x, w, 0.51) == 3.0
    assert weighted_quantile(x, w, 1.0) == 4.0
    assert weighted_quantile(x, w, 0.0) == 1.0
    assert weighted_quantile(x, np.array([0.0, 0.0, 2.0, 0.0]), 1.0) == 3.0
    assert weighted_quantile(x, np.array([3.0, 0.0, 0.0, 1.0]), 0.75) == 1.0
    assert math.isnan(weighted_quantile(x, np.zeros(4), 0.5))
    # all the weight on the last value; a total weight of exactly 1 (not "no weight")
    assert weighted_quantile(x, np.array([0.0, 0.0, 0.0, 1.0]), 0.5) == 4.0
    assert weighted_quantile(x, np.array([0.25, 0.25, 0.5, 0.0]), 0.5) == 2.0
    assert weighted_quantile(x, np.array([0.1, 0.1, 0.0, 0.0]), 0.75) == 2.0


def test_adaptivity_ci_checks_and_fields():
    s = np.array([1.0, 2.0, 3.0, 4.0])
    a = s / 2
    w = np.array([7, 7, 9, 9])  # window ids need not be 0..n-1
    for bad in ({"level": 1.5}, {"level": -0.1}, {"q": 1.5}, {"q": -0.1}, {"n_boot": -1}):
        with pytest.raises(ConfigError):
            adaptivity_ci(s, a, w, **bad)
    with pytest.raises(ConfigError, match="level must be in"):
        adaptivity_ci(s, a, w, level=2.0)
    with pytest.raises(ConfigError, match="q must be in"):
        adaptivity_ci(s, a, w, q=2.0)
    with pytest.raises(ConfigError, match=r"got 3, 3, 2$") as info:
        adaptivity_ci(s[:3], a[:3], w[:2])
    assert info.value.hint == "pass the two policies' sojourns of the same requests"
    with pytest.raises(ConfigError, match="got 0, 0, 0"):
        adaptivity_ci(s[:0], a[:0], w[:0])
    with pytest.raises(ConfigError) as info:
        adaptivity_ci(s, a, w, n_boot=0)
    assert info.value.hint == "set n_boot > 0"
    ci = adaptivity_ci(s, a, w, q=0.5, n_boot=7, level=0.8, seed=3)
    # q = 0.5 of four equal weights: the second value (inverted CDF)
    assert ci.static_p99_ms == 2000.0 and ci.adaptive_p99_ms == 1000.0
    assert ci.value == 0.5 and ci.lo == 0.5 and ci.hi == 0.5
    assert (ci.level, ci.n_boot, ci.n_windows) == (0.8, 7, 2)
    # the edges of both ranges are accepted
    adaptivity_ci(s, a, w, q=1.0, level=1.0, n_boot=1)
    adaptivity_ci(s, a, w, q=0.0, level=0.0, n_boot=1)


def test_adaptivity_ci_two_window_replicates_by_hand():
    """Two windows A, B: a replicate draws AA, AB/BA or BB; at level 1 the CI is their range."""
    s = np.array([1.0, 2.0, 10.0, 20.0])
    a = np.array([1.0, 1.0, 5.0, 20.0])
    w = np.array([0, 0, 1, 1])
    ci = adaptivity_ci(s, a, w, q=0.5, n_boot=200, level=1.0)
    # AA: 1 - 1/1 = 0; BB: 1 - 5/10 = 0.5; AB: s 1,2,10,20 -> 2; a 1,1,5,20 -> 1: 0.5
    assert ci.lo == 0.0 and ci.hi == 0.5
    assert ci.value == 0.5 and ci.n_windows == 2


def test_adaptivity_ci_defaults():
    """n_boot = 1000 and seed = 0 by default (the defaults the reports quote)."""
    rng = np.random.default_rng(4)
    w = np.repeat(np.arange(30), 20)
    s = rng.exponential(1.0, 600)
    a = s * rng.uniform(0.5, 1.0, 30)[w]
    ci = adaptivity_ci(s, a, w)
    assert (ci.n_boot, ci.level, ci.n_windows) == (1000, 0.95, 30)
    assert ci == adaptivity_ci(s, a, w, n_boot=1000, seed=0, q=0.99, level=0.95)
    assert ci != adaptivity_ci(s, a, w, n_boot=1000, seed=1)  # the data tell seeds apart


def test_sensitivity_table_by_hand():
    labels = pl.DataFrame(
        {
            "window": [4, 5],
            "r_star": [0.5, 0.25],
            "p99_ms": [1.0, 2.0],
            "flatness": [0.1, 0.3],
            "p99_ms_r000": [3.0, 2.5],
            "p99_ms_r050": [1.0, 2.2],
            "p99_ms_r100": [1.2, 3.0],
            "p99_ms_r007": [99.0, 99.0],  # not in the grid: unused
        }
    )
    grid = np.array([0.0, 0.5, 1.0])
    t = sensitivity_table(labels, np.array([1.0, 0.0]), grid)
    assert t.columns == ["window", "ratio", "r_star", "ratio_distance", "regret", "flatness"]
    assert t["window"].to_list() == [4, 5]
    assert t["ratio"].to_list() == [1.0, 0.0] and t["ratio"].dtype == pl.Float64
    assert t["r_star"].to_list() == [0.5, 0.25]
    assert t["ratio_distance"].to_list() == [0.5, 0.25]
    # window 4 at r = 1.0: 1.2 / 1.0 - 1; window 5 at r = 0: 2.5 / 2.0 - 1
    np.testing.assert_allclose(t["regret"].to_numpy(), [0.2, 0.25], rtol=1e-12)
    assert t["flatness"].to_list() == [0.1, 0.3]
    # integer ratios (a static schedule written as 0/1) are still float distances
    t2 = sensitivity_table(labels, np.array([0, 1]), grid)
    assert t2["ratio"].dtype == pl.Float64
    np.testing.assert_allclose(t2["regret"].to_numpy(), [2.0, 0.5], rtol=1e-12)
    # the column of grid point r is named by round(r * 100): 0.07 -> p99_ms_r007
    t3 = sensitivity_table(labels, np.array([0.07, 0.07]), np.array([0.07, 0.5]))
    np.testing.assert_allclose(t3["regret"].to_numpy(), [98.0, 48.5], rtol=1e-12)


def test_sensitivity_table_of_labels_without_a_grid_reads_each_windows_points():
    """Exact on an evaluated point, interpolated inside a cell without a cliff, else NaN."""
    lists = {c: pl.List(pl.Float64) for c in ("evals_r", "evals_p99_ms")}
    t = pl.DataFrame(
        {
            "window": [0, 1, 2, 3],
            "r_star": [0.3, 0.5, 0.2, float("nan")],
            "p99_ms": [2.0, 4.0, 1.0, float("nan")],
            "flatness": [0.1, 0.0, 0.2, float("nan")],
            "evals_r": [[0.2, 0.3, 0.4], [0.4, 0.5, 0.6], [0.1, 0.2, 0.3], []],
            "evals_p99_ms": [[3.0, 2.0, 2.5], [9.0, 4.0, 4.4], [1.2, 1.0, 5.0], []],
        },
        schema_overrides=lists,
    )
    ratios = np.array([0.4, 0.45, 0.25, 0.5])
    st = sensitivity_table(t, ratios, np.array([]))
    reg = st["regret"].to_numpy()
    assert reg[0] == pytest.approx(2.5 / 2.0 - 1)  # an evaluated point: exact
    assert np.isnan(reg[1])  # 9.0 against 4.0: a cliff in the cell, no line
    assert np.isnan(reg[2])  # 1.0 against 5.0 (over CLIFF_FACTOR): undefined
    assert np.isnan(reg[3])  # an empty window
    st2 = sensitivity_table(t, np.array([0.35, 0.55, 0.15, 0.5]), np.array([]))
    reg2 = st2["regret"].to_numpy()
    assert reg2[0] == pytest.approx((2.0 + 0.5 * 0.5) / 2.0 - 1)  # halfway 2.0 -> 2.5
    assert reg2[1] == pytest.approx((4.0 + 0.5 * 0.4) / 4.0 - 1)
    assert reg2[2] == pytest.approx((1.2 - 0.5 * 0.2) / 1.0 - 1)
    assert st["ratio_distance"].to_list() == pytest.approx([0.1, 0.05, 0.05, float("nan")],
                                                            nan_ok=True)  # fmt: skip
