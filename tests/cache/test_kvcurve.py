"""KV reuse curves: the one-pass distances and the exact fallback against core.kv_pass at every capacity."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table
from test_core import ONE, model

from helm_plan import arrays as A
from helm_plan.cache import _kernels as K
from helm_plan.cache import core, kvcurve


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
