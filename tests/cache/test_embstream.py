"""The chunked EMB stream pass against per-capacity core.replay and the materialised stream.

The EMB stream pass (cache/embstream.py) on tiny traces, against plain-Python oracles.

Pins: exact hit bytes per window at every capacity against an OrderedDict byte LRU over the
KV pass's lookup stream (keys larger than the capacity never cached); lookups and looked-up
bytes per window; the SHARDS path against the plain-Python SHARDS of
``test_shards`` (which counts first accesses and looked-up bytes itself);
``Sampling()``'s defaults being the exact pass; a sink getting the whole stream even when
sampling; ``request_bound`` worked by hand; and the exported stream (columns, rows
recomputed with the design's hash, int32 rows only when they fit, metadata, the parquet
writer's options, errors of the writer thread, no file unless the pass ends cleanly).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from brute import table_row
from conftest import small_table
from test_core import MULTI, ONE, model
from test_shards import ref_binned

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core, shards
from helm_plan.cache import embstream as E
from helm_plan.pool import Pool
from helm_plan.profiles import EmbTable


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


def _workload(explicit: bool = True, tables=MULTI, n: int = 30, seed: int = 3):
    m = model(tables, max_seq_len=8, chunk=3)
    t = small_table(n, n_users=5, n_items=15, max_new=4, n_candidates=3, seed=seed,
                    with_candidates=explicit)  # fmt: skip
    a = A.from_table(t, seed=1, candidate_window_tokens=12)
    return m, core.Workload.of(a, m)


def _stream(wl, kv_tokens):
    r = core.kv_pass(wl, kv_tokens)
    return core.lookup_stream(wl, r.n_computed)


def _lru_hits(ids, offs, edges, kb, cap):
    """Hit bytes per window of a byte-capacity LRU kept warm across windows."""
    lru: OrderedDict[int, int] = OrderedDict()
    used = 0
    hits = np.zeros(len(edges) - 1)
    for w in range(len(edges) - 1):
        for x in ids[offs[edges[w]] : offs[edges[w + 1]]]:
            x, b = int(x), int(kb[x])
            if x in lru:
                hits[w] += b
                lru.move_to_end(x)
                continue
            if b > cap:
                continue
            lru[x] = b
            used += b
            while used > cap:
                used -= lru.popitem(last=False)[1]
    return hits


def _per_window(values, offs, edges):
    return np.array(
        [values[offs[edges[w]] : offs[edges[w + 1]]].sum() for w in range(len(edges) - 1)]
    )


@pytest.mark.parametrize(("explicit", "kv_tokens"), [(True, 0), (False, 11)])
def test_exact_hits_per_window_equal_a_brute_force_lru(explicit, kv_tokens):
    _, wl = _workload(explicit)
    kb = wl.keys.key_bytes
    ids, offs = _stream(wl, kv_tokens)
    edges = np.array([0, 7, 7, 19, wl.arrays.n_requests])
    grid = np.unique(np.r_[np.arange(0, 25), np.arange(25, kb.sum() + 10, 13)])
    for chunk in (1, None):
        h = E.emb_hits(wl, kv_tokens, grid, edges, chunk_keys=chunk)
        assert h.exact
        np.testing.assert_array_equal(h.lookups, np.diff(offs[edges]))
        np.testing.assert_array_equal(h.lookup_bytes, _per_window(kb[ids], offs, edges))
        assert h.hit_bytes.shape == (4, len(grid)) and h.hit_bytes.dtype == np.float64
        assert h.lookups.dtype == h.lookup_bytes.dtype == np.int64  # EmbHits' documented types
        for c, cap in enumerate(grid):
            want = _lru_hits(ids, offs, edges, kb, int(cap))
            np.testing.assert_array_equal(h.hit_bytes[:, c], want, err_msg=f"{cap}")
    # no edges: one window over the whole trace
    h = E.emb_hits(wl, kv_tokens, grid[:3], None)
    assert h.lookups.tolist() == [len(ids)]


def test_default_sampling_is_the_exact_pass():
    s = E.Sampling()
    assert (s.rate, s.size, s.seed, s.adjust) == (1.0, None, 0, True)
    _, wl = _workload()
    grid = np.array([0, 4, 6, 8, 16, 40, 100])
    exact = E.emb_hits(wl, 5, grid, None)
    for samp in (s, E.Sampling(rate=1.0, seed=9, adjust=False)):
        h = E.emb_hits(wl, 5, grid, None, sampling=samp)
        assert h.exact
        np.testing.assert_array_equal(h.hit_bytes, exact.hit_bytes)
    # a rate just below one, or a sample size, is SHARDS
    assert not E.emb_hits(wl, 5, grid, None, sampling=E.Sampling(rate=0.999)).exact
    assert not E.emb_hits(wl, 5, grid, None, sampling=E.Sampling(size=10**6)).exact


@pytest.mark.parametrize("adjust", [True, False])
@pytest.mark.parametrize(("rate", "size"), [(0.5, None), (0.3, None), (0.8, 6)])
def test_sampled_hits_equal_plain_python_shards_of_the_stream(rate, size, adjust):
    _, wl = _workload(explicit=False, n=24, seed=5)
    kb = wl.keys.key_bytes
    ids, offs = _stream(wl, 9)
    edges = np.array([0, 10, 24])
    grid = np.array([0, 3, 4, 5, 6, 7, 8, 12, 16, 20, 40, 80, 150, 400])
    samp = E.Sampling(rate=rate, size=size, seed=2, adjust=adjust)
    want, look = ref_binned(ids, grid, rate=rate, s_max=size, seed=2, adjust=adjust, kb=kb,
                            offs=offs, edges=edges)  # fmt: skip
    for sink in (None, lambda *_: None):
        h = E.emb_hits(wl, 9, grid, edges, sampling=samp, sink=sink, chunk_keys=1)
        assert not h.exact
        np.testing.assert_array_equal(h.lookup_bytes, look)
        np.testing.assert_array_equal(h.lookups, np.diff(offs[edges]))
        np.testing.assert_allclose(h.hit_bytes, want, rtol=1e-12, atol=1e-9)


def test_sink_gets_every_key_even_when_sampling():
    _, wl = _workload()
    ids, offs = _stream(wl, 4)
    got, sizes, reqs = [], [], []

    def sink(r0, o, c, z):
        got.append(c)
        sizes.append(z)
        reqs.append(np.repeat(np.arange(r0, r0 + len(o) - 1), np.diff(o)))

    E.emb_hits(wl, 4, np.array([8]), None, sampling=E.Sampling(rate=0.2, seed=1), sink=sink)
    np.testing.assert_array_equal(np.concatenate(got), ids)
    np.testing.assert_array_equal(np.concatenate(sizes), wl.keys.key_bytes[ids])
    np.testing.assert_array_equal(
        np.concatenate(reqs), np.repeat(np.arange(wl.arrays.n_requests), np.diff(offs))
    )


def test_request_bound_is_the_context_plus_every_candidate():
    # MULTI: 3 tables per history token (item, cat, seller), 3 per candidate (item, cat, ctx)
    m = model(MULTI, max_seq_len=9, chunk=3)
    t = small_table(20, n_users=4, n_items=10, n_candidates=5, seed=1)
    wl = core.Workload.of(A.from_table(t), m)
    assert E.request_bound(wl) == 9 * 3 + 5 * 3
    m = model(ONE, max_seq_len=6, chunk=2)
    wl = core.Workload.of(A.from_table(t), m)
    assert E.request_bound(wl) == 6 + 5


def test_stream_schema_columns():
    s = E.stream_schema()
    assert s.names == ["request", "table", "row", "bytes"]
    assert s.types == [pa.int64(), pa.int16(), pa.int64(), pa.int32()]
    assert E.stream_schema(pa.int32()).field("row").type == pa.int32()


def _ref_rows(wl, m, ids):
    """(table, row, bytes) of each key, from the design: identity rows are item ids, hash
    rows are splitmix(item ^ salt(table name)) mod rows."""
    by_key = {}
    for i, item in enumerate(wl.arrays.item_ids.tolist()):
        for t, tab in enumerate(m.tables):
            by_key[int(wl.keys.item_keys[i, t])] = (
                t,
                table_row(tab, item),
                tab.dim * tab.dtype_bytes,
            )
    return np.array([by_key[int(x)] for x in ids]).reshape(-1, 3)


@pytest.mark.parametrize("explicit", [True, False])
def test_emb_stream_rows_are_the_lookups_at_the_ratio(explicit):
    m, wl = _workload(explicit)
    pool = Pool(pool_bytes=600, source="test")
    kv_tokens = core.capacities(0.4, 600, m)[1]
    assert kv_tokens > 0
    ids, offs = _stream(wl, kv_tokens)
    got = E.emb_stream(wl, m, pool, 0.4)
    assert got.schema == E.stream_schema(pa.int32())
    ref = _ref_rows(wl, m, ids)
    want_req = np.repeat(np.arange(wl.arrays.n_requests), np.diff(offs))
    np.testing.assert_array_equal(got.column("request").to_numpy(), want_req)
    np.testing.assert_array_equal(got.column("table").to_numpy(), ref[:, 0])
    np.testing.assert_array_equal(got.column("row").to_numpy(), ref[:, 1])
    np.testing.assert_array_equal(got.column("bytes").to_numpy(), ref[:, 2])


def _big_id_workload(base: int):
    """Items ``base + 0..5``, one identity table and one hash table."""
    tables = [EmbTable("item", dim=2, dtype_bytes=2), EmbTable("c", dim=1, dtype_bytes=4, rows=3,
                                                                key="hash")]  # fmt: skip
    m = model(tables, max_seq_len=6, chunk=2)
    vals = base + np.array([0, 1, 2, 3, 4, 5, 1, 2])
    t = trace.make_table(
        np.arange(4.0), np.array([0, 1, 0, 1]), np.array([0, 2, 4, 6, 8]), vals,
        np.full(4, 2), candidates_offsets=np.arange(0, 10, 2),
        candidates_values=base + np.array([5, 4, 3, 2, 1, 0, 0, 1]),
    )  # fmt: skip
    return m, core.Workload.of(A.from_table(t), m)


@pytest.mark.parametrize(
    ("base", "row_type"),
    [(0, pa.int32()), (2**31 - 6, pa.int32()), (2**31 - 5, pa.int64())],
)
def test_rows_are_int32_only_when_every_row_fits(base, row_type):
    m, wl = _big_id_workload(base)
    got = E.emb_stream(wl, m, Pool(pool_bytes=100, source="test"), 0.5)
    assert got.schema.field("row").type == row_type
    ids, _ = _stream(wl, core.capacities(0.5, 100, m)[1])
    ref = _ref_rows(wl, m, ids)
    assert got.column("row").to_pylist() == ref[:, 1].tolist()
    assert set(got.column("row").to_pylist()) & set(range(base, base + 6))


def test_stream_metadata_and_file_metadata():
    m, wl = _workload()
    meta = E.stream_metadata(wl, m, np.int64(42))
    assert meta == {
        "tables": [
            {"name": "item", "row_bytes": 16, "key": "identity"},
            {"name": "cat", "row_bytes": 4, "key": "hash"},
            {"name": "seller", "row_bytes": 6, "key": "hash"},
            {"name": "ctx", "row_bytes": 8, "key": "hash"},
        ],
        "kv_tokens": 42,
        "kv_slide_chunk": 3,
        "max_seq_len": 8,
    }
    assert type(meta["kv_tokens"]) is int
    fm = E.write_stream_meta({"b": "2", "a": "1"}, {"y": [1], "x": 0})
    assert fm == {
        "helm_plan.provenance": '{"a": "1", "b": "2"}',
        "helm_plan.stream": '{"x": 0, "y": [1]}',
    }


def test_stream_writer_writes_the_stream_with_its_metadata(tmp_path):
    m, wl = _workload()
    path = tmp_path / "out" / "s.parquet"
    pool = Pool(pool_bytes=600, source="test")
    kv_tokens = core.capacities(0.4, 600, m)[1]
    meta = {"k1": "v1", "k2": json.dumps({"z": 1})}
    with E.StreamWriter(path, wl, m, meta) as sink:
        h = E.emb_hits(wl, kv_tokens, np.array([0, 10]), None, sink=sink, chunk_keys=1)
        assert not path.exists()  # appears only when the block exits
    got = pq.read_table(path)
    want = E.emb_stream(wl, m, pool, 0.4)
    assert got.schema.metadata == {b"k1": b"v1", b"k2": b'{"z": 1}'}
    assert got.replace_schema_metadata(None).equals(want)
    assert got.num_rows == h.lookups.sum()
    assert sorted(p.name for p in path.parent.iterdir()) == ["s.parquet"]
    # the writer's options: uncompressed, delta-packed requests, plain rows, dictionaries
    # only for table and bytes, statistics only for the request column
    md = pq.ParquetFile(path).metadata.row_group(0)
    cols = {md.column(i).path_in_schema: md.column(i) for i in range(md.num_columns)}
    assert {c.compression for c in cols.values()} == {"UNCOMPRESSED"}
    assert "DELTA_BINARY_PACKED" in cols["request"].encodings
    assert "PLAIN" in cols["row"].encodings
    for name in ("table", "bytes"):
        assert cols[name].has_dictionary_page, name
    for name in ("request", "row"):
        assert not cols[name].has_dictionary_page, name
    assert cols["request"].is_stats_set
    assert not any(cols[n].is_stats_set for n in ("table", "row", "bytes"))


def test_stream_writer_reraises_a_failed_write_and_leaves_no_file(tmp_path):
    m, wl = _workload()
    path = tmp_path / "s.parquet"
    calls = []

    def bad_table(*chunk):
        calls.append(chunk[0])
        raise ValueError("cannot encode")

    with (
        pytest.raises(ValueError, match="cannot encode"),
        E.StreamWriter(path, wl, m, {}, depth=1) as sink,
    ):
        sink._cols.table = bad_table
        E.emb_hits(wl, 0, np.array([0, 10]), None, sink=sink, chunk_keys=1)
    assert calls == [0]  # after the failure the thread only drains
    assert list(tmp_path.iterdir()) == []
    # a failure is raised by the next chunk, and again when the block exits
    one = (np.array([0, 1]), np.array([0], np.int32), np.array([16], np.int32))
    with (
        pytest.raises(ValueError, match="cannot encode"),
        E.StreamWriter(path, wl, m, {}) as sink,
    ):
        sink._cols.table = bad_table
        sink(0, *one)
        deadline = time.monotonic() + 30
        while sink._error is None and time.monotonic() < deadline:
            time.sleep(0.005)
        with pytest.raises(ValueError, match="cannot encode"):
            sink(1, *one)
    assert list(tmp_path.iterdir()) == []


def test_stream_writer_body_error_leaves_no_file(tmp_path):
    m, wl = _workload()
    path = tmp_path / "s.parquet"
    with pytest.raises(KeyError), E.StreamWriter(path, wl, m, {}) as sink:
        E.emb_hits(wl, 0, np.array([0, 10]), None, sink=sink)
        raise KeyError("body")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_trace_has_an_empty_stream():
    t = trace.make_table(np.zeros(0), np.zeros(0, np.int64), np.zeros(1, np.int64),
                         np.zeros(0, np.int64), np.zeros(0, np.int64))  # fmt: skip
    m = model(MULTI, max_seq_len=7, chunk=2)
    wl = core.Workload.of(A.from_table(t), m)
    assert E.request_bound(wl) == 7 * 3  # no request, so no candidate
    got = E.emb_stream(wl, m, Pool(pool_bytes=100, source="test"), 0.5)
    assert got.num_rows == 0 and got.schema == E.stream_schema(pa.int32())
    h = E.emb_hits(wl, 0, np.array([0, 5]), None, sampling=E.Sampling(rate=0.5))
    assert h.lookups.tolist() == [0] and h.lookup_bytes.tolist() == [0]
    assert h.hit_bytes.tolist() == [[0.0, 0.0]]


def test_a_single_item_trace():
    """One item under one identity table: one key, one row (int32), every lookup of it."""
    t = trace.make_table(np.arange(3.0), np.array([0, 1, 0]), np.array([0, 1, 1, 2]),
                         np.array([7, 7]), np.ones(3, np.int64),
                         candidates_offsets=np.arange(4), candidates_values=np.full(3, 7))  # fmt: skip
    m = model(ONE, max_seq_len=4, chunk=1)
    wl = core.Workload.of(A.from_table(t), m)
    assert wl.n_keys == 1
    got = E.emb_stream(wl, m, Pool(pool_bytes=40, source="test"), 1.0)
    assert got.schema == E.stream_schema(pa.int32())
    assert set(got.column("row").to_pylist()) == {7}
    assert set(got.column("bytes").to_pylist()) == {4}
    h = E.emb_hits(wl, 0, np.array([3, 4]), None)
    n = got.num_rows  # KV capacity 0: every token recomputed, all lookups of the one key
    assert h.lookups.tolist() == [n] and h.lookup_bytes.tolist() == [4 * n]
    assert h.hit_bytes.tolist() == [[0.0, 4.0 * (n - 1)]]


def test_sampled_hits_on_a_key_space_wider_than_4096_keys():
    # The first-access bitset holds one bit per key in 64-bit words; a key space of ~4,500
    # keys needs its 71st word, so a bitset sized a word short (or any overrun) must show.
    m = model(ONE, max_seq_len=6, chunk=3)
    t = small_table(3000, n_users=300, n_items=100_000, max_new=5, n_candidates=2, seed=11,
                    with_candidates=True)  # fmt: skip
    wl = core.Workload.of(A.from_table(t, seed=1), m)
    assert wl.keys.n_keys > 4160
    ids, offs = _stream(wl, 0)
    assert int(ids.max()) == wl.keys.n_keys - 1  # the top keys are looked up
    edges = np.array([0, 1400, 3000])
    grid = np.array([0, 40, 400, 4000, 20000])
    want, look = ref_binned(ids, grid, rate=0.5, s_max=None, seed=3, adjust=True,
                            kb=wl.keys.key_bytes, offs=offs, edges=edges)  # fmt: skip
    h = E.emb_hits(wl, 0, grid, edges, sampling=E.Sampling(rate=0.5, seed=3))
    np.testing.assert_array_equal(h.lookup_bytes, look)
    np.testing.assert_allclose(h.hit_bytes, want, rtol=1e-12, atol=1e-9)
