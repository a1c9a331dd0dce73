"""The observation vector entry by entry, the measured curves and the curve state, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helm_plan.controller.features import (
    CURVE_INDEX,
    CURVE_POINTS,
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    RAW_KEYS,
    U_CAP,
    CurveState,
    check_version,
    observation,
    p99_gain,
    saved_share,
)
from helm_plan.errors import ConfigError

E = math.e


def _at(raw: dict, name: str) -> float:
    return float(observation(raw)[FEATURE_NAMES.index(name)])


def test_empty_window_is_the_neutral_vector():
    # idle, P99 at the SLO (log 1 = 0), every request in the SLO, burst 1, CV 1 (1 / 5),
    # no history, no hits, r = 0.5, no ghost gains, curve entries left at 0
    want = dict.fromkeys(FEATURE_NAMES, 0.0) | {"interarrival_cv": 0.2, "ratio": 0.5}
    x = observation({})
    assert x.dtype == np.float64 and x.shape == (N_FEATURES,)
    np.testing.assert_array_equal(x, [want[n] for n in FEATURE_NAMES])
    for bad in (math.nan, math.inf, -math.inf, None):
        np.testing.assert_array_equal(observation(dict.fromkeys(RAW_KEYS, bad)), x)


CASES = [
    ("utilisation", 0.75, "utilisation", 0.75),
    ("utilisation", 5.0, "utilisation", 2.0),
    ("utilisation", -1.0, "utilisation", 0.0),
    ("p99_slo", E**-4, "log_p99_slo", -2.0),
    ("p99_slo", E**1, "log_p99_slo", 0.5),
    ("p99_slo", E**9, "log_p99_slo", 1.0),
    ("p99_slo", 0.0, "log_p99_slo", -3.0),
    ("slo_attainment", 0.875, "slo_miss", 0.125),
    ("slo_attainment", 1.5, "slo_miss", 0.0),
    ("rate_trend", -2.0, "rate_trend", -1.0),
    ("rate_trend", 5.0, "rate_trend", 3.0),
    ("burst_score", E**2, "log_burst", 2.0),
    ("burst_score", 0.0, "log_burst", -3.0),
    ("interarrival_cv", 2.5, "interarrival_cv", 0.5),
    ("interarrival_cv", 9.0, "interarrival_cv", 1.0),
    ("cold_user_share", 0.25, "cold_share", 0.25),
    ("emb_hit_rate", 1.5, "emb_hit", 1.0),
    ("kv_reuse_rate", 0.5, "kv_reuse", 0.5),
    ("h2d_util", 4.0, "h2d_util", 3.0),
    ("ratio", 0.3, "ratio", 0.3),
    ("ratio", -0.5, "ratio", 0.0),
]


@pytest.mark.parametrize("key,value,feature,want", CASES)
def test_one_raw_entry_maps_to_its_feature_and_nothing_else(key, value, feature, want):
    base = observation({})
    x = observation({key: value})
    i = FEATURE_NAMES.index(feature)
    assert x[i] == pytest.approx(want, abs=1e-12)
    others = np.delete(np.arange(N_FEATURES), i)
    np.testing.assert_array_equal(x[others], base[others])


def test_histories_are_a_share_of_max_seq_len():
    raw = {"hist_len_mean": 512.0, "hist_len_p95": 4096.0, "max_seq_len": 2048.0}
    assert _at(raw, "hist_fill") == 0.25 and _at(raw, "hist_tail") == 1.0  # clipped at 1


def test_net_seconds_are_a_share_of_the_busy_time():
    raw = {"ghost_net_up_s": 0.05, "ghost_net_down_s": -0.5, "busy_s": 2.0}
    assert _at(raw, "ghost_net_up") == pytest.approx(0.25)  # 10 · 0.05 / 2
    assert _at(raw, "ghost_net_down") == -2.5
    assert _at(raw | {"busy_s": 0.0}, "ghost_net_up") == 0.0  # idle: nothing to share


def test_saved_share_by_hand():
    emb, kv = np.array([0.0, 100.0, 200.0]), np.array([50.0, 25.0, 0.0])
    np.testing.assert_allclose(saved_share(emb, kv, 0.01, 0.04, 4.0), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(saved_share(emb, kv, 0.01, 0.04, 0.0), np.zeros(CURVE_POINTS))


def _brute_p99_gain(svc, soj, k0, window_s, slots, saved):
    """Per ratio, written out: each request's service less what it saved at the served ratio
    plus what it saves at r; waits scaled by s²(1 − u)/(1 − s·u); then P99s."""
    busy = svc.sum()
    u = min(busy / (window_s * slots), U_CAP)
    p = []
    for k in range(saved.shape[1]):
        new = [max(svc[i] + saved[i, k0] - saved[i, k], 0.0) for i in range(len(svc))]
        s = sum(new) / busy
        f = s * s * (1 - u) / (1 - min(s * u, U_CAP))
        p.append(np.percentile([new[i] + (soj[i] - svc[i]) * f for i in range(len(svc))], 99))
    return np.log(p[k0] / np.array(p))


def test_p99_gain_against_a_brute_force():
    rng = np.random.default_rng(3)
    n = 300
    svc = rng.gamma(2.0, 0.002, n)
    soj = svc + rng.exponential(0.004, n)
    # hits that grow with r for half the requests, shrink for the other half
    g = np.linspace(0, 1, CURVE_POINTS)
    saved = np.outer(rng.uniform(0, 0.001, n), g)
    saved[n // 2 :] = np.outer(rng.uniform(0, 0.001, n - n // 2), 1 - g)
    got = p99_gain(svc, soj, 0.37, 1.0, 2, saved)
    np.testing.assert_allclose(got, _brute_p99_gain(svc, soj, 37, 1.0, 2, saved), atol=1e-12)
    assert got[37] == 0.0
    # no queue and no saving anywhere: nothing to gain at any r
    np.testing.assert_array_equal(p99_gain(svc, svc, 0.5, 10.0, 1, np.zeros((n, 101))), 0.0)


def test_p99_gain_grows_with_load():
    # the same 2% service saving is worth more P99 when the queue is long (the M/G/1 factor)
    svc = np.full(100, 0.01)
    saved = np.zeros((100, CURVE_POINTS))
    saved[:, 100] = 0.0002
    light = p99_gain(svc, svc + 0.001, 0.0, 10.0, 1, saved)  # u = 0.1
    heavy = p99_gain(svc, svc + 0.05, 0.0, 1.1, 1, saved)  # u = 0.91
    assert 0 < light[100] < heavy[100]
    assert light[100] == pytest.approx(-math.log((0.0098 + 0.001 * 0.98**2 * 0.9 /
                                                  (1 - 0.98 * 0.1)) / 0.011))  # fmt: skip


def test_curve_state_ewma_optimum_and_features():
    c = CurveState(alpha=0.5, tol=0.01)
    x = observation({"ratio": 0.2})
    c.fill(x)  # nothing seen: the optimum is where the node is, nothing to gain
    assert list(x[CURVE_INDEX:]) == [0.2, 0.0, 0.0, 0.0]
    a = np.zeros(CURVE_POINTS)
    a[80] = 0.04
    c.update(a)
    np.testing.assert_array_equal(c.curve, a)  # the first window is taken whole
    b = np.zeros(CURVE_POINTS)
    b[30] = 0.06
    c.update(b)
    np.testing.assert_allclose(c.curve, 0.5 * a + 0.5 * b)
    c.update(None)  # a window with nothing measured changes nothing
    np.testing.assert_allclose(c.curve, 0.5 * a + 0.5 * b)
    assert c.optimum(0.2) == 0.3 and c.value(0.8) == pytest.approx(0.02)
    x = c.fill(observation({"ratio": 0.2}))
    np.testing.assert_allclose(x[CURVE_INDEX:], [0.3, 0.1, 0.3, 0.3])
    # within tol of the best: stay (0.8 is 0.01 under the best 0.03 at 0.3)
    c2 = CurveState(tol=0.011)
    c2.update(0.5 * a + 0.5 * b)
    assert c2.optimum(0.8) == 0.8 and c2.optimum(0.2) == 0.3
    c.reset()
    assert not c.seen and not c.curve.any()
    with pytest.raises(ConfigError, match="curve alpha"):
        CurveState(alpha=0.0)


def test_check_version():
    check_version(FEATURE_VERSION, "x")
    with pytest.raises(ConfigError, match="^old.npz was trained on feature version 1"):
        check_version("1", "old.npz")
