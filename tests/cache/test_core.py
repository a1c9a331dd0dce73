"""The compiled cache core against a brute-force OrderedDict model of DESIGN.md."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from conftest import small_table
from hypothesis import given, settings
from hypothesis import strategies as st

from helm_plan import arrays as A
from helm_plan.cache import core


def brute_force(table, emb_rows: int, kv_tokens: int, max_seq_len: int):
    """Per-request (computed, reused, lookups, misses) from the brute-force node below."""
    node = _BruteNode(emb_rows, kv_tokens, max_seq_len)
    users = table.column("user_id").to_pylist()
    new = table.column("new_items").to_pylist()
    cands = table.column("candidates").to_pylist()
    out = []
    for u, items, cs in zip(users, new, cands, strict=True):
        n, miss = node.request(u, items, cs)
        L = min(len(node.hist[u]), max_seq_len)
        out.append((n, L - n, n + len(cs), miss))
    return np.array(out, dtype=np.int64).reshape(-1, 4)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    emb_rows=st.integers(0, 60),
    kv_tokens=st.integers(0, 200),
    max_seq_len=st.integers(1, 40),
)
def test_replay_matches_brute_force(seed, emb_rows, kv_tokens, max_seq_len):
    table = small_table(150, n_users=12, n_items=50, max_new=5, n_candidates=3, seed=seed)
    a = A.from_table(table)
    state = core.CacheState.empty(a.n_items, a.n_users, emb_rows, kv_tokens)
    r = core.replay(a, state, max_seq_len=max_seq_len)
    # item ids in the table are raw; brute force runs on raw ids, which is a relabelling
    want = brute_force(table, emb_rows, kv_tokens, max_seq_len)
    got = np.stack([r.n_computed, r.n_reused, r.n_lookup, r.n_miss], axis=1)
    np.testing.assert_array_equal(got, want)
    assert state.emb_rows_used <= emb_rows
    assert state.kv_tokens_used <= kv_tokens


def test_split_replay_equals_whole_and_copy_is_independent():
    table = small_table(600, seed=3)
    a = A.from_table(table)
    whole = core.replay(a, core.CacheState.empty(a.n_items, a.n_users, 40, 150), max_seq_len=30)
    st_ = core.CacheState.empty(a.n_items, a.n_users, 40, 150)
    parts = [
        core.replay(a, st_, s, e, max_seq_len=30) for s, e in [(0, 100), (100, 350), (350, 600)]
    ]
    np.testing.assert_array_equal(np.concatenate([p.n_miss for p in parts]), whole.n_miss)
    snap = st_.copy()
    core.replay(a, st_, 0, 200, max_seq_len=30)
    assert not np.array_equal(snap.emb_lru_order(), st_.emb_lru_order()) or snap.emb_rows_used == 0


def test_resize_evicts_lru_first():
    table = small_table(300, seed=5)
    a = A.from_table(table)
    st_ = core.CacheState.empty(a.n_items, a.n_users, 30, 120)
    core.replay(a, st_, max_seq_len=20)
    order = st_.emb_lru_order()
    kv_order = st_.kv_lru_order()
    ev_rows, _ = st_.resize(10, 0)
    assert ev_rows == len(order) - 10
    np.testing.assert_array_equal(st_.emb_lru_order(), order[:10])
    assert st_.kv_tokens_used == 0 and len(kv_order) > 0 and len(st_.kv_lru_order()) == 0


def test_prefetch_fills_free_space_without_evicting():
    table = small_table(200, seed=7)
    a = A.from_table(table)
    st_ = core.CacheState.empty(a.n_items, a.n_users, 5, 100)
    rows = np.arange(20, dtype=np.int32)
    r = core.replay(a, st_, 0, 1, max_seq_len=20, prefetch_rows=rows, prefetch_ready_s=np.zeros(20))
    assert r.prefetched_rows == 5  # only free space
    assert st_.emb_rows_used == 5


def test_lookup_stream_matches_replay_counts():
    table = small_table(300, seed=11)
    a = A.from_table(table)
    r = core.kv_pass(a, 100, max_seq_len=25)
    ids, offs = core.lookup_stream(a, r.n_computed)
    np.testing.assert_array_equal(np.diff(offs), r.n_lookup)
    # EMB replay over the same stream with a brute-force LRU gives the same misses
    st_ = core.CacheState.empty(a.n_items, a.n_users, 17, 100)
    r2 = core.replay(a, st_, max_seq_len=25)
    lru: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for it in ids.tolist():
        if it in lru:
            lru.move_to_end(it)
        else:
            misses += 1
            if len(lru) >= 17:
                lru.popitem(last=False)
            lru[it] = None
    assert misses == int(r2.n_miss.sum())


def test_capacities():
    from helm_plan.profiles import load_model

    m = load_model("gr-small")
    emb, kv = core.capacities(0.25, 10 * m.row_bytes * 4, m)
    assert emb == 10
    assert kv == (30 * m.row_bytes) // m.kv_bytes_per_token


class _BruteNode:
    """Brute-force caches with resize and prefetch, written from DESIGN.md with OrderedDicts."""

    def __init__(self, emb_rows: int, kv_tokens: int, max_seq_len: int):
        self.emb_cap, self.kv_cap, self.S = emb_rows, kv_tokens, max_seq_len
        self.emb: OrderedDict[int, None] = OrderedDict()  # LRU first
        self.kv: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self.hist: dict[int, list[int]] = {}

    def resize(self, emb_rows: int, kv_tokens: int) -> None:
        self.emb_cap, self.kv_cap = emb_rows, kv_tokens
        while len(self.emb) > emb_rows:
            self.emb.popitem(last=False)
        while sum(v[1] for v in self.kv.values()) > kv_tokens:
            self.kv.popitem(last=False)

    def prefetch(self, rows) -> int:
        done = 0
        for r in rows:
            if r not in self.emb and len(self.emb) < self.emb_cap:
                self.emb[r] = None
                done += 1
        return done

    def request(self, u: int, new: list[int], cands: list[int]) -> tuple[int, int]:
        h = self.hist.setdefault(u, [])
        h.extend(new)
        L = min(len(h), self.S)
        s0 = len(h) - L
        c = 0
        if u in self.kv:
            c = self.kv[u][1] if self.kv[u][0] == s0 else 0
            del self.kv[u]
        if 0 < L <= self.kv_cap:
            while sum(v[1] for v in self.kv.values()) + L > self.kv_cap:
                self.kv.popitem(last=False)
            self.kv[u] = (s0, L)
        miss = 0
        for it in h[len(h) - (L - c) :] + cands:
            if it in self.emb:
                self.emb.move_to_end(it)
            else:
                miss += 1
                if self.emb_cap > 0:
                    if len(self.emb) >= self.emb_cap:
                        self.emb.popitem(last=False)
                    self.emb[it] = None
        return L - c, miss


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    caps=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 300)), min_size=2, max_size=6),
)
def test_resize_and_prefetch_schedule_matches_brute_force(seed, caps):
    """Windows with new capacities and prefetched rows, long enough to compact the log."""
    table = small_table(900, n_users=25, n_items=120, max_new=5, n_candidates=6, seed=seed)
    a = A.from_table(table)
    users = table.column("user_id").to_pylist()
    new = table.column("new_items").to_pylist()
    cands = table.column("candidates").to_pylist()
    rng = np.random.default_rng(seed)
    state = core.CacheState.empty(a.n_items, a.n_users, *caps[0])
    ref = _BruteNode(*caps[0], max_seq_len=30)
    bounds = np.linspace(0, a.n_requests, len(caps) + 1).astype(int)
    for w, (emb_rows, kv_tokens) in enumerate(caps):
        s, e = int(bounds[w]), int(bounds[w + 1])
        state.resize(emb_rows, kv_tokens)
        ref.resize(emb_rows, kv_tokens)
        rows = rng.choice(a.n_items, size=10, replace=False).astype(np.int32)
        r = core.replay(
            a, state, s, e, max_seq_len=30, prefetch_rows=rows, prefetch_ready_s=np.zeros(10)
        )
        assert r.prefetched_rows == ref.prefetch(a.item_ids[rows].tolist())
        want = [ref.request(users[i], new[i], cands[i]) for i in range(s, e)]
        np.testing.assert_array_equal(
            np.stack([r.n_computed, r.n_miss], 1), np.array(want).reshape(-1, 2)
        )
        assert a.item_ids[state.emb_lru_order()].tolist() == list(reversed(ref.emb))
        assert a.user_ids[state.kv_lru_order()].tolist() == list(reversed(ref.kv))
