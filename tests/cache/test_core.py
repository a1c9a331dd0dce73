"""The compiled cache core against a brute-force OrderedDict model of DESIGN.md.

The brute force is written from the design alone, on raw ids: EMB keys are
``(table, row)`` tuples (the hash recomputed here in pure Python), capacities
are bytes and tokens, the KV context start moves in chunks, and KV whose
prefix the next token would invalidate is not admitted.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from brute import draw_candidate, table_row
from conftest import small_table
from hypothesis import given, settings
from hypothesis import strategies as st

from helm_plan import arrays as A
from helm_plan.cache import _kernels as K
from helm_plan.cache import core
from helm_plan.cache.keys import table_rows
from helm_plan.errors import ConfigError
from helm_plan.profiles import EmbTable, ModelProfile


def model(tables, *, max_seq_len: int = 40, chunk: int = 1) -> ModelProfile:
    return ModelProfile(
        name="t", layers=1, d_model=8, kv_dtype_bytes=1, max_seq_len=max_seq_len,
        n_candidates=3, weights_bytes=0, reserve_bytes=0, source="test",
        tables=tuple(tables), kv_slide_chunk=chunk,
    )  # fmt: skip


ONE = [EmbTable("item", dim=4, dtype_bytes=1)]
MULTI = [
    EmbTable("item", dim=8, dtype_bytes=2),
    EmbTable("cat", dim=4, dtype_bytes=1, rows=7, key="hash"),
    EmbTable("seller", dim=6, dtype_bytes=1, rows=13, key="hash", per_candidate=0),
    EmbTable("ctx", dim=2, dtype_bytes=4, rows=3, key="hash", per_history_token=0),
]


class BruteNode:
    """Brute-force caches with resize and prefetch, written from DESIGN.md with OrderedDicts."""

    def __init__(self, m: ModelProfile, emb_bytes: int, kv_tokens: int):
        self.m = m
        self.emb_cap, self.kv_cap = emb_bytes, kv_tokens
        self.emb: OrderedDict[tuple[int, int], int] = OrderedDict()  # LRU first: key -> bytes
        self.kv: OrderedDict[int, tuple[int, int]] = OrderedDict()  # user -> (s0, L)
        self.hist: dict[int, list[int]] = {}

    def key(self, t: int, item: int) -> tuple[int, int]:
        return (t, table_row(self.m.tables[t], item))

    def used(self) -> int:
        return sum(self.emb.values())

    def resize(self, emb_bytes: int, kv_tokens: int) -> None:
        self.emb_cap, self.kv_cap = emb_bytes, kv_tokens
        while self.used() > emb_bytes:
            self.emb.popitem(last=False)
        while sum(v[1] for v in self.kv.values()) > kv_tokens:
            self.kv.popitem(last=False)

    def prefetch(self, keys) -> int:
        done = 0
        for k in keys:
            b = self.m.tables[k[0]].row_bytes
            if k not in self.emb and self.used() + b <= self.emb_cap:
                self.emb[k] = b
                done += 1
        return done

    def request(self, u: int, new: list[int], cands: list[int]) -> tuple[int, ...]:
        h = self.hist.setdefault(u, [])
        h.extend(new)
        H, S, C = len(h), self.m.max_seq_len, self.m.kv_slide_chunk
        s0 = 0 if H <= S else -(-(H - S) // C) * C
        L = H - s0
        c = 0
        if u in self.kv:
            c = self.kv[u][1] if self.kv[u][0] == s0 else 0
            del self.kv[u]
        admit = H < S or s0 + S - H > 0
        if admit and 0 < L <= self.kv_cap:
            while sum(v[1] for v in self.kv.values()) + L > self.kv_cap:
                self.kv.popitem(last=False)
            self.kv[u] = (s0, L)
        n = L - c
        look = miss_b = miss = 0
        tokens = [(it, True) for it in h[H - n :]] + [(it, False) for it in cands]
        for it, is_hist in tokens:
            for t, tab in enumerate(self.m.tables):
                if not (tab.per_history_token if is_hist else tab.per_candidate):
                    continue
                k, b = self.key(t, it), tab.row_bytes
                look += b
                if k in self.emb:
                    self.emb.move_to_end(k)
                    continue
                miss += 1
                miss_b += b
                if b <= self.emb_cap:
                    while self.used() + b > self.emb_cap:
                        self.emb.popitem(last=False)
                    self.emb[k] = b
        return n, c, L, len(cands), look, miss_b, miss


def _raw_keys(a, m):
    """Dense key -> brute-force key (table, raw row)."""
    wl = core.Workload.of(a, m)
    rows = table_rows(a.item_ids, m)
    out = {}
    for t, tab in enumerate(m.tables):
        raw = a.item_ids if tab.key == "identity" else rows[:, t]
        for i in range(a.n_items):
            out[int(wl.keys.item_keys[i, t])] = (t, int(raw[i]))
    return wl, out


def _outcomes(r):
    return np.stack([r.n_computed, r.n_reused, r.ctx_len, r.n_cand, r.lookup_bytes,
                     r.miss_bytes, r.n_miss], axis=1)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    emb_bytes=st.integers(0, 400),
    kv_tokens=st.integers(0, 200),
    max_seq_len=st.integers(1, 40),
    chunk=st.integers(1, 12),
    multi=st.booleans(),
)
def test_replay_matches_brute_force(seed, emb_bytes, kv_tokens, max_seq_len, chunk, multi):
    m = model(MULTI if multi else ONE, max_seq_len=max_seq_len, chunk=min(chunk, max_seq_len))
    table = small_table(150, n_users=12, n_items=50, max_new=5, n_candidates=3, seed=seed)
    a = A.from_table(table)
    wl = core.Workload.of(a, m)
    state = core.CacheState.empty(wl.keys.key_bytes, a.n_users, emb_bytes, kv_tokens)
    r = core.replay(wl, state)
    ref = BruteNode(m, emb_bytes, kv_tokens)
    users = table.column("user_id").to_pylist()
    new = table.column("new_items").to_pylist()
    cands = table.column("candidates").to_pylist()
    want = [ref.request(u, n, c) for u, n, c in zip(users, new, cands, strict=True)]
    np.testing.assert_array_equal(_outcomes(r), np.array(want, np.int64).reshape(-1, 7))
    assert state.emb_bytes_used == ref.used() <= emb_bytes
    assert state.kv_tokens_used <= kv_tokens


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    caps=st.lists(st.tuples(st.integers(0, 600), st.integers(0, 300)), min_size=2, max_size=6),
    chunk=st.integers(1, 8),
)
def test_resize_and_prefetch_schedule_matches_brute_force(seed, caps, chunk):
    """Windows with new capacities and prefetched keys, long enough to compact the log."""
    m = model(MULTI, max_seq_len=30, chunk=chunk)
    table = small_table(900, n_users=25, n_items=120, max_new=5, n_candidates=6, seed=seed)
    a = A.from_table(table)
    wl, raw = _raw_keys(a, m)
    users = table.column("user_id").to_pylist()
    new = table.column("new_items").to_pylist()
    cands = table.column("candidates").to_pylist()
    rng = np.random.default_rng(seed)
    state = core.CacheState.empty(wl.keys.key_bytes, a.n_users, *caps[0])
    ref = BruteNode(m, *caps[0])
    bounds = np.linspace(0, a.n_requests, len(caps) + 1).astype(int)
    for w, (emb_bytes, kv_tokens) in enumerate(caps):
        s, e = int(bounds[w]), int(bounds[w + 1])
        state.resize(emb_bytes, kv_tokens)
        ref.resize(emb_bytes, kv_tokens)
        keys = rng.choice(wl.n_keys, size=10, replace=False).astype(np.int32)
        r = core.replay(wl, state, s, e, prefetch_keys=keys, prefetch_ready_s=np.zeros(10))
        assert r.prefetched == ref.prefetch([raw[int(k)] for k in keys])
        want = [ref.request(users[i], new[i], cands[i]) for i in range(s, e)]
        np.testing.assert_array_equal(_outcomes(r), np.array(want, np.int64).reshape(-1, 7))
        assert [raw[int(k)] for k in state.emb_lru_order()] == list(reversed(ref.emb))
        assert a.user_ids[state.kv_lru_order()].tolist() == list(reversed(ref.kv))


@pytest.mark.parametrize("with_candidates", [True, False])
def test_split_replay_equals_whole_and_copy_is_independent(with_candidates):
    m = model(MULTI, chunk=4)
    t = small_table(600, n_users=30, n_items=200, with_candidates=with_candidates)
    a = A.from_table(t, candidate_window_tokens=70)  # drawn: a span starts with a fresh ring
    wl = core.Workload.of(a, m)
    whole = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 300, 150)
    rw = core.replay(wl, whole)
    part = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 300, 150)
    r1 = core.replay(wl, part, 0, 250)
    snap = part.copy()
    r2 = core.replay(wl, part, 250, 600)
    np.testing.assert_array_equal(_outcomes(rw), np.vstack([_outcomes(r1), _outcomes(r2)]))
    r2b = core.replay(wl, snap, 250, 600)  # the copy replays identically, untouched by part
    np.testing.assert_array_equal(_outcomes(r2), _outcomes(r2b))
    np.testing.assert_array_equal(part.emb_last, snap.emb_last)
    assert snap.key_bytes is part.key_bytes  # shared, never copied


def _check_emb_order_invariants(st: core.CacheState) -> None:
    """Every resident key is a current snapshot entry or listed once as touched since."""
    qh, qt, qe, tl = (int(st.emb_meta[x]) for x in (K.QH, K.QT, K.QE, K.TL))
    touched = st.emb_qi[qe : qe + tl]
    assert len(set(touched.tolist())) == tl  # each touched key listed once
    resident = np.flatnonzero(st.emb_last >= 0)
    stamps = st.emb_last[resident]
    assert len(set(stamps.tolist())) == len(resident) and (stamps < qt).all()
    for k, p in zip(resident, stamps, strict=True):
        if p < qe:  # untouched since the snapshot: its own current entry, not yet popped
            assert qh <= p and st.emb_qi[p] == k
        else:
            assert k in touched


def test_emb_stamps_snapshot_and_touched_list_stay_consistent():
    """After a replay that evicts through many snapshots, and one that never evicts."""
    m = model(MULTI, chunk=4)
    a = A.from_table(small_table(900, n_users=30, n_items=200))
    wl = core.Workload.of(a, m)
    for emb_bytes in (500, 10**9):
        st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, emb_bytes, 150)
        core.replay(wl, st)
        assert st.emb_meta[K.CLK] > len(st.emb_qi)  # more accesses than order slots
        _check_emb_order_invariants(st)
        assert st.emb_last.dtype == np.int32
    assert st.emb_meta[K.QE] == 0  # never evicted: no snapshot was ever taken


def test_stamps_renumbered_before_int32_give_the_same_replay():
    """A replay whose stamps are about to leave int32 renumbers them: same outcomes, same LRU."""
    m = model(MULTI, chunk=4)
    a = A.from_table(small_table(600, n_users=30, n_items=200))
    wl = core.Workload.of(a, m)
    st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 400, 150)
    core.replay(wl, st, 0, 300)
    far = st.copy()
    qe = int(far.emb_meta[K.QE])
    shift = K.STAMP_LIMIT + 1 - int(far.emb_meta[K.QT])
    far.emb_last[far.emb_last >= qe] += shift  # the same order, stamps near the limit
    far.emb_meta[K.QT] += shift
    want, got = core.replay(wl, st, 300, 600), core.replay(wl, far, 300, 600)
    np.testing.assert_array_equal(_outcomes(got), _outcomes(want))
    assert far.emb_meta[K.QT] < 2**20  # it did renumber
    np.testing.assert_array_equal(far.emb_lru_order(), st.emb_lru_order())
    _check_emb_order_invariants(far)


def test_a_log_past_int32_positions_is_refused():
    assert core._bounded_log(2**31 - 1) == 2**31 - 1
    with pytest.raises(ConfigError, match="more than int32 positions address"):
        core._bounded_log(2**31)


def test_kv_chunked_slide_hand_worked():
    # S = 10, C = 4. H: 6 -> 9 -> 11 -> 13 -> 15. s0: 0, 0, 4, 4, 8; L: 6, 9, 7, 9, 7.
    # headroom s0 + S - H: -, -, 3, 1, 3 -> all admitted; reuse needs an unchanged start.
    assert [K.context(h, 10, 4) for h in (6, 9, 11, 13, 15)] == [(0, 6), (0, 9), (4, 7),
                                                                (4, 9), (8, 7)]  # fmt: skip
    assert K.kv_admit(11, 4, 10) and not K.kv_admit(14, 4, 10)  # 4 + 10 - 14 == 0
    assert [K.context(h, 10, 1) for h in (10, 11)] == [(0, 10), (1, 10)]
    assert not K.kv_admit(11, 1, 10)  # the per-token slide at the cap: never reusable


def test_capacities_are_bytes_and_tokens():
    m = model(ONE)
    emb, kv = core.capacities(0.25, 1000, m)
    assert emb == 250 and kv == 750 // m.kv_bytes_per_token
    with pytest.raises(ConfigError, match=r"ratio must be in \[0, 1\], got 1.5"):
        core.capacities(1.5, 1000, m)
    with pytest.raises(ConfigError, match="capacities must be >= 0"):
        core.CacheState.empty(np.ones(3, np.int64), 2, -1, 0)


def test_lookup_stream_matches_replay_and_keys():
    m = model(MULTI, chunk=3)
    table = small_table(300, n_users=20, n_items=80, n_candidates=4)
    a = A.from_table(table)
    wl, raw = _raw_keys(a, m)
    r = core.kv_pass(wl, 60)
    ids, offs = core.lookup_stream(wl, r.n_computed)
    bytes_per_req = np.add.reduceat(wl.keys.key_bytes[ids], offs[:-1]) if len(ids) else []
    np.testing.assert_array_equal(bytes_per_req, r.lookup_bytes)
    # the stream of request 0 is its computed tokens' keys, then its candidates' keys
    ref = BruteNode(m, 0, 60)
    h = table.column("new_items").to_pylist()[0]
    c = table.column("candidates").to_pylist()[0]
    want = [ref.key(t, it) for it in h[len(h) - int(r.n_computed[0]) :]
            for t in range(4) if m.tables[t].per_history_token]  # fmt: skip
    want += [ref.key(t, it) for it in c for t in range(4) if m.tables[t].per_candidate]
    assert [raw[int(k)] for k in ids[offs[0] : offs[1]]] == want


def test_implicit_candidates_are_drawn_from_the_past_only():
    m = model(ONE, chunk=2)
    table = small_table(200, n_users=15, n_items=60, n_candidates=5, with_candidates=False)
    a = A.from_table(table, seed=7, candidate_window_tokens=50)
    wl = core.Workload.of(a, m)
    r = core.kv_pass(wl, 0)  # nothing reused: every history token is computed
    ids, offs = core.lookup_stream(wl, r.n_computed)
    raw = [v for row in table.column("new_items").to_pylist() for v in row]
    stream = np.searchsorted(a.item_ids, raw).tolist()  # dense ids, in request order
    tok_off = a.tok_off.tolist()
    for i in range(a.n_requests):
        want = [draw_candidate(7, i, k, stream, tok_off, 50) for k in range(5)]
        want = [c for c in want if c >= 0]  # nothing to draw before the first token
        got = ids[offs[i + 1] - len(want) : offs[i + 1]].tolist() if want else []
        assert got == want, i
        assert all(c in set(stream[max(0, tok_off[i + 1] - 50) : tok_off[i + 1]]) for c in got)
    for start in (1, 37, 120):  # a span's first draws read a ring filled from the histories
        part, p_offs = core.lookup_stream(wl, r.n_computed[start:], start)
        np.testing.assert_array_equal(part, ids[offs[start] :])
        np.testing.assert_array_equal(p_offs, offs[start:] - offs[start])


def test_no_look_ahead_changing_the_future_leaves_the_past_unchanged():
    """Rewrite the second half of a trace: nothing the first half saw may change."""
    m = model(MULTI, chunk=3)
    t1 = small_table(300, n_users=20, n_items=80, n_candidates=6, with_candidates=False, seed=1)
    t2 = small_table(300, n_users=20, n_items=80, n_candidates=6, with_candidates=False, seed=2)
    import pyarrow as pa

    mixed = pa.concat_tables([t1.slice(0, 150), t2.slice(150, 150)])
    outs = []
    for t in (t1, mixed):
        a = A.from_table(t, seed=3)
        wl = core.Workload.of(a, m)
        st_ = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 500, 120)
        r = core.replay(wl, st_, 0, 150)
        ids, offs = core.lookup_stream(wl, r.n_computed, 0, 150)
        # compare in raw ids: dense numbering may differ between the two traces
        _, raw = _raw_keys(a, m)
        outs.append((_outcomes(r), [raw[int(k)] for k in ids]))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    assert outs[0][1] == outs[1][1]
