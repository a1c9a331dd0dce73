"""The cache core's Python layer (``cache/core.py``) against ``tests/brute.py``'s OrderedDict node.

Pins what the long brute-force property tests of ``test_core.py`` leave to chance, on tiny
traces and hand-worked values: the fields and dtypes of a cold :class:`CacheState`, a deep
copy, the log size rule, capacities, the refusals (with their messages and boundaries),
the per-key hotness counts, prefetch landing by ready time, resize's evicted counts and the
log growth it needs, replay of a span given by its default end, ``kv_pass`` and
``lookup_stream`` over a span, and the ``REPLAYED`` counter.
"""

from __future__ import annotations

import numpy as np
import pytest
from brute import BruteCaches
from conftest import small_table

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core
from helm_plan.errors import ConfigError
from helm_plan.profiles import EmbTable, ModelProfile

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


def _outcomes(r):
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
    assert _outcomes(r1) + _outcomes(r2) == [list(w) for w in want]
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
    assert _outcomes(r) == want
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
    assert _outcomes(r) == [list(ref.request(u, n, c, None)) for u, n, c in reqs[60:]]
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
    assert _outcomes(r) == [list(w) for w in want]
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
