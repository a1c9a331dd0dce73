"""The chunked EMB stream pass against per-capacity core.replay and the materialised stream."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table
from test_core import MULTI, ONE, model

from helm_plan import arrays as A
from helm_plan.cache import core, shards
from helm_plan.cache import embstream as E


def _replay_hits(wl, emb_bytes, kv_tokens, edges):
    """(hit bytes, lookup bytes) per window from replaying the whole node at one capacity."""
    st = core.CacheState.empty(wl.keys.key_bytes, wl.arrays.n_users, int(emb_bytes), kv_tokens)
    r = core.replay(wl, st)
    win = np.repeat(np.arange(len(edges) - 1), np.diff(edges))
    look = np.bincount(win, weights=r.lookup_bytes, minlength=len(edges) - 1)
    miss = np.bincount(win, weights=r.miss_bytes, minlength=len(edges) - 1)
    return look - miss, look


@pytest.mark.parametrize(
    ("tables", "explicit", "chunk", "kv_tokens"),
    [(MULTI, True, 5, 0), (MULTI, False, 7, 37), (ONE, True, 4, 25), (ONE, False, 1, 60)],
)
def test_exact_hits_equal_core_replay_at_every_capacity(tables, explicit, chunk, kv_tokens):
    """Every byte capacity from 0 past the footprint: byte stack distances are exact."""
    m = model(tables, max_seq_len=20, chunk=chunk)
    t = small_table(400, n_users=20, n_items=120, n_candidates=5, seed=3, with_candidates=explicit)
    a = A.from_table(t, seed=4, candidate_window_tokens=60)
    wl = core.Workload.of(a, m)
    edges = A.window_edges(a.ts_s, 2.0)
    grid = np.arange(0, int(wl.keys.key_bytes.sum()) + 20)
    # a chunk of one request at a time exercises the carried generator and pass state
    h = E.emb_hits(wl, kv_tokens, grid, edges, chunk_keys=1)
    assert h.exact
    for cap in grid:
        hit, look = _replay_hits(wl, cap, kv_tokens, edges)
        np.testing.assert_array_equal(h.lookup_bytes, look)
        np.testing.assert_array_equal(h.hit_bytes[:, cap], hit, err_msg=str(cap))
    # SHARDS that samples every key, filtering at generation or in the pass, is exact too
    for s in (E.Sampling(rate=1.0, size=10**6),):
        est = E.emb_hits(wl, kv_tokens, grid, edges, sampling=s)
        np.testing.assert_allclose(est.hit_bytes, h.hit_bytes)
        np.testing.assert_array_equal(est.lookups, h.lookups)


def test_sink_gets_the_lookup_stream_of_the_kv_pass():
    m = model(MULTI, max_seq_len=16, chunk=3)
    a = A.from_table(small_table(300, n_users=15, n_items=90, n_candidates=4, seed=1))
    wl = core.Workload.of(a, m)
    r = core.kv_pass(wl, 30)
    ids, offs = core.lookup_stream(wl, r.n_computed)
    got_ids, got_req = [], []
    starts = []

    def sink(r0, o, c, z):
        np.testing.assert_array_equal(z, wl.keys.key_bytes[c])
        starts.append(r0)
        got_ids.append(c)
        got_req.append(np.repeat(np.arange(r0, r0 + len(o) - 1), np.diff(o)))

    h = E.emb_hits(wl, 30, np.array([0, 100]), None, sink=sink, chunk_keys=1)
    assert len(starts) > 1 and starts == sorted(starts)
    np.testing.assert_array_equal(np.concatenate(got_ids), ids)
    np.testing.assert_array_equal(
        np.concatenate(got_req), np.repeat(np.arange(a.n_requests), np.diff(offs))
    )
    assert h.lookups.sum() == len(ids)
    assert h.lookup_bytes.sum() == r.lookup_bytes.sum()


@pytest.mark.parametrize("sample_size", [None, 300])
def test_sampling_at_generation_equals_sampling_the_materialised_stream(sample_size):
    """Generating only keys under the threshold gives the same estimate as filtering afterwards."""
    m = model(MULTI, max_seq_len=30, chunk=6)
    a = A.from_table(small_table(1500, n_users=40, n_items=2000, n_candidates=8, seed=2))
    wl = core.Workload.of(a, m)
    edges = A.window_edges(a.ts_s, 5.0)
    grid = np.linspace(0, int(wl.keys.key_bytes.sum()), 41).astype(np.int64)
    samp = E.Sampling(rate=0.3, size=sample_size, seed=5)
    gen = E.emb_hits(wl, 50, grid, edges, sampling=samp)
    full = E.emb_hits(wl, 50, grid, edges, sampling=samp, sink=lambda *_: None)
    r = core.kv_pass(wl, 50)
    ids, offs = core.lookup_stream(wl, r.n_computed)
    ref, look = shards.shards_binned_hits(
        ids, grid, sample_rate=0.3, sample_size=sample_size, seed=5,
        key_bytes=wl.keys.key_bytes, offsets=offs, edges=edges, n_ids=wl.n_keys,
    )  # fmt: skip
    assert not gen.exact
    np.testing.assert_array_equal(gen.lookup_bytes, look)
    np.testing.assert_allclose(gen.hit_bytes, ref, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(full.hit_bytes, ref, rtol=1e-12, atol=1e-6)


def test_request_bound_covers_every_request():
    m = model(MULTI, max_seq_len=12, chunk=4)
    a = A.from_table(small_table(200, n_users=10, n_items=60, max_new=20, n_candidates=6))
    wl = core.Workload.of(a, m)
    r = core.kv_pass(wl, 0)
    _, offs = core.lookup_stream(wl, r.n_computed)
    assert np.diff(offs).max() <= E.request_bound(wl)
