"""Ghost marginal gains against replaying the window at other capacities."""

from __future__ import annotations

import numpy as np
import pytest
from controller_fixtures import NODE, small_ctx

from helm_plan.cache import core
from helm_plan.cache.ghost import Ghost, GhostCurves, gains
from helm_plan.cache.kvcurve import kv_reuse_exact
from helm_plan.sim import NodeConfig
from helm_plan.sim.step import NodeRunner


def test_emb_ghost_equals_replay_at_other_capacities():
    ctx = small_ctx()
    # a static split from cold, the ghost remembering every window: the EMB curve must equal
    # replaying the windows with EMB capacity g·B and the same KV capacity (same KV outcome)
    r = 0.4
    node = NodeRunner(ctx, NodeConfig(window_s=NODE.window_s, refill="lazy"))
    ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token, history_windows=100)
    curves = []
    for _ in range(node.n_windows):
        res = node.step(r)
        curves.append(ghost.observe(res.first, res.first + res.requests, res.n_computed))
    _, kv_tok = core.capacities(r, ctx.pool_bytes, ctx.model)
    for k in (20, 35, 40, 45, 60, 90):
        emb_b = int(np.floor(ghost.r_grid[k] * ctx.pool_bytes))
        st = core.CacheState.empty(ctx.workload.keys.key_bytes, ctx.arrays.n_users, emb_b, kv_tok)
        for w, c in enumerate(curves):
            s, e = int(node.edges[w]), int(node.edges[w + 1])
            rr = core.replay(ctx.workload, st, s, e)
            hit = int(rr.lookup_bytes.sum() - rr.miss_bytes.sum())
            assert c.emb_hit_bytes[k] == hit, (k, w)
            assert c.lookup_bytes == int(rr.lookup_bytes.sum())


def test_kv_ghost_equals_exact_kv_replay():
    ctx = small_ctx()
    node = NodeRunner(ctx, NODE)
    ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token)
    curves = []
    for _ in range(node.n_windows):
        res = node.step(0.5)
        curves.append(ghost.observe(res.first, res.first + res.requests, res.n_computed))
    ks = [k for k in (10, 50, 80, 95) if ghost.kv_grid[k] >= ghost.exact_from_tokens]
    assert ks, "the pool is too small for the one-pass KV curve to be exact anywhere"
    ref = kv_reuse_exact(ctx.workload, ghost.kv_grid[ks], node.edges)
    for j, k in enumerate(ks):
        got = np.array([c.kv_reused_tokens[k] for c in curves])
        np.testing.assert_array_equal(got, ref[j])


def test_short_history_is_close_on_a_warm_node():
    ctx = small_ctx()
    # one window of history forgets older reuse: never more hits than the full history
    node = NodeRunner(ctx, NODE)
    full = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token, history_windows=100)
    short = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token, history_windows=1)
    for _ in range(node.n_windows):
        res = node.step(0.5)
        a = full.observe(res.first, res.first + res.requests, res.n_computed)
        b = short.observe(res.first, res.first + res.requests, res.n_computed)
        assert np.all(b.emb_hit_bytes <= a.emb_hit_bytes)


def test_gains_from_curves():
    g = np.linspace(0, 1, 101)
    c = GhostCurves(g, emb_hit_bytes=1000.0 * g, lookup_bytes=1000.0,
                    kv_reused_tokens=100.0 * (1 - g), ctx_tokens=100.0)  # fmt: skip
    out = gains(c, 0.5, 0.1, emb_s_per_byte=1e-3, kv_s_per_token=1e-2)
    assert out.emb_gain_up == pytest.approx(0.1)
    assert out.emb_loss_down == pytest.approx(0.1)
    assert out.kv_gain_down == pytest.approx(0.1)
    assert out.kv_loss_up == pytest.approx(0.1)
    assert out.net_up_s == pytest.approx(100 * 1e-3 - 10 * 1e-2)
    with pytest.raises(Exception, match="delta must be in"):
        gains(c, 0.5, 0.0, 1.0, 1.0)


def _node_split(ctx, n_nodes=3, seed=5):
    """Each request's node, as a router would scatter them (users keep no node)."""
    return np.random.default_rng(seed).integers(0, n_nodes, ctx.arrays.n_requests)


def test_stream_of_a_node_is_its_requests_streams_one_by_one():
    # the index stream must equal each request's own stream computed alone (a fresh ring
    # each time): the ring jumping over other nodes' requests draws the same candidates
    ctx = small_ctx()
    wl = ctx.workload
    n_comp = core.kv_pass(wl, 10_000).n_computed
    idx = np.flatnonzero(_node_split(ctx) == 1)[:400]
    ids, offs = core.lookup_stream(wl, n_comp[idx], requests=idx)
    for j, i in enumerate(idx):
        one, _ = core.lookup_stream(wl, n_comp[i : i + 1], int(i), int(i) + 1)
        np.testing.assert_array_equal(ids[offs[j] : offs[j + 1]], one)
    with pytest.raises(Exception, match="ascending"):
        core.lookup_stream(wl, n_comp[idx[::-1]], requests=idx[::-1])


def test_node_kv_ghost_equals_replaying_the_nodes_own_requests():
    # a cluster node's KV cache sees only its requests: its ghost must equal an exact LRU
    # replay of that subsequence (not the whole trace's distances, which are ~3x longer)
    from helm_plan.cache.kvcurve import _kv_multi_kernel

    ctx = small_ctx()
    node = NodeRunner(ctx, NODE)
    split = _node_split(ctx)
    ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token)
    got, mine = [], []
    for w in range(node.n_windows):
        s, e = int(node.edges[w]), int(node.edges[w + 1])
        idx = np.arange(s, e)[split[s:e] == 0]
        c = ghost.observe_requests(idx, np.zeros(len(idx), np.int64))
        got.append(c.kv_reused_tokens)
        mine.append(idx)
    idx = np.concatenate(mine)
    win = np.repeat(np.arange(len(mine), dtype=np.int32), [len(m) for m in mine])
    a, wl = ctx.arrays, ctx.workload
    ks = [k for k in (10, 50, 80, 95) if ghost.kv_grid[k] >= ghost.exact_from_tokens]
    assert ks
    ref = np.zeros((len(ks), len(mine)), np.int64)
    _kv_multi_kernel(a.user[idx], a.hist_end[idx], wl.max_seq_len, wl.kv_slide_chunk,
                     a.n_users, win, ghost.kv_grid[ks].astype(np.int64), ref)  # fmt: skip
    for j, k in enumerate(ks):
        np.testing.assert_array_equal([g[k] for g in got], ref[j])
    # the whole trace's distances would find KV that another node holds (the user's previous
    # request went elsewhere): what a ghost over the whole trace would count inside a cluster
    from helm_plan.cache.kvcurve import KvFeed, kv_distances

    glob = kv_distances(wl).dist_tokens[idx]
    loc = KvFeed(wl).feed(idx).dist_tokens
    assert np.sum((glob >= 0) & (loc < 0)) > 0.3 * np.sum(glob >= 0)
    assert not np.any((glob < 0) & (loc >= 0))  # a first visit is a first visit on any node


def test_kv_feed_in_windows_equals_one_pass():
    from helm_plan.cache.kvcurve import KvFeed, kv_distances

    ctx = small_ctx()
    ref = kv_distances(ctx.workload)
    feed = KvFeed(ctx.workload)
    n = ctx.arrays.n_requests
    parts = [feed.feed(np.arange(s, min(s + 97, n))) for s in range(0, n, 97)]
    np.testing.assert_array_equal(np.concatenate([p.dist_tokens for p in parts]), ref.dist_tokens)
    np.testing.assert_array_equal(np.concatenate([p.reuse_tokens for p in parts]), ref.reuse_tokens)
    assert parts[-1].exact_from_tokens == ref.exact_from_tokens
    with pytest.raises(Exception, match="ascending order"):
        feed.feed(np.array([0]))
