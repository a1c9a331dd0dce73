"""The observation vector entry by entry, from hand-worked raw windows (issue 16, item 4).

Each raw value is chosen so its feature has a closed form: a rate of
``e^8 - 1`` requests/s is ``log1p = 8``, so ``log_rate`` is exactly 1; a P99 of
``e^-4`` of the SLO is ``-4 / 4 = -1``; and so on. Clipping is checked on
both sides of every bound, and the neutral value of every missing entry is
written out from the module's contract (no rate, no hits, P99 at the SLO,
an even split, a 10 s window).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helm_plan.controller.features import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    RAW_KEYS,
    check_version,
    observation,
)
from helm_plan.errors import ConfigError

E = math.e


def _at(raw: dict, name: str) -> float:
    return float(observation(raw)[FEATURE_NAMES.index(name)])


def test_empty_window_is_the_neutral_vector():
    # no rate (log1p 0 = 0), burst 1 (log 1 = 0), CV 1 (1 / 5), no history, no hits,
    # P99 at the SLO (log 1 = 0), r = 0.5, no ghost gains
    want = dict.fromkeys(FEATURE_NAMES, 0.0) | {"interarrival_cv": 0.2, "ratio": 0.5}
    x = observation({})
    assert x.dtype == np.float64 and x.shape == (N_FEATURES,)
    np.testing.assert_array_equal(x, [want[n] for n in FEATURE_NAMES])
    # NaN, infinite and None entries are missing values too
    for bad in (math.nan, math.inf, -math.inf, None):
        np.testing.assert_array_equal(observation(dict.fromkeys(RAW_KEYS, bad)), x)


CASES = [
    # (raw key, raw value, feature, expected)
    ("arrival_rate_rps", math.expm1(8.0), "log_rate", 1.0),
    ("arrival_rate_rps", math.expm1(2.0), "log_rate", 0.25),
    ("arrival_rate_rps", -5.0, "log_rate", 0.0),  # a negative rate counts as none
    ("rate_trend", 0.5, "rate_trend", 0.5),
    ("rate_trend", -0.75, "rate_trend", -0.75),
    ("rate_trend", -2.0, "rate_trend", -1.0),
    ("rate_trend", 5.0, "rate_trend", 3.0),
    ("rate_trend", 2.5, "rate_trend", 2.5),
    ("burst_score", E**2, "log_burst", 2.0),
    ("burst_score", E**-1.5, "log_burst", -1.5),
    ("burst_score", E**5, "log_burst", 3.0),
    ("burst_score", 0.0, "log_burst", -3.0),  # floored at 1e-3, log = -6.9, clipped
    ("burst_score", 2e-3, "log_burst", -3.0),
    ("interarrival_cv", 2.5, "interarrival_cv", 0.5),
    ("interarrival_cv", 4.0, "interarrival_cv", 0.8),
    ("interarrival_cv", 7.0, "interarrival_cv", 1.0),
    ("interarrival_cv", -1.0, "interarrival_cv", 0.0),
    ("cold_user_share", 0.25, "cold_share", 0.25),
    ("cold_user_share", 1.5, "cold_share", 1.0),
    ("cold_user_share", -0.5, "cold_share", 0.0),
    ("hist_len_mean", math.expm1(10.0), "log_hist_mean", 1.0),
    ("hist_len_mean", math.expm1(5.0), "log_hist_mean", 0.5),
    ("hist_len_mean", -3.0, "log_hist_mean", 0.0),
    ("hist_len_p95", math.expm1(3.0), "log_hist_p95", 0.3),
    ("hist_len_p95", -3.0, "log_hist_p95", 0.0),
    ("emb_hit_rate", 0.7, "emb_hit", 0.7),
    ("emb_hit_rate", 1.2, "emb_hit", 1.0),
    ("emb_hit_rate", -0.1, "emb_hit", 0.0),
    ("kv_reuse_rate", 0.4, "kv_reuse", 0.4),
    ("kv_reuse_rate", 1.3, "kv_reuse", 1.0),
    ("kv_reuse_rate", -0.2, "kv_reuse", 0.0),
    ("h2d_util", 2.5, "h2d_util", 2.5),
    ("h2d_util", 4.0, "h2d_util", 3.0),
    ("h2d_util", -1.0, "h2d_util", 0.0),
    ("p99_slo", E**-4, "log_p99_slo", -1.0),
    ("p99_slo", E**2, "log_p99_slo", 0.5),
    ("p99_slo", E**6, "log_p99_slo", 1.0),  # log clipped at 4
    ("p99_slo", E**-12, "log_p99_slo", -2.5),  # log clipped at -10
    ("p99_slo", 0.0, "log_p99_slo", -2.5),  # floored at 1e-6: log = -13.8, clipped
    ("ratio", 0.3, "ratio", 0.3),
    ("ratio", 0.0, "ratio", 0.0),
    ("ratio", 1.7, "ratio", 1.0),
    ("ratio", -0.2, "ratio", 0.0),
    ("ghost_emb_gain_up", 0.05, "ghost_emb_up", 0.5),
    ("ghost_emb_gain_up", 0.5, "ghost_emb_up", 3.0),
    ("ghost_emb_gain_up", -0.5, "ghost_emb_up", -3.0),
    ("ghost_emb_loss_down", -0.12, "ghost_emb_down", -1.2),
    ("ghost_emb_loss_down", 0.4, "ghost_emb_down", 3.0),
    ("ghost_emb_loss_down", -0.4, "ghost_emb_down", -3.0),
    ("ghost_kv_gain_down", 0.21, "ghost_kv_down", 2.1),
    ("ghost_kv_gain_down", 0.31, "ghost_kv_down", 3.0),
    ("ghost_kv_gain_down", -0.31, "ghost_kv_down", -3.0),
    ("ghost_kv_loss_up", -0.07, "ghost_kv_up", -0.7),
    ("ghost_kv_loss_up", 0.9, "ghost_kv_up", 3.0),
    ("ghost_kv_loss_up", -0.9, "ghost_kv_up", -3.0),
    # net seconds over the default 10 s window: 10 * 1.5 / 10
    ("ghost_net_up_s", 1.5, "ghost_net_up", 1.5),
    ("ghost_net_up_s", 4.0, "ghost_net_up", 3.0),
    ("ghost_net_up_s", -4.0, "ghost_net_up", -3.0),
    ("ghost_net_down_s", -2.0, "ghost_net_down", -2.0),
    ("ghost_net_down_s", 4.0, "ghost_net_down", 3.0),
    ("ghost_net_down_s", -4.0, "ghost_net_down", -3.0),
]


@pytest.mark.parametrize(("key", "value", "feature", "want"), CASES)
def test_one_raw_entry_maps_to_its_feature_and_nothing_else(key, value, feature, want):
    x = observation({key: value})
    neutral = observation({})
    i = FEATURE_NAMES.index(feature)
    assert x[i] == pytest.approx(want, abs=1e-12)
    others = np.arange(N_FEATURES) != i
    np.testing.assert_array_equal(x[others], neutral[others])


def test_clip_bounds_are_inclusive_and_exact():
    # values exactly on a bound pass through unchanged
    assert _at({"rate_trend": -1.0}, "rate_trend") == -1.0
    assert _at({"rate_trend": 3.0}, "rate_trend") == 3.0
    assert _at({"interarrival_cv": 5.0}, "interarrival_cv") == 1.0
    assert _at({"ghost_emb_gain_up": 0.3}, "ghost_emb_up") == pytest.approx(3.0)


def test_net_seconds_are_a_share_of_the_window():
    # 10 * 0.3 s / 2 s = 1.5 ; 10 * -0.1 s / 0.5 s = -2
    raw = {"window_s": 2.0, "ghost_net_up_s": 0.3, "ghost_net_down_s": -0.2}
    assert _at(raw, "ghost_net_up") == pytest.approx(1.5)
    assert _at(raw, "ghost_net_down") == pytest.approx(-1.0)
    raw = {"window_s": 0.5, "ghost_net_up_s": -0.1, "ghost_net_down_s": 0.05}
    assert _at(raw, "ghost_net_up") == pytest.approx(-2.0)
    assert _at(raw, "ghost_net_down") == pytest.approx(1.0)
    # a missing window is 10 s
    assert _at({"window_s": math.nan, "ghost_net_up_s": 0.5}, "ghost_net_up") == 0.5


def test_a_full_window_by_hand():
    raw = {
        "arrival_rate_rps": math.expm1(4.0), "rate_trend": 0.2, "burst_score": E,
        "interarrival_cv": 1.5, "cold_user_share": 0.1, "hist_len_mean": math.expm1(2.0),
        "hist_len_p95": math.expm1(7.0), "emb_hit_rate": 0.9, "kv_reuse_rate": 0.6,
        "h2d_util": 0.35, "p99_slo": E**-2, "ratio": 0.65, "ghost_emb_gain_up": 0.01,
        "ghost_emb_loss_down": 0.02, "ghost_kv_gain_down": 0.03, "ghost_kv_loss_up": 0.04,
        "ghost_net_up_s": 0.2, "ghost_net_down_s": -0.1, "window_s": 4.0,
    }  # fmt: skip
    want = [0.5, 0.2, 1.0, 0.3, 0.1, 0.2, 0.7, 0.9, 0.6, 0.35, -0.5, 0.65,
            0.1, 0.2, 0.3, 0.4, 0.5, -0.25]  # fmt: skip
    np.testing.assert_allclose(observation(raw), want, rtol=0, atol=1e-12)


def test_integer_raw_values_are_read_as_numbers():
    assert _at({"ratio": 1}, "ratio") == 1.0
    assert _at({"interarrival_cv": 5}, "interarrival_cv") == 1.0


def test_check_version_accepts_the_current_version_in_any_type():
    check_version(FEATURE_VERSION, "ctl.npz")
    check_version(int(FEATURE_VERSION), "ctl.npz")  # read back from npz as a number
    check_version(np.str_(FEATURE_VERSION), "ctl.npz")
    with pytest.raises(ConfigError) as e:
        check_version("2", "old.npz")
    assert str(e.value) == (
        f"old.npz was trained on feature version 2, this helm-plan computes version "
        f"{FEATURE_VERSION}"
    )
    assert e.value.hint.startswith("retrain it with `helm-plan train`")
    assert e.value.hint.endswith("shipped `controller`)")
