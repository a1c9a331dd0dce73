"""Scaling a trace: users (clones, same catalogue) or time (compressed), by hand and by counts."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table

from helm_plan.errors import ConfigError
from helm_plan.plan import factor_for, peak_qps, scale


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
    # every clone of a user keeps its revisit gaps, but for the one the wrap round the span
    # end replaces (the user's tail then opens the span)
    g0, g = _per_user_gaps(t), _per_user_gaps(s)
    stride = int(t.column("user_id").to_numpy().max()) + 1
    for u, gaps in g0.items():
        for c in range(3):
            got = np.round(g[u + c * stride], 9).tolist()
            want = np.round(gaps, 9).tolist()
            missing = list(want)
            for x in got:
                if x in missing:
                    missing.remove(x)
            assert len(missing) <= 1, (u, c)


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
        # compressing merges windows and cloning overlays them: the peak lands near the target
        assert info.peak_qps_after == pytest.approx(200.0, rel=0.15), by


def test_bad_scaling_is_a_clear_error():
    t = small_table(50)
    with pytest.raises(ConfigError, match="scale factor must be positive"):
        scale(t, 0.0)
    with pytest.raises(ConfigError, match="unknown scaling 'rows'"):
        scale(t, 2.0, by="rows")
    with pytest.raises(ConfigError, match="finite"):
        scale(t, float("inf"))
