"""Scaling a trace: users (clones, same catalogue, bursts kept), users-shifted, or time
(compressed); by hand on four- and two-request traces, by counts, and against the target peak."""

from __future__ import annotations

import importlib

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_table

from helm_plan import trace
from helm_plan.errors import ConfigError, TraceError
from helm_plan.plan import factor_for, peak_qps, scale
from helm_plan.plan.scale import (
    MAX_FACTOR,
    PEAK_TOLERANCE,
    ScaleBy,
    clone_jitter,
    planned_times,
    solve_factor,
    users_plan,
)


def _per_user_gaps(t):
    ts = t.column("ts_s").to_numpy()
    u = t.column("user_id").to_numpy()
    out = {}
    for uid in np.unique(u):
        out[int(uid)] = np.diff(ts[u == uid])
    return out


def test_users_scaling_clones_disjoint_users_and_keeps_the_catalogue():
    t = small_table(600, n_users=50, n_items=300, rate_qps=40.0, seed=2)
    s, info = scale(t, 3.0, by="users", window_s=2.0)
    assert s.num_rows == 3 * t.num_rows
    assert info.users_after == 3 * info.users_before
    assert info.items == len(np.unique(np.concatenate(t.column("new_items").to_pylist())))
    items_after = np.unique(np.concatenate(s.column("new_items").to_pylist()))
    items_before = np.unique(np.concatenate(t.column("new_items").to_pylist()))
    np.testing.assert_array_equal(items_after, items_before)  # same catalogue, no new items
    assert info.qps_after == pytest.approx(3 * info.qps_before, rel=0.02)
    assert np.all(np.diff(s.column("ts_s").to_numpy()) >= 0)
    # every clone of a user keeps its revisit gaps
    g0, g = _per_user_gaps(t), _per_user_gaps(s)
    stride = int(t.column("user_id").to_numpy().max()) + 1
    for u, gaps in g0.items():
        for c in range(3):
            np.testing.assert_allclose(g[u + c * stride], gaps, atol=1e-9)


def test_fractional_users_scaling_takes_a_seeded_share():
    t = small_table(2000, n_users=400, n_items=300, rate_qps=40.0, seed=3)
    a, info = scale(t, 1.5, by="users", seed=1)
    b, _ = scale(t, 1.5, by="users", seed=1)
    assert a.equals(b)
    assert info.users_after == pytest.approx(1.5 * info.users_before, rel=0.1)


def test_time_scaling_divides_every_gap():
    t = small_table(300, rate_qps=20.0, seed=4)
    s, info = scale(t, 4.0, by="time", window_s=1.0)
    np.testing.assert_allclose(np.diff(s.column("ts_s").to_numpy()),
                               np.diff(t.column("ts_s").to_numpy()) / 4.0)  # fmt: skip
    assert info.users_after == info.users_before
    assert info.qps_after == pytest.approx(4 * info.qps_before)
    assert s.column("new_items").equals(t.column("new_items"))


def test_peak_qps_and_the_factor_for_a_target():
    ts = np.array([0.1, 0.2, 0.3, 1.5, 2.1, 2.2])  # windows of 1 s: 3, 1, 2 requests
    assert peak_qps(ts, 1.0) == 3.0
    t = small_table(5000, rate_qps=50.0, seed=5)  # 100 s
    k = factor_for(t, peak_qps_target=200.0, window_s=5.0)
    for by in ("users", "time"):
        s, info = scale(t, k, by=by, window_s=5.0)
        # the first guess lands near the target; solve_factor (below) lands on it
        assert info.peak_qps_after == pytest.approx(200.0, rel=0.15), by


def test_bad_scaling_is_a_clear_error():
    t = small_table(50)
    with pytest.raises(ConfigError, match="scale factor must be positive"):
        scale(t, 0.0)
    with pytest.raises(ConfigError, match="unknown scaling 'rows'"):
        scale(t, 2.0, by="rows")
    with pytest.raises(ConfigError, match="finite"):
        scale(t, float("inf"))


# ---- the traffic model: users scaling keeps the trace's bursts -------------------------------


def _bursty(seed=0):
    """120 s at 20 req/s with a 100 req/s burst in [50, 60): 300 users."""
    rng = np.random.default_rng(seed)
    ts = np.sort(np.concatenate([rng.uniform(0, 120, 2400), rng.uniform(50, 60, 1000)]))
    return ts, rng.integers(0, 300, len(ts)).astype(np.int64)


def _counts(t, window_s, n_w):
    return np.bincount(np.floor(t / window_s).astype(np.int64), minlength=n_w)


@pytest.mark.parametrize("k", [2.0, 3.0, 7.0])
def test_users_scaling_multiplies_the_rate_curve_at_every_window(k):
    # K whole clones on the trace's own timeline: each window holds K times the trace's
    # requests, give or take the requests a clone's offset (< jitter) carries over a boundary
    ts, users = _bursty()
    w = 10.0
    _, t, _ = users_plan(ts, users, k, seed=5, window_s=w)
    jitter = clone_jitter(w)
    n_w = int(np.floor(t.max() / w)) + 1
    got, base = _counts(t, w, n_w), _counts(ts, w, n_w)
    near_end = _counts(ts[np.mod(ts, w) >= w - jitter], w, n_w)  # may leave its window
    came_in = np.concatenate([[0], near_end[:-1]])  # from the window before
    assert np.all(got >= k * base - (k - 1) * near_end)
    assert np.all(got <= k * base + (k - 1) * came_in)
    # the burst window is planned at K times its height, but for what the clones' offsets
    # carry past its end (at most jitter / window of it); users-shifted flattens it
    _, t2, _ = users_plan(ts, users, k, seed=5, by="users-shifted", window_s=w)
    assert peak_qps(t, w) >= (1 - jitter / w) * k * peak_qps(ts, w)
    assert peak_qps(t2, w) < 0.8 * k * peak_qps(ts, w)


def test_users_scaling_keeps_every_clone_users_gaps_exactly():
    ts, users = _bursty(1)
    rows, t, uid = users_plan(ts, users, 3.0, seed=0, window_s=10.0)
    stride = int(users.max()) + 1
    for u in np.unique(users)[:50]:
        want = np.diff(ts[users == u])
        for c in range(3):
            mine = uid == u + c * stride
            np.testing.assert_allclose(np.diff(t[mine]), want, atol=1e-9)
            np.testing.assert_array_equal(np.flatnonzero(users == u), np.sort(rows[mine]))
        offsets = [t[uid == u + c * stride][0] - ts[users == u][0] for c in range(3)]
        assert offsets[0] == 0.0 and all(0.0 <= o < clone_jitter(10.0) for o in offsets)


def test_a_larger_factor_keeps_a_superset_of_users():
    # the fractional clone's draws do not depend on K: the planned peak grows with K
    ts, users = _bursty(2)
    last, last_ids = 0.0, set()
    for k in np.linspace(1.05, 3.95, 30):
        _, t, uid = users_plan(ts, users, float(k), seed=3, window_s=10.0)
        ids = set(uid.tolist())
        assert last_ids <= ids
        p = peak_qps(t, 10.0)
        assert p >= last
        last, last_ids = p, ids


@pytest.mark.parametrize("by", ["users", "users-shifted", "time"])
@pytest.mark.parametrize("target", [150.0, 777.0, 2500.0])
def test_the_peak_asked_for_is_the_peak_planned(by, target):
    ts, users = _bursty(3)
    k = solve_factor(ts, users, target, by=by, window_s=10.0, seed=0)
    got = peak_qps(planned_times(ts, users, k, by=by, window_s=10.0, seed=0), 10.0)
    assert abs(got / target - 1) <= PEAK_TOLERANCE
    # the naive K (target over the trace's peak) misses under users-shifted by far
    if by == "users-shifted" and target > 500:
        k0 = target / peak_qps(ts, 10.0)
        naive = peak_qps(planned_times(ts, users, k0, by=by, window_s=10.0, seed=0), 10.0)
        assert naive < 0.8 * target


def test_scaling_states_its_traffic_model():
    t = small_table(400, rate_qps=40.0, seed=6)
    _, info = scale(t, 2.0, by="users", window_s=5.0)
    assert info.jitter_s == 0.5 and "bursts are planned at full height" in info.assumption
    assert "under 0.5 s" in info.assumption
    _, info = scale(t, 2.0, by="users-shifted", window_s=5.0)
    assert info.jitter_s == 0.0 and "smoother than K times the trace" in info.assumption
    _, info = scale(t, 2.0, by="time", window_s=5.0)
    assert "K times sooner" in info.assumption


# ---- by hand: four- and two-request traces --------------------------------------------------

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
    assert e.value.hint == "use users, users-shifted, time"
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


def test_users_shifted_scaling_two_clones_by_hand():
    s, info = scale(four(), 2, window_s=1.0, by="users-shifted")
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
    assert info.method == "users-shifted" and info.factor == 2.0
    assert (info.users_before, info.users_after, info.items) == (3, 6, 3)
    assert info.qps_before == 1.0
    assert info.qps_after == pytest.approx(8 / (14 + 2 / 3 - 10))
    # 1 s windows after: [10,11) 1, [11,12) 2, [12,13) 2, [13,14) 1, [14,15) 2
    assert (info.peak_qps_before, info.peak_qps_after) == (1.0, 2.0)


def test_users_shifted_ties_keep_clone_order_and_two_requests_span():
    # two requests 3 s apart: period = 3 + 3/1 = 6; clone 1 shifted by 3: (3, 0) -> ties with
    # clone 0 at 0 and 3, where clone 0 comes first
    t = _table([0.0, 3.0], [0, 0], [[7], [8]])
    s, info = scale(t, 2.0, by="users-shifted")
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [0.0, 0.0, 3.0, 3.0])
    assert s.column("user_id").to_pylist() == [0, 1, 0, 1]
    assert s.column("new_items").to_pylist() == [[7], [8], [8], [7]]
    assert info.users_after == 2
    # half a second apart: period = 0.5 + 0.5 = 1; clone 1 shifted by 0.5: (0.5, 0)
    t = _table([0.0, 0.5], [3, 1], [[7], [8]])
    s, _ = scale(t, 2.0, by="users-shifted")
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [0.0, 0.0, 0.5, 0.5])
    assert s.column("user_id").to_pylist() == [3, 5, 1, 7]  # stride 4
    assert s.schema.field("user_id").type == pa.int64()


def test_scale_defaults_users_10s_windows_seed_0():
    # 10 s windows: [0, 10) holds 3 -> 0.3 qps (not the mean 5/25: the trace spans 25 s)
    t = _table([0.0, 5.0, 9.5, 10.5, 25.0], [0, 1, 2, 0, 1], [[1]] * 5)
    s, info = scale(t, 1.0)
    assert info.method == "users" and info.peak_qps_before == 0.3
    assert s.column("user_id").to_pylist() == [0, 1, 2, 0, 1]
    # the fractional clone (clone 1 of seed 0) keeps the users whose draw is under 0.5
    keep = np.flatnonzero(np.random.default_rng([0, 1]).random(4)[1:] < 0.5)
    _, info = scale(four(), 1.5)
    assert info.users_after == 3 + len(keep)


def test_fractional_clone_keeps_the_seeded_users():
    # 40 users, one request each; the fractional clone keeps exactly the users whose draw is
    # under the fraction (a share of 0.3 here)
    n = 40
    t = _table(np.arange(n) * 1.0, np.arange(n), [[1]] * n)
    s, _ = scale(t, 1.3, seed=7, by="users-shifted")
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
    s, info = scale(t, 3.0, by="users-shifted")
    np.testing.assert_allclose(s.column("ts_s").to_numpy(), [5.0, 5 + 1 / 3, 5 + 2 / 3])
    assert s.column("user_id").to_pylist() == [4, 9, 14]  # stride 5
    assert info.users_after == 3 and np.isnan(info.qps_before)
    assert info.qps_after == pytest.approx(3 / (2 / 3))


def test_fractional_users_scaling_by_hand():
    seed = 2
    s, info = scale(four(), 1.5, seed=seed, by="users-shifted")
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
    assert not (np.random.default_rng([0, 0]).random(4)[1:] < 0.001).any()
    with pytest.raises(TraceError, match=r"^scaled trace is empty \(0 requests\)$"):
        scale(four(), 0.001)


def test_a_factor_of_at_most_1e_12_is_an_empty_scaled_trace_too():
    # K <= 1e-12 has no whole clone and a fraction under the rounding threshold: it used to
    # leave no clone at all and crash in numpy ("need at least one array to concatenate")
    for k in (1e-12, 5e-13):
        with pytest.raises(TraceError, match=r"^scaled trace is empty \(0 requests\)$"):
            scale(four(), k)
