"""The compiled cache core against a brute-force OrderedDict model of DESIGN.md.

The brute force is written from the design alone, on raw ids: EMB keys are
``(table, row)`` tuples (the hash recomputed here in pure Python), capacities
are bytes and tokens, the KV context start moves in chunks, and KV whose
prefix the next token would invalidate is not admitted.

The cache core's Python layer (``cache/core.py``) also against ``tests/brute.py``'s OrderedDict
node. The tests after the brute-force property tests pin what those leave to chance, on tiny
traces and hand-worked values: the fields and dtypes of a cold :class:`CacheState`, a deep
copy, the log size rule, capacities, the refusals (with their messages and boundaries),
the per-key hotness counts, prefetch landing by ready time, resize's evicted counts and the
log growth it needs, replay of a span given by its default end, ``kv_pass`` and
``lookup_stream`` over a span, and the ``REPLAYED`` counter.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from brute import BruteCaches, draw_candidate, table_row
from conftest import small_table
from hypothesis import given, settings
from hypothesis import strategies as st

from helm_plan import arrays as A
from helm_plan import trace
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


TABLES = (
    EmbTable("item", dim=4, dtype_bytes=2),  # 8 bytes
    EmbTable("cat", dim=3, dtype_bytes=1, rows=5, key="hash"),  # 3 bytes
    EmbTable("seller", dim=5, dtype_bytes=1, rows=9, key="hash", per_candidate=0),  # 5 bytes
    EmbTable("ctx", dim=1, dtype_bytes=2, rows=3, key="hash", per_history_token=0),  # 2 bytes
)


def _model(tables=TABLES, *, max_seq_len: int = 12, chunk: int = 3) -> ModelProfile:
    return ModelProfile(
        name="t", layers=1, d_model=4, kv_dtype_bytes=1, max_seq_len=max_seq_len,
        n_candidates=3, weights_bytes=0, reserve_bytes=0, source="test", tables=tuple(tables),
        kv_slide_chunk=chunk,
    )  # fmt: skip


def _setup(n=120, seed=5, **kw):
    m = _model(**kw)
    table = small_table(n, n_users=9, n_items=40, max_new=4, n_candidates=3, seed=seed)
    a = A.from_table(table)
    wl = core.Workload.of(a, m)
    cols = [table.column(c).to_pylist() for c in ("user_id", "new_items", "candidates")]
    return m, a, wl, list(zip(*cols, strict=True))


def _raw(wl, a, ref):
    """Dense key -> brute-force key, from the brute's own (table, raw row) hash."""
    out = {}
    for i, item in enumerate(a.item_ids.tolist()):
        for t in range(len(ref.m.tables)):
            out[int(wl.keys.item_keys[i, t])] = ref.key(t, item)
    return out


def _outcome_rows(r):
    return np.stack([r.n_computed, r.n_reused, r.ctx_len, r.n_cand, r.lookup_bytes,
                     r.miss_bytes, r.n_miss], axis=1).tolist()  # fmt: skip


def _refused(call, message: str, hint: str) -> None:
    """``call`` raises a ConfigError with exactly this message and hint (what the CLI prints)."""
    with pytest.raises(ConfigError) as e:
        call()
    assert (str(e.value), e.value.hint) == (message, hint)


def _check_orders(st, ref, raw, a):
    assert [raw[int(k)] for k in st.emb_lru_order()] == list(reversed(ref.emb))
    assert a.user_ids[st.kv_lru_order()].tolist() == list(reversed(ref.kv))
    assert st.emb_bytes_used == ref.used()
    assert st.kv_tokens_used == sum(v[1] for v in ref.kv.values())
    assert sorted(raw[int(k)] for k in np.flatnonzero(st.emb_resident)) == sorted(ref.emb)


def test_empty_state_fields_and_dtypes():
    st = core.CacheState.empty([3, 1, 2], 4, 10, 7)
    assert st.key_bytes.dtype == np.int64 and st.key_bytes.tolist() == [3, 1, 2]
    assert st.emb_last.dtype == np.int32 and st.emb_last.tolist() == [-1, -1, -1]
    assert st.emb_qi.dtype == np.int32 and len(st.emb_qi) == 2 * 3 + 1024
    assert not st.emb_qi.any()
    assert st.emb_meta.dtype == np.int64 and st.emb_meta.tolist() == [0, 0, 0, 10, 0, 0, 0]
    for arr in (st.kv_prev, st.kv_next):
        assert arr.dtype == np.int32 and arr.tolist() == [-1] * 4
    assert st.kv_len.dtype == np.int64 and st.kv_len.tolist() == [-1] * 4
    assert st.kv_start.dtype == np.int64 and st.kv_start.tolist() == [0] * 4
    assert st.kv_meta.dtype == np.int64 and st.kv_meta.tolist() == [-1, -1, 0, 7]
    assert st.emb_lru_order().tolist() == [] and st.kv_lru_order().tolist() == []
    assert (st.emb_bytes_used, st.kv_tokens_used) == (0, 0)
    core.CacheState.empty(np.ones(2, np.int64), 1, 0, 0)  # zero capacities are allowed
    # key bytes of any integer type are held as int64 (the keys' documented dtype)
    narrow = core.CacheState.empty(np.array([3, 1, 2], np.int32), 1, 10, 0)
    assert narrow.key_bytes.dtype == np.int64 and narrow.key_bytes.tolist() == [3, 1, 2]
    for emb, kv in ((-1, 0), (0, -1)):
        _refused(lambda e=emb, k=kv: core.CacheState.empty(np.ones(2, np.int64), 1, e, k),
                 f"capacities must be >= 0, got emb_bytes={emb}, kv_tokens={kv}",
                 "pass an EMB share in [0, 1] and a positive pool")  # fmt: skip


def test_log_slots_and_bounded_log_hand_worked():
    kb = np.array([4, 8, 2])
    assert core.log_slots(10, kb) == 2 * 3 + 1024  # 10 // 2 = 5 > 3 keys
    assert core.log_slots(3, kb) == 2 * 1 + 1024  # 3 // 2 = 1
    assert core.log_slots(1, kb) == 1024  # no key fits
    assert core.log_slots(5, np.array([1, 1, 1, 1, 1, 1])) == 2 * 5 + 1024
    assert core.log_slots(3, np.array([0, 5, 5, 5, 5])) == 2 * 3 + 1024  # 0 bytes counts as 1
    assert core.log_slots(10**6, np.zeros(0, np.int64)) == 1024
    _refused(lambda: core._bounded_log(2**31),
             "the EMB access log needs 2,147,483,648 slots, more than int32 positions address",
             "use fewer distinct EMB keys (a coarser key model) or a smaller pool")  # fmt: skip


def test_capacities_and_new_state_hand_worked():
    m = _model()
    kvb = m.kv_bytes_per_token  # 2 * 1 * 4 * 1 = 8
    assert kvb == 8
    assert core.capacities(0.0, 1001, m) == (0, 125)
    assert core.capacities(1.0, 1001, m) == (1001, 0)
    assert core.capacities(0.3, 1001, m) == (300, 87)  # floor(300.3), floor(700.7 / 8)
    emb, kv = core.capacities(0.5, 17, m)
    assert (emb, kv) == (8, 1) and type(emb) is int and type(kv) is int
    for bad in (-0.01, 1.01):
        _refused(lambda b=bad: core.capacities(b, 1000, m), f"ratio must be in [0, 1], got {bad}",
                 "pass r in [0, 1]")  # fmt: skip
    _, a, wl, _ = _setup(seed=10)
    st = core.new_state(wl, 0.3, 1001, m)
    assert (st.emb_capacity_bytes, st.kv_capacity_tokens) == (300, 87)
    assert len(st.kv_len) == a.n_users and len(st.emb_last) == wl.n_keys
    np.testing.assert_array_equal(st.key_bytes, wl.keys.key_bytes)


def test_workload_checks_the_slide_chunk():
    a = A.from_table(small_table(20, n_users=3, n_items=10))
    for chunk in (1, 12):
        wl = core.Workload.of(a, _model(chunk=chunk))
        assert (wl.max_seq_len, wl.kv_slide_chunk) == (12, chunk)
    for chunk in (0, 13):
        _refused(lambda c=chunk: core.Workload.of(a, _model(chunk=c)),
                 f"kv_slide_chunk must be in [1, max_seq_len=12], got {chunk}",
                 "fix the model profile")  # fmt: skip
    wl = core.Workload.of(a, _model(chunk=2))
    assert wl.n_keys == len(wl.keys.key_bytes) and wl.direct_bytes == 0
    one = core.Workload.of(a, _model([TABLES[0]]))
    assert one.direct_bytes == 8 and one.n_keys == a.n_items


def test_replay_span_refusals_and_empty_span():
    _, a, wl, _ = _setup(n=30, seed=11)
    st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 50, 20)
    for s, e in ((-1, 5), (0, 31), (6, 5)):
        _refused(lambda s=s, e=e: core.replay(wl, st, s, e),
                 f"span [{s}, {e}) is outside the trace of 30 requests",
                 "pass request indices within the trace")  # fmt: skip
    before = core.REPLAYED["requests"]
    r = core.replay(wl, st, 30, 30)
    assert len(r.n_computed) == 0 and r.prefetched == 0
    assert core.REPLAYED["requests"] == before
    r = core.replay(wl, st, 0, 30)
    assert len(r.n_computed) == 30
    for bad in (np.zeros(wl.n_keys, np.float64), np.zeros(wl.n_keys + 1, np.float32)):
        _refused(lambda b=bad: core.replay(wl, st, 0, 5, counts=b),
                 f"counts must be float32 with one entry per key ({wl.n_keys})",
                 "pass np.zeros(workload.n_keys, np.float32)")  # fmt: skip


def test_replay_outcomes_counts_and_orders_match_brute():
    m, a, wl, reqs = _setup()
    st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 120, 40)
    ref = BruteCaches(m, 120, 40)
    raw = _raw(wl, a, ref)
    counts = np.zeros(wl.n_keys, np.float32)
    ref_counts: dict = {}
    before = core.REPLAYED["requests"]
    r1 = core.replay(wl, st, 0, 70, counts=counts)
    r2 = core.replay(wl, st, 70, counts=counts)  # stop defaults to the trace end
    assert core.REPLAYED["requests"] - before == 120
    want = [ref.request(u, n, c, ref_counts) for u, n, c in reqs]
    assert _outcome_rows(r1) + _outcome_rows(r2) == [list(w) for w in want]
    assert r1.n_computed.dtype == np.int64 and r2.n_miss.dtype == np.int64
    assert r1.prefetched == 0 and isinstance(r1.prefetched, int)
    assert {raw[k]: float(v) for k, v in enumerate(counts) if v} == ref_counts
    _check_orders(st, ref, raw, a)
    assert (st.emb_capacity_bytes, st.kv_capacity_tokens) == (120, 40)
    assert isinstance(st.emb_capacity_bytes, int) and isinstance(st.kv_tokens_used, int)


def test_prefetch_lands_by_ready_time_into_free_bytes_only():
    m, a, wl, reqs = _setup(seed=6)
    ts = a.ts_s
    st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 90, 30)
    ref = BruteCaches(m, 90, 30)
    raw = _raw(wl, a, ref)
    keys = np.arange(0, wl.n_keys, 2)[:16]  # int64 ids: converted by replay
    ready = np.linspace(0.0, float(ts[-1]) * 1.5, len(keys))  # some never land
    r = core.replay(wl, st, prefetch_keys=keys, prefetch_ready_s=ready.tolist())
    done, pf, want = 0, 0, []
    for i, (u, n, c) in enumerate(reqs):
        while pf < len(keys) and ready[pf] <= ts[i]:
            done += ref.insert_if_free(raw[int(keys[pf])])
            pf += 1
        want.append(list(ref.request(u, n, c, None)))
    assert pf < len(keys) and done > 0
    assert r.prefetched == done
    assert _outcome_rows(r) == want
    _check_orders(st, ref, raw, a)
    msg = "prefetch_keys and prefetch_ready_s must have the same length"
    hint = "pass one ready time per prefetched key"
    _refused(lambda: core.replay(wl, st, 0, 1, prefetch_keys=keys, prefetch_ready_s=ready[:-1]),
             msg, hint)  # fmt: skip
    _refused(lambda: core.replay(wl, st, 0, 1, prefetch_keys=keys), msg, hint)


def test_resize_returns_evictions_and_grows_the_log():
    m, a, wl, reqs = _setup(seed=7)
    st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 60, 50)
    ref = BruteCaches(m, 60, 50)
    raw = _raw(wl, a, ref)
    core.replay(wl, st, 0, 60)
    for u, n, c in reqs[:60]:
        ref.request(u, n, c, None)
    n_emb, n_kv = len(ref.emb), len(ref.kv)
    got = st.resize(40, 12)
    ref.resize(40, 12)
    assert got == (n_emb - len(ref.emb), n_kv - len(ref.kv)) and got[0] > 0 and got[1] > 0
    _check_orders(st, ref, raw, a)
    # the log: 2 x most current entries + 1024, grown when the cache grows, never shrunk
    kb = wl.keys.key_bytes
    q0 = len(st.emb_qi)
    assert q0 == 2 * min(len(kb), 60 // int(kb.min())) + 1024
    order = st.emb_lru_order().tolist()
    assert st.resize(10_000, 500) == (0, 0)
    assert len(st.emb_qi) == 2 * min(len(kb), 10_000 // int(kb.min())) + 1024 > q0
    assert st.emb_qi.dtype == np.int32
    assert st.emb_lru_order().tolist() == order  # the compacted log keeps the LRU order
    ref.resize(10_000, 500)
    r = core.replay(wl, st, 60, 120)
    assert _outcome_rows(r) == [list(ref.request(u, n, c, None)) for u, n, c in reqs[60:]]
    _check_orders(st, ref, raw, a)
    assert (st.emb_capacity_bytes, st.kv_capacity_tokens) == (10_000, 500)
    _refused(lambda: st.resize(5, -1), "capacities must be >= 0, got emb_bytes=5, kv_tokens=-1",
             "pass an EMB share in [0, 1] and a positive pool")  # fmt: skip


def test_resize_counts_the_evicted_keys_and_users():
    m, a, wl, reqs = _setup(seed=8)
    st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 150, 50)
    ref = BruteCaches(m, 150, 50)
    core.replay(wl, st, 0, 80)
    for u, n, c in reqs[:80]:
        ref.request(u, n, c, None)
    n_emb, n_kv = len(ref.emb), len(ref.kv)
    ref.resize(30, 8)
    got = st.resize(30, 8)
    assert got == (n_emb - len(ref.emb), n_kv - len(ref.kv))
    assert got[0] > 0 and got[1] > 0 and all(type(x) is int for x in got)


def test_copy_is_deep_except_the_shared_key_bytes():
    m, a, wl, _ = _setup(seed=9)
    st = core.CacheState.empty(wl.keys.key_bytes, a.n_users, 100, 30)
    core.replay(wl, st, 0, 50)
    cp = st.copy()
    assert cp.key_bytes is st.key_bytes
    for name in ("emb_last", "emb_qi", "emb_meta", "kv_prev", "kv_next", "kv_len", "kv_start",
                 "kv_meta"):  # fmt: skip
        orig = getattr(st, name).copy()
        np.testing.assert_array_equal(getattr(cp, name), orig)
        getattr(cp, name)[:] = 7
        np.testing.assert_array_equal(getattr(st, name), orig)


def test_kv_pass_and_lookup_stream_of_a_span_match_brute():
    m, a, wl, reqs = _setup(seed=12)
    r = core.kv_pass(wl, 25)
    ref = BruteCaches(m, 0, 25)
    raw = _raw(wl, a, ref)
    want = [ref.request(u, n, c, None) for u, n, c in reqs]
    assert _outcome_rows(r) == [list(w) for w in want]
    # the lookup stream of requests [40, 120): computed tokens' keys, then candidates' keys
    hist: dict = {}
    streams = []
    for (u, new, cands), w in zip(reqs, want, strict=True):
        h = hist.setdefault(u, [])
        h.extend(new)
        n = w[0]
        hist_t = [t for t in range(4) if TABLES[t].per_history_token]
        cand_t = [t for t in range(4) if TABLES[t].per_candidate]
        s = [ref.key(t, it) for it in h[len(h) - n :] for t in hist_t]
        s += [ref.key(t, it) for it in cands for t in cand_t]
        streams.append(s)
    ids, offs = core.lookup_stream(wl, [w[0] for w in want[40:]], 40)
    assert ids.dtype == np.int32 and offs.dtype == np.int64
    assert offs.tolist() == np.cumsum([0] + [len(s) for s in streams[40:]]).tolist()
    assert [raw[int(k)] for k in ids] == [k for s in streams[40:] for k in s]
    ids2, offs2 = core.lookup_stream(wl, [w[0] for w in want[40:60]], 40, 60)
    assert ids2.tolist() == ids[: offs[20]].tolist() and offs2.tolist() == offs[:21].tolist()
    _refused(lambda: core.lookup_stream(wl, [1, 2, 3], 40),
             "n_computed has 3 entries for a span of 80",
             "pass one computed-token count per request of the span")  # fmt: skip


def test_kv_pass_caches_no_emb_and_the_default_span_is_the_trace():
    # a 1-byte table: any EMB capacity would hold a key, but kv_pass's is 0, so every
    # lookup misses
    m = _model([EmbTable("item", dim=1, dtype_bytes=1)])
    a = A.from_table(small_table(60, n_users=4, n_items=6, max_new=3, n_candidates=2, seed=13))
    wl = core.Workload.of(a, m)
    r = core.kv_pass(wl, 20)
    assert r.lookup_bytes.sum() > 0
    np.testing.assert_array_equal(r.miss_bytes, r.lookup_bytes)
    np.testing.assert_array_equal(r.n_miss, r.lookup_bytes)  # 1 byte per key
    ids, offs = core.lookup_stream(wl, r.n_computed)  # start 0, stop at the trace end
    ids1, offs1 = core.lookup_stream(wl, r.n_computed[1:], 1)
    assert len(offs) == 61 and ids[offs[1] :].tolist() == ids1.tolist()
    np.testing.assert_array_equal(np.diff(offs), r.lookup_bytes)


def test_explicit_candidates_count_before_any_history():
    # request 0 has no history at all: its stream is its two explicit candidates' keys
    table = trace.make_table(
        np.array([0.0, 1.0]), np.array([5, 5]), np.array([0, 0, 2]), np.array([30, 31]),
        np.array([2, 2]), candidates_offsets=np.array([0, 2, 4]),
        candidates_values=np.array([40, 30, 41, 40]),
    )  # fmt: skip
    a = A.from_table(table)
    wl = core.Workload.of(a, _model([TABLES[0]]))
    dense = {int(x): i for i, x in enumerate(a.item_ids)}  # one identity table: key = item
    ids, offs = core.lookup_stream(wl, [0, 2])
    assert offs.tolist() == [0, 2, 6]
    assert ids.tolist() == [dense[40], dense[30], dense[30], dense[31], dense[41], dense[40]]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 257, 4095])
def test_heap_sort_brute_against_numpy(n):
    """The LRU snapshot's short sort (a hand-written heap sort) is numpy's sort, ties and
    negative values included, in place."""
    from helm_plan.cache._emblog import _heap_sort

    rng = np.random.default_rng(n)
    for hi in (3, 1 << 40):  # many ties; nearly distinct
        v = rng.integers(-hi, hi, n, dtype=np.int64)
        want = np.sort(v)
        got = _heap_sort(v)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(v, want)  # sorted in place
