"""Trace scaling (``plan/scale.py``) on four- and two-request traces worked out by hand
(issue 16, item 4): every clone's shifted and wrapped arrival time, its user ids, the rows it
copies, the peak and mean rates, and the precise errors.
"""

from __future__ import annotations

import importlib

import numpy as np
import pyarrow as pa
import pytest

from helm_plan import trace
from helm_plan.errors import ConfigError, TraceError
from helm_plan.plan.scale import MAX_FACTOR, ScaleBy, factor_for, peak_qps, scale

S = importlib.import_module("helm_plan.plan.scale")  # the package re-exports scale()


def _table(ts, users, items):
    off = np.zeros(len(ts) + 1, np.int64)
    np.cumsum([len(x) for x in items], out=off[1:])
    vals = np.array([v for x in items for v in x], np.int64)
    return trace.make_table(np.asarray(ts, float), np.asarray(users), off, vals,
                            np.full(len(ts), 4))  # fmt: skip


# four requests at 10, 11, 12, 14 s by users 0, 1, 0, 2; items {1, 2, 3}
TS = [10.0, 11.0, 12.0, 14.0]
USERS = [0, 1, 0, 2]
ITEMS = [[1, 2], [2], [3], []]


def four():
    return _table(TS, USERS, ITEMS)


# ---- peak and mean rates ---------------------------------------------------------------------


def test_peak_qps_by_hand():
    assert peak_qps(np.array([]), 1.0) == 0.0
    assert peak_qps(np.array([5.0]), 2.0) == 0.5  # one request in one 2 s window
    # windows of 2.5 s: [0, 2.5) holds 3, [2.5, 5) 2, [5, 7.5) 2
    assert peak_qps(np.array([0.0, 1.0, 2.4, 2.6, 4.9, 5.1, 6.0]), 2.5) == pytest.approx(1.2)
    # windows need not start at 0: 10.x holds 3
    assert peak_qps(np.array([10.1, 10.2, 10.3, 11.5, 12.1, 12.2]), 1.0) == 3.0
    # a trace shorter than a window: its mean rate, 3 requests over 1 s
    assert peak_qps(np.array([0.0, 0.5, 1.0]), 2.0) == 3.0
    assert peak_qps(np.array([0.0, 0.5]), 2.0) == 4.0  # 2 requests over 0.5 s
    # spanning exactly one window is not shorter: windows [0, 2) 2 and [2, 4) 1
    assert peak_qps(np.array([0.0, 1.0, 2.0]), 2.0) == 1.0
    # windows before 0: [-4, -3) holds 2
    assert peak_qps(np.array([-3.5, -3.2, -1.0, 0.5]), 1.0) == 2.0


def test_mean_qps_by_hand():
    assert S._mean_qps(np.array([0.0, 1.0, 2.0, 4.0])) == 1.0  # 4 requests over 4 s
    assert S._mean_qps(np.array([3.0, 5.0])) == 1.0
    assert S._mean_qps(np.array([0.0, 0.5])) == 4.0
    assert np.isnan(S._mean_qps(np.array([3.0])))
    assert np.isnan(S._mean_qps(np.array([3.0, 3.0])))


def test_factor_for_by_hand():
    # 1 s windows: the busiest holds 1 request -> 1 qps; 2 s windows: [10, 12) holds 2 -> 1 qps;
    # 3 s windows: [9, 12) holds 2, [12, 15) holds 2 -> 2/3 qps
    t = four()
    assert factor_for(t, peak_qps_target=5.0, window_s=1.0) == pytest.approx(5.0)
    assert factor_for(t, peak_qps_target=5.0, window_s=3.0) == pytest.approx(7.5)
    with pytest.raises(ConfigError, match="peak_qps must be positive, got -1"):
        factor_for(t, peak_qps_target=-1.0, window_s=1.0)
    with pytest.raises(ConfigError, match="^the trace has no requests to scale$") as e:
        factor_for(t.slice(0, 0), peak_qps_target=5.0, window_s=1.0)
    assert e.value.hint == "pass a non-empty trace"


# ---- scale: the checks -----------------------------------------------------------------------


def test_scale_errors_are_precise():
    t = four()
    with pytest.raises(ConfigError, match="^scale factor must be positive, got -2"):
        scale(t, -2.0)
    big = r"^scale factor must be finite and <= 10000, got 10000\.5$"
    with pytest.raises(ConfigError, match=big) as e:
        scale(t, 10_000.5)
    assert e.value.hint == "pass a smaller --scale or --peak-qps"
    with pytest.raises(ConfigError, match="^scale factor must be finite, got inf$"):
        scale(t, float("inf"))
    with pytest.raises(ConfigError, match="^unknown scaling 'rows'$") as e:
        scale(t, 2.0, by="rows")
    assert e.value.hint == "use users or time"
    with pytest.raises(ConfigError, match="^the trace has no requests to scale$") as e:
        scale(t.slice(0, 0), 2.0)
    assert e.value.hint == "pass a non-empty trace"
    assert MAX_FACTOR == 10_000.0
    s, info = scale(t, MAX_FACTOR, by="time")  # the largest factor is accepted
    assert info.factor == MAX_FACTOR and s.num_rows == 4


def test_user_ids_too_large_to_clone():
    # stride = max id + 1 = 2**61; two clones need ids up to 2**62 − 1: refused (>= 2**62)
    t = _table([0.0, 1.0], [0, 2**61 - 1], [[1], [2]])
    with pytest.raises(ConfigError, match="^user ids too large to clone disjointly$") as e:
        scale(t, 2.0)
    assert e.value.hint == "remap user ids to a dense range first"
    s, _ = scale(t, 1.0)  # one clone: nothing to shift
    assert s.column("user_id").to_pylist() == [0, 2**61 - 1]
    t = _table([0.0, 1.0], [0, 2**61 - 2], [[1], [2]])  # stride 2**61 − 1: fits
    s, _ = scale(t, 2.0)
    assert max(s.column("user_id").to_pylist()) == 2 * (2**61 - 1) - 1


# ---- scale by time ---------------------------------------------------------------------------


def test_time_scaling_by_hand():
    s, info = scale(four(), 2.0, by="time", window_s=1.0)
    # every gap halved from the first arrival (10 s): 10, 10.5, 11, 12
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [10.0, 10.5, 11.0, 12.0])
    assert s.column("user_id").to_pylist() == USERS
    assert s.column("new_items").to_pylist() == ITEMS
    assert s.column_names == four().column_names
    assert info.method == "time" and info.factor == 2.0 and type(info.factor) is float
    assert (info.qps_before, info.qps_after) == (1.0, 2.0)  # 4 requests over 4 s, then 2 s
    assert (info.peak_qps_before, info.peak_qps_after) == (1.0, 2.0)  # 1 s windows
    assert (info.users_before, info.users_after, info.items) == (3, 3, 3)
    _, info = scale(four(), 2.0, by=ScaleBy.TIME, window_s=2.0)
    assert info.method == "time"
    assert (info.peak_qps_before, info.peak_qps_after) == (1.0, 1.5)  # [10, 12) 2; [10, 12) 3


# ---- scale by users --------------------------------------------------------------------------


def test_users_scaling_two_clones_by_hand():
    s, info = scale(four(), 2, window_s=1.0)
    # span 4 s, period = span + span / 3 = 16/3; clone 1 shifted by period / 2 = 8/3, wrapped:
    # 10 + (0, 1, 2, 4) + 8/3 mod 16/3 -> 12 2/3, 13 2/3, 14 2/3, 11 1/3; its ids + stride 3
    want = sorted(
        [
            (10.0, 0, 0),
            (11.0, 1, 1),
            (12.0, 2, 0),
            (14.0, 3, 2),
            (10 + 8 / 3, 0, 3),
            (11 + 8 / 3, 1, 4),
            (12 + 8 / 3, 2, 3),
            (10 + 4 / 3, 3, 5),
        ]
    )  # fmt: skip  (time, source row, user id)
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [w[0] for w in want])
    assert s.column("user_id").to_pylist() == [w[2] for w in want]
    assert s.column("new_items").to_pylist() == [ITEMS[w[1]] for w in want]
    assert s.column("n_candidates").to_pylist() == [4] * 8
    assert info.method == "users" and info.factor == 2.0
    assert (info.users_before, info.users_after, info.items) == (3, 6, 3)
    assert info.qps_before == 1.0
    assert info.qps_after == pytest.approx(8 / (14 + 2 / 3 - 10))
    # 1 s windows after: [10,11) 1, [11,12) 2, [12,13) 2, [13,14) 1, [14,15) 2
    assert (info.peak_qps_before, info.peak_qps_after) == (1.0, 2.0)


def test_users_scaling_ties_keep_clone_order_and_two_requests_span():
    # two requests 3 s apart: period = 3 + 3/1 = 6; clone 1 shifted by 3: (3, 0) -> ties with
    # clone 0 at 0 and 3, where clone 0 comes first
    t = _table([0.0, 3.0], [0, 0], [[7], [8]])
    s, info = scale(t, 2.0)
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [0.0, 0.0, 3.0, 3.0])
    assert s.column("user_id").to_pylist() == [0, 1, 0, 1]
    assert s.column("new_items").to_pylist() == [[7], [8], [8], [7]]
    assert info.users_after == 2
    # half a second apart: period = 0.5 + 0.5 = 1; clone 1 shifted by 0.5: (0.5, 0)
    t = _table([0.0, 0.5], [3, 1], [[7], [8]])
    s, _ = scale(t, 2.0)
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [0.0, 0.0, 0.5, 0.5])
    assert s.column("user_id").to_pylist() == [3, 5, 1, 7]  # stride 4
    assert s.schema.field("user_id").type == pa.int64()


def test_scale_defaults_users_10s_windows_seed_0():
    # 10 s windows: [0, 10) holds 3 -> 0.3 qps (not the mean 5/25: the trace spans 25 s)
    t = _table([0.0, 5.0, 9.5, 10.5, 25.0], [0, 1, 2, 0, 1], [[1]] * 5)
    s, info = scale(t, 1.0)
    assert info.method == "users" and info.peak_qps_before == 0.3
    assert s.column("user_id").to_pylist() == [0, 1, 2, 0, 1]
    # the fractional clone of seed 0 keeps users 1 and 2 (draws 0.64, 0.27, 0.04 < 0.5)
    keep = np.flatnonzero(np.random.default_rng(0).random(3) < 0.5)
    assert keep.tolist() == [1, 2]
    _, info = scale(four(), 1.5)
    assert info.users_after == 5


def test_fractional_clone_keeps_the_seeded_users():
    # 40 users, one request each; the fractional clone keeps exactly the users whose draw is
    # under the fraction (a share of 0.3 here)
    n = 40
    t = _table(np.arange(n) * 1.0, np.arange(n), [[1]] * n)
    s, _ = scale(t, 1.3, seed=7)
    uid = np.array(s.column("user_id").to_pylist())
    clone = np.sort(uid[uid >= n]) - n
    want = np.flatnonzero(np.random.default_rng(7).random(n) < 0.3)
    assert 0 < len(want) < n
    np.testing.assert_array_equal(clone, want)
    # each kept user's request is shifted by period / 1.3, period = 39 + 1 = 40, wrapped
    ts = np.array(s.column("ts_s").to_pylist())
    np.testing.assert_allclose(np.sort(ts[uid >= n]), np.sort((want + 40 / 1.3) % 40))


def test_users_scaling_one_request():
    # no span: the period is 1 s; three clones shifted by 0, 1/3, 2/3 s
    t = _table([5.0], [4], [[1]])
    s, info = scale(t, 3.0)
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [5.0, 5 + 1 / 3, 5 + 2 / 3])
    assert s.column("user_id").to_pylist() == [4, 9, 14]  # stride 5
    assert info.users_after == 3 and np.isnan(info.qps_before)
    assert info.qps_after == pytest.approx(3 / (2 / 3))


def test_fractional_users_scaling_by_hand():
    seed = 2
    s, info = scale(four(), 1.5, seed=seed)
    # the fractional clone (the second, shifted by period / 1.5 = 32/9) keeps the users a
    # seeded draw puts under 0.5, one uniform per distinct user (0, 1, 2)
    keep = np.array([0, 1, 2])[np.random.default_rng(seed).random(3) < 0.5]
    assert 0 < len(keep) < 3  # the seed makes a real share
    period, shift = 16 / 3, 16 / 3 / 1.5
    want = [(t, r, u) for r, (t, u) in enumerate(zip(TS, USERS, strict=True))]
    want += [(10 + (t - 10 + shift) % period, r, u + 3)
             for r, (t, u) in enumerate(zip(TS, USERS, strict=True)) if u in keep]  # fmt: skip
    want.sort()
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [w[0] for w in want])
    assert s.column("user_id").to_pylist() == [w[2] for w in want]
    assert s.column("new_items").to_pylist() == [ITEMS[w[1]] for w in want]
    assert info.users_after == 3 + len(keep) and info.factor == 1.5


def test_whole_factor_up_to_rounding_has_no_fractional_clone():
    s, _ = scale(four(), 2.0 + 1e-13)
    assert s.num_rows == 8
    s, _ = scale(four(), 1.0)
    assert s.column("ts_s").to_pylist() == TS and s.column("user_id").to_pylist() == USERS


def test_a_share_too_small_to_keep_anyone_is_an_empty_scaled_trace():
    # K = 0.001: the only clone is fractional, and none of the 3 users draws under 0.001
    assert not (np.random.default_rng(0).random(3) < 0.001).any()
    with pytest.raises(TraceError, match=r"^scaled trace is empty \(0 requests\)$"):
        scale(four(), 0.001)


def test_a_factor_of_at_most_1e_12_is_an_empty_scaled_trace_too():
    # K <= 1e-12 has no whole clone and a fraction under the rounding threshold: it used to
    # leave no clone at all and crash in numpy ("need at least one array to concatenate")
    for k in (1e-12, 5e-13):
        with pytest.raises(TraceError, match=r"^scaled trace is empty \(0 requests\)$"):
            scale(four(), k)
