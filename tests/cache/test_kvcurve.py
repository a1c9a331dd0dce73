"""KV reuse curves: the one-pass distances and the exact fallback against core.kv_pass at every capacity.

cache/kvcurve.py's Python side on a five-request trace worked out by hand.

Pins the one-pass distances, reuses and contexts of a trace whose KV LRU is replayed
by hand (including a distance that needs the running maximum of what sits above a user),
``reused_at`` at every capacity around them, ``binned_reuse`` per window (also when the
last window has no request past the grid, or no request at all), ``kv_reuse_exact`` by hand at capacities below
and above the largest context, its error text, the empty capacity list, and the
documented int64 outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table
from test_core import ONE, model

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import _kernels as K
from helm_plan.cache import core, kvcurve
from helm_plan.errors import ConfigError


def _core_reused(wl, caps, edges=None):
    n = wl.arrays.n_requests
    edges = np.array([0, n]) if edges is None else edges
    win = np.repeat(np.arange(len(edges) - 1), np.diff(edges))
    out = np.zeros((len(caps), len(edges) - 1), np.int64)
    for j, c in enumerate(caps):
        r = core.kv_pass(wl, int(c))
        out[j] = np.bincount(win, weights=r.n_reused, minlength=len(edges) - 1).astype(np.int64)
    return out


@pytest.mark.parametrize(
    ("seed", "msl", "chunk"),
    [(1, 12, 5), (2, 40, 7), (3, 16, 16), (4, 30, 4), (5, 20, 1), (6, 10_000, 1)],
)
def test_one_pass_equals_core_at_every_capacity_from_the_largest_context(seed, msl, chunk):
    """Chunked slide and admission shrink contexts: the running maximum keeps the pass exact."""
    wl = core.Workload.of(
        A.from_table(small_table(1500, n_users=50, n_items=300, max_new=8, seed=seed)),
        model(ONE, max_seq_len=msl, chunk=chunk),
    )
    kd = kvcurve.kv_distances(wl)
    lmax = kd.exact_from_tokens
    assert 0 < lmax <= msl
    top = int(kd.ctx_len.sum()) + 1  # past every user's context at once
    caps = np.arange(0, top + 1) if top < 4000 else np.unique(np.linspace(0, top, 800).astype(int))
    ref = _core_reused(wl, caps)[:, 0]
    one = np.array([kd.reused_at(int(c)) for c in caps])
    big = caps >= lmax
    np.testing.assert_array_equal(one[big], ref[big])
    np.testing.assert_array_equal(kvcurve.kv_reuse_exact(wl, caps)[:, 0], ref)


def test_running_maximum_matters_under_the_chunked_slide():
    """A distance from the footprint at the previous request alone is wrong somewhere (chunk > 1)."""
    wl = core.Workload.of(
        A.from_table(small_table(1500, n_users=50, n_items=300, max_new=8, seed=2)),
        model(ONE, max_seq_len=40, chunk=7),
    )
    kd = kvcurve.kv_distances(wl)
    # the current-footprint distance: sizes above the user at request i - 1, not their maximum
    a = wl.arrays
    size: dict[int, int] = {}
    order: list[int] = []
    naive_hits = []
    for i in range(a.n_requests):
        u = int(a.user[i])
        s0, L = K.context(int(a.hist_end[i]), 40, 7)
        if u in size:
            k = order.index(u)
            naive_hits.append(sum(size[v] for v in order[: k + 1]))
            order.pop(k)
            del size[u]
        else:
            naive_hits.append(-1)
        if K.kv_admit(int(a.hist_end[i]), s0, 40) and L > 0:
            order.insert(0, u)
            size[u] = L
    naive = np.array(naive_hits)
    assert np.any((naive != kd.dist_tokens) & (kd.dist_tokens >= 0))
    assert np.all(kd.dist_tokens >= naive)  # the maximum never lies below the final footprint


def test_exact_fallback_and_binned_reuse_per_window():
    wl = core.Workload.of(
        A.from_table(small_table(1200, n_users=30, n_items=200, max_new=6, seed=4)),
        model(ONE, max_seq_len=30, chunk=6),
    )
    edges = np.arange(0, 1201, 250)
    edges[-1] = 1200
    caps = [0, 1, 5, 17, 30, 64, 200, 1000]
    ref = _core_reused(wl, caps, edges)
    np.testing.assert_array_equal(kvcurve.kv_reuse_exact(wl, caps, edges), ref)
    kd = kvcurve.kv_distances(wl)
    grid = np.array([kd.exact_from_tokens, 64, 200, 1000, 10_000])
    reused, ctx = kvcurve.binned_reuse(kd, grid, edges)
    np.testing.assert_array_equal(reused, _core_reused(wl, grid, edges).T)
    win = np.repeat(np.arange(len(edges) - 1), np.diff(edges))
    np.testing.assert_array_equal(ctx, np.bincount(win, weights=kd.ctx_len).astype(np.int64))


def _wl(max_seq_len=40, chunk=1):
    # r0: u0 +2 (context 2), r1: u1 +3 (3), r2: u0 +1 (3), r3: u2 +1 (1), r4: u1 +1 (4)
    t = trace.make_table(
        np.arange(5, dtype=np.float64),
        np.array([0, 1, 0, 2, 1]),
        np.array([0, 2, 5, 6, 7, 8]),
        np.array([1, 2, 3, 4, 5, 1, 2, 3]),
        np.full(5, 2),
    )
    return core.Workload.of(A.from_table(t), model(ONE, max_seq_len=max_seq_len, chunk=chunk))


# LRU by hand (most recent first, sizes in tokens):
#   r0 u0 new            -> [u0:2]
#   r1 u1 new            -> [u1:3, u0:2]
#   r2 u0: 2 tokens, under u1's 3: found at capacity >= 5, reuses 2 -> [u0:3, u1:3]
#   r3 u2 new            -> [u2:1, u0:3, u1:3]
#   r4 u1: 3 tokens under u0's 3 (after r2) then u0 + u2 = 4 (after r3): the maximum of
#      what sat above it is 4, so found at capacity >= 3 + 4 = 7, reuses 3
DIST = [-1, -1, 5, -1, 7]
REUSE = [0, 0, 2, 0, 3]
CTX = [2, 3, 3, 1, 4]


def test_distances_by_hand():
    kd = kvcurve.kv_distances(_wl())
    assert kd.dist_tokens.tolist() == DIST
    assert kd.reuse_tokens.tolist() == REUSE
    assert kd.ctx_len.tolist() == CTX
    assert kd.exact_from_tokens == 4 and type(kd.exact_from_tokens) is int
    for arr in (kd.dist_tokens, kd.reuse_tokens, kd.ctx_len):
        assert arr.dtype == np.int64
    want = {0: 0, 4: 0, 5: 2, 6: 2, 7: 5, 100: 5}
    assert {c: kd.reused_at(c) for c in want} == want


def test_slide_moves_the_start_so_nothing_is_reused():
    # max_seq_len 3, chunk 1: r4's history of 4 tokens starts at 1 (context 3); histories of
    # 3 = max_seq_len tokens (r1, r2) and r4 are not admitted (the next token moves the start),
    # so only r0 (u0: 2) and r3 (u2: 1) are cached
    kd = kvcurve.kv_distances(_wl(max_seq_len=3, chunk=1))
    assert kd.ctx_len.tolist() == [2, 3, 3, 1, 3]
    # r2: u0 (2 tokens) with nothing admitted above it; r4: u1 was never admitted
    assert kd.dist_tokens.tolist() == [-1, -1, 2, -1, -1]
    assert kd.reuse_tokens.tolist() == [0, 0, 2, 0, 0]
    assert kd.exact_from_tokens == 2


def test_binned_reuse_per_window_by_hand():
    kd = kvcurve.kv_distances(_wl())
    grid = [4, 5, 7, 100]
    reused, ctx = kvcurve.binned_reuse(kd, grid, np.array([0, 3, 5]))
    # window 0 (r0-r2): r2 reuses 2 from capacity 5; window 1 (r3, r4): r4 reuses 3 from 7
    assert reused.tolist() == [[0, 2, 2, 2], [0, 0, 3, 3]]
    assert ctx.tolist() == [2 + 3 + 3, 1 + 4]
    assert reused.dtype == np.int64 and ctx.dtype == np.int64
    # the last window (r4 alone) has no request outside the grid: its tail bin is empty
    reused, ctx = kvcurve.binned_reuse(kd, np.array(grid), np.array([0, 4, 5]))
    assert reused.tolist() == [[0, 2, 2, 2], [0, 0, 3, 3]]
    assert ctx.tolist() == [2 + 3 + 3 + 1, 4]
    # an empty window at the end still gets its row and its 0 context tokens
    reused, ctx = kvcurve.binned_reuse(kd, np.array(grid), np.array([0, 5, 5]))
    assert reused.tolist() == [[0, 2, 5, 5], [0, 0, 0, 0]]
    assert ctx.tolist() == [13, 0]
    # one window: the whole trace
    reused, ctx = kvcurve.binned_reuse(kd, np.array([6, 7]), np.array([0, 5]))
    assert reused.tolist() == [[2, 5]] and ctx.tolist() == [13]


def test_exact_replay_by_hand():
    wl = _wl()
    # capacity 5: r2 finds u0 (2 + 3 = 5 held), re-inserting u0 with 3 evicts u1, so r4 misses
    # capacity 3 and 4: u1 (3) evicts u0 at r1, so nothing is reused
    out = kvcurve.kv_reuse_exact(wl, [0, 3, 4, 5, 7], np.array([0, 3, 5]))
    assert out.tolist() == [[0, 0], [0, 0], [0, 0], [2, 0], [2, 3]]
    assert out.dtype == np.int64
    whole = kvcurve.kv_reuse_exact(wl, np.array([5, 7]))
    assert whole.tolist() == [[2], [5]] and whole.dtype == np.int64
    assert kvcurve.kv_reuse_exact(wl, []).shape == (0, 1)


def test_negative_capacity_is_refused():
    with pytest.raises(ConfigError) as e:
        kvcurve.kv_reuse_exact(_wl(), [3, -1])
    assert str(e.value) == "kv_tokens must be >= 0"
    assert e.value.hint == "pass capacities in tokens"
