"""KV reuse curves: one-pass token-weighted stack distances and the exact fallback vs core.replay."""

from __future__ import annotations

import numpy as np
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.cache import core, kvcurve


def _core_reused(a, caps, msl, win=None, n_win=1):
    out = np.zeros((len(caps), n_win), np.int64)
    for j, c in enumerate(caps):
        r = core.kv_pass(a, int(c), max_seq_len=msl)
        w = np.zeros(a.n_requests, np.int64) if win is None else win
        out[j] = np.bincount(w, weights=r.n_reused, minlength=n_win).astype(np.int64)
    return out


def test_one_pass_is_exact_from_the_largest_context_and_error_is_bounded_below():
    for seed, msl in ((1, 12), (2, 40), (3, 10_000)):
        a = A.from_table(small_table(1500, n_users=50, n_items=300, max_new=8, seed=seed))
        kd = kvcurve.kv_distances(a, max_seq_len=msl)
        lmax = kd.exact_from_tokens
        caps = np.unique(np.concatenate([np.arange(0, 4 * lmax + 50, max(1, lmax // 7)), [lmax]]))
        ref = _core_reused(a, caps, msl)[:, 0]
        one = np.array([kd.reused_at(int(c)) for c in caps])
        big = caps >= lmax
        np.testing.assert_array_equal(one[big], ref[big])
        # Below the largest context the one-pass value is an approximation; quantify it.
        total = int(kd.ctx_len.sum())
        err = np.abs(one[~big] - ref[~big]) / total
        assert err.max(initial=0.0) < 0.15, (seed, msl, err.max())


def test_exact_fallback_equals_core_replay_per_window():
    a = A.from_table(small_table(1200, n_users=30, n_items=200, max_new=6, seed=4))
    win = (np.arange(a.n_requests) // 250).astype(np.int32)
    caps = [0, 1, 5, 17, 30, 64, 200, 1000]
    got = kvcurve.kv_reuse_exact(a, caps, max_seq_len=30, request_window=win, n_windows=5)
    np.testing.assert_array_equal(got, _core_reused(a, caps, 30, win.astype(np.int64), 5))


def test_binned_reuse_matches_core_above_the_largest_context():
    a = A.from_table(small_table(900, n_users=25, n_items=150, max_new=5, seed=9))
    kd = kvcurve.kv_distances(a, max_seq_len=20)
    win = (np.arange(a.n_requests) // 300).astype(np.int32)
    grid = np.array([20, 40, 80, 160, 10_000])
    reused, ctx = kvcurve.binned_reuse(kd, grid, win, 3)
    np.testing.assert_array_equal(reused, _core_reused(a, grid, 20, win.astype(np.int64), 3).T)
    np.testing.assert_array_equal(ctx, np.bincount(win, weights=kd.ctx_len).astype(np.int64))
