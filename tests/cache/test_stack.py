"""Byte-weighted stack distances, the bare-stream LRU and SHARDS against brute force and libCacheSim.

The stack-distance pass's Python side on tiny hand-worked streams: checks, classes, windows.

Pins the input checks of :mod:`helm_plan.cache.stack` at their edges (exact messages: dense
ids >= 0, ``n_ids`` at least the largest id + 1, a positive size per key, a sorted grid with
0 and repeats allowed, window edges from 0 to the request count with empty windows
allowed), the size classes (``[s_j, s_{j+1})``, below the smallest key in none), the
per-access sizes, the per-window lookup bytes, and hit bytes per window and capacity of
short streams worked out by hand with the LRU rules of the module docstring (a hit moves
the key up; a key larger than the cache is never cached). Capacities below, at and above
each stack distance are checked, so a capacity off by one or a bin on the wrong side fails.
"""

from __future__ import annotations

import csv
from collections import OrderedDict
from pathlib import Path

import libcachesim as lcs
import numpy as np
import pytest
import stream_lru as lru
from hypothesis import given, settings
from hypothesis import strategies as st

from helm_plan.cache import shards, stack
from helm_plan.errors import ConfigError


def brute_lru(ids: list[int], sizes: list[int], cap: int) -> tuple[int, int]:
    """(misses, miss bytes) of an OrderedDict LRU of ``cap`` bytes, written from DESIGN.md."""
    od: OrderedDict[int, int] = OrderedDict()
    used = miss = miss_b = 0
    for x in ids:
        b = sizes[x]
        if x in od:
            od.move_to_end(x)
            continue
        miss += 1
        miss_b += b
        if b <= cap:  # a key larger than the cache is fetched but not cached
            while used + b > cap:
                used -= od.popitem(last=False)[1]
            od[x] = b
            used += b
    return miss, miss_b


def zipf_stream(n: int, n_ids: int, alpha: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_ids + 1) ** alpha
    x = rng.choice(n_ids, size=n, p=p / p.sum())
    return rng.permutation(n_ids)[x].astype(np.int32)


@settings(max_examples=40, deadline=None)
@given(
    ids=st.lists(st.integers(0, 40), min_size=0, max_size=400),
    sizes=st.lists(st.sampled_from([1, 2, 3, 8, 20]), min_size=41, max_size=41),
    unit=st.booleans(),
)
def test_hit_bytes_equal_brute_force_lru_at_every_capacity(ids, sizes, unit):
    """Every capacity 0..max, including those below the largest key (size classes)."""
    sizes = [5] * 41 if unit else sizes
    arr = np.array(ids, np.int32)
    kb = np.array(sizes, np.int64)
    grid = np.arange(0, 5 * 41 + 2)
    hits, look = stack.binned_hits(arr, grid, key_bytes=kb, n_ids=41)
    assert look[0] == sum(sizes[x] for x in ids)
    for cap in range(len(grid)):
        miss, miss_b = brute_lru(ids, sizes, cap)
        assert hits[0, cap] == look[0] - miss_b, cap
        assert lru.emb_lru(arr, cap, kb, 41) == (miss, miss_b), cap
    # SHARDS at rate 1 (fixed-rate and fixed-size with room for every key) is the exact curve
    for kw in ({}, {"sample_size": 64}):
        est, n = shards.shards_binned_hits(arr, grid, sample_rate=1.0, key_bytes=kb, n_ids=41, **kw)
        np.testing.assert_array_equal(n, look)
        np.testing.assert_allclose(est, hits)


def test_stack_distances_brute_force_bytes_and_compaction():
    ids = zipf_stream(6_000, 200, 0.9, 3)  # many compactions of the 2*200+16-slot tree
    kb = np.random.default_rng(0).integers(1, 9, size=200)
    d = stack.stack_distances(ids, kb)
    d_rows = stack.stack_distances(ids)
    seen: list[int] = []
    want, want_rows = [], []
    for x in ids.tolist():
        if x in seen:
            k = seen.index(x)
            want.append(int(kb[seen[: k + 1]].sum()))  # bytes from the top down to x
            want_rows.append(k + 1)
            seen.pop(k)
        else:
            want.append(0)
            want_rows.append(0)
        seen.insert(0, x)
    np.testing.assert_array_equal(d, want)
    np.testing.assert_array_equal(d_rows, want_rows)


def test_one_size_pass_over_many_blocks_equals_brute_force_distances():
    """The one-size pass (a bit per slot, a tree over blocks of 64) against row distances
    counted on a list: 500 keys, so 1,016 slots in 16 blocks, marks crossing every block edge
    (slot 63 included) and a dozen compactions; hits at every capacity 0..500 rows."""
    ids = zipf_stream(12_000, 500, 0.6, 11)
    seen: list[int] = []
    dist = []
    for x in ids.tolist():
        k = seen.index(x) + 1 if x in seen else 0
        dist.append(k)
        if k:
            seen.pop(k - 1)
        seen.insert(0, x)
    dist_a = np.array(dist)
    grid = 7 * np.arange(0, 501)  # bytes: 0..500 rows of 7
    hits, look = stack.binned_hits(ids, grid, key_bytes=np.full(500, 7), n_ids=500)
    want = [7 * int(((dist_a > 0) & (dist_a <= c)).sum()) for c in range(501)]
    assert look[0] == 7 * len(ids) and hits[0].tolist() == want
    assert 0 < want[50] < want[200] < want[-1]  # capacities that tell the distances apart


@pytest.mark.parametrize("sizes", [[16, 48, 64], [32]])
def test_windows_fed_apart_equal_the_joined_stream(sizes):
    """``window_hits`` (the ghost's past windows, then this one, never joined) against
    ``binned_hits`` of the joined stream with the same edges; an empty window included."""
    rng = np.random.default_rng(5)
    ids = zipf_stream(6_000, 300, 1.0, 2)
    kb = rng.choice(sizes, size=300)
    offs = np.concatenate([[0], np.sort(rng.integers(0, 6_001, 699)), [6_000]])  # 700 requests
    edges = np.array([0, 100, 100, 450, 700])  # window 1 holds no request
    grid = np.array([0, 16, 200, 5_000, 20_000])
    want, want_look = stack.binned_hits(
        ids, grid, key_bytes=kb, offsets=offs, edges=edges, n_ids=300
    )
    windows = [
        (ids[offs[a] : offs[b]], offs[a : b + 1] - offs[a])
        for a, b in zip(edges[:-1], edges[1:], strict=True)
    ]
    got, look = stack.window_hits(windows, grid, key_bytes=kb, n_ids=300)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(look, want_look)


@pytest.mark.parametrize("sizes", [[16, 48, 64], [32]])
@pytest.mark.parametrize("history", [0, 1, 3])
def test_windowed_pass_equals_a_fresh_pass_over_the_remembered_windows(sizes, history):
    """The ghost's stack kept from window to window (``WindowedPass``) against a fresh pass fed
    the ``history`` windows before each and then each of its requests as a window of its own
    (per-request rows); an empty window included, two size classes in the mixed case."""
    rng = np.random.default_rng(7)
    kb = rng.choice(sizes, size=300).astype(np.int64)
    grid = np.array([0, 16, 40, 200, 900, 5_000, 20_000])
    windows = []
    for w in range(8):
        n = 0 if w == 2 else int(rng.integers(1, 60))
        offs = np.concatenate([[0], np.cumsum(rng.integers(0, 13, n))]).astype(np.int64)
        windows.append((zipf_stream(int(offs[-1]), 300, 1.0, w), offs))
    plan = stack.size_plan(kb, grid)
    assert len(plan) == (2 if len(sizes) > 1 else 1)
    passes = [stack.WindowedPass(kb, b, grid[idx], history, census) for b, idx, census in plan]
    total = 0
    for w, (ids, offs) in enumerate(windows):
        sizes_of = None if len(sizes) == 1 else kb.astype(np.int32)[ids]
        got = np.zeros((len(offs) - 1, len(grid)), np.int64)
        for (_, idx, _), sp in zip(plan, passes, strict=True):
            got[:, idx] = sp.next_window(ids, sizes_of, offs, np.arange(len(offs)))
        past = windows[max(0, w - history) : w]
        singles = [
            (ids[a:b], np.array([0, b - a])) for a, b in zip(offs[:-1], offs[1:], strict=True)
        ]
        want, _ = stack.window_hits([*past, *singles], grid, key_bytes=kb, n_ids=300)
        np.testing.assert_array_equal(got, want[len(past) :], err_msg=f"window {w}")
        total += int(got[:, -1].sum())
    assert total > 0  # hits to compare, at the largest capacity at least


def test_windows_are_warm_and_sum_to_whole():
    ids = zipf_stream(5_000, 300, 1.0, 1)
    kb = np.random.default_rng(1).choice([16, 48, 64], size=300)
    offs = np.arange(0, 5_001, 10, dtype=np.int64)  # 500 requests of 10 accesses
    edges = np.arange(0, 501, 100)
    grid = np.array([0, 16, 200, 5_000, 20_000])
    hits, look = stack.binned_hits(ids, grid, key_bytes=kb, offsets=offs, edges=edges)
    whole, _ = stack.binned_hits(ids, grid, key_bytes=kb)
    np.testing.assert_array_equal(hits.sum(axis=0), whole[0])
    np.testing.assert_array_equal(
        look, [kb[ids[i * 1000 : (i + 1) * 1000]].sum() for i in range(5)]
    )
    sizes = kb.tolist()
    for c, cap in enumerate(grid):  # window 3 with a warm LRU: replay prefixes, diff the misses
        m_end = brute_lru(ids[:4000].tolist(), sizes, int(cap))[1]
        m_start = brute_lru(ids[:3000].tolist(), sizes, int(cap))[1]
        assert hits[3, c] == look[3] - (m_end - m_start)


def test_size_classes():
    kb = np.array([8, 8, 64, 512])
    grid = np.array([0, 7, 8, 63, 64, 100, 512, 10_000])
    cls = stack.size_classes(kb, grid)
    assert [(b, i.tolist()) for b, i in cls] == [(8, [2, 3]), (64, [4, 5]), (512, [6, 7])]


def _real_streams(datasets: Path) -> dict[str, np.ndarray]:
    rows = []
    with open(datasets / "movielens-100k.inter.tsv") as fh:
        next(fh)
        for line in fh:
            u, i, _, ts = line.split("\t")
            rows.append((float(ts), int(i)))
    ml = [i for _, i in sorted(rows, key=lambda r: r[0])]  # stable by timestamp
    with open(datasets / "amazon-video-games.seq.txt") as fh:
        az = [int(line.split()[1]) for line in fh if line.strip()]
    with open(datasets / "taobao-userbehavior-sample.csv") as fh:
        tb_rows = [(int(r[4]), int(r[1])) for r in csv.reader(fh)]
    tb = [i for _, i in sorted(tb_rows, key=lambda r: r[0])]
    out = {}
    for name, s in (("movielens", ml), ("amazon", az), ("taobao", tb)):
        _, dense = np.unique(np.array(s, np.int64), return_inverse=True)
        out[name] = dense.astype(np.int32)
    return out


def lcs_lru(ids: np.ndarray, kb: np.ndarray, cap: int, path: Path) -> tuple[int, int]:
    """(misses, miss bytes) of libCacheSim's LRU with object sizes over an oracleGeneral file."""
    if not path.exists():
        rec = np.zeros(len(ids), [("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nxt", "<i8")])
        rec["t"] = np.arange(len(ids))
        rec["id"] = ids
        rec["sz"] = kb[ids]
        rec["nxt"] = -1
        rec.tofile(path)
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, byte_miss_ratio = lcs.LRU(cache_size=cap).process_trace(reader)
    return int(round(miss_ratio * len(ids))), int(round(byte_miss_ratio * kb[ids].sum()))


def test_hits_equal_libcachesim_with_object_sizes_on_real_datasets(datasets, tmp_path):
    """libCacheSim's LRU takes object sizes and byte capacities: the same rules as ours."""
    rng = np.random.default_rng(5)
    for name, ids in _real_streams(datasets).items():
        n_ids = int(ids.max()) + 1
        for sized in (False, True):
            kb = rng.choice([64, 256, 1024], size=n_ids) if sized else np.ones(n_ids, np.int64)
            fracs = np.array([0.0002, 0.005, 0.02, 0.1, 0.5])
            caps = np.maximum(1, (fracs * kb.sum()).astype(np.int64))
            hits, look = stack.binned_hits(ids, caps, key_bytes=kb)
            path = tmp_path / f"{name}-{sized}.oracleGeneral"
            for c, cap in enumerate(caps.tolist()):
                miss, miss_b = lcs_lru(ids, kb, cap, path)
                assert lru.emb_lru(ids, cap, kb) == (miss, miss_b), (name, sized, cap)
                assert look[0] - hits[0, c] == miss_b, (name, sized, cap)


def test_shards_small_fast_variant():
    ids = zipf_stream(300_000, 30_000, 1.0, 7)
    grid = np.linspace(0, 30_000, 51).astype(np.int64)
    maes = [shards.shards_mae(ids, grid, sample_rate=0.1, seed=s) for s in range(3)]
    assert float(np.median(maes)) < 0.005 and max(maes) < 0.01, maes
    fs = [shards.shards_mae(ids, grid, sample_rate=1.0, sample_size=2000, seed=s) for s in range(3)]
    assert max(fs) < 0.01, fs
    # unadjusted SHARDS is a valid estimator too, just noisier
    assert shards.shards_mae(ids, grid, sample_rate=0.1, seed=0, adjust=False) < 0.1
    # byte-weighted: three row sizes, hit rate by bytes
    kb = np.random.default_rng(2).choice([64, 256, 512], size=30_000)
    gb = np.linspace(0, kb.sum() // 2, 51).astype(np.int64)
    mb = [shards.shards_mae(ids, gb, sample_rate=0.1, seed=s, key_bytes=kb) for s in range(3)]
    assert float(np.median(mb)) < 0.01 and max(mb) < 0.02, mb


@pytest.mark.slow
def test_shards_one_percent_within_0002_mae_on_5m_accesses():
    ids = zipf_stream(5_000_000, 1_000_000, 1.0, 1)
    grid = np.linspace(0, 1_000_000, 101).astype(np.int64)
    maes = [shards.shards_mae(ids, grid, sample_rate=0.01, seed=s) for s in range(5)]
    assert float(np.median(maes)) <= 0.002, maes
    assert max(maes) <= 0.003, maes
    fixed = shards.shards_mae(ids, grid, sample_rate=1.0, sample_size=8_000, seed=0)
    assert fixed <= 0.003


def test_fixed_size_bounds_the_sample():
    ids = zipf_stream(50_000, 5_000, 0.8, 2)
    kb = np.random.default_rng(3).choice([4, 12], size=5_000)
    grid = np.arange(0, 40_001, 800)
    sp = shards.ShardsPass(kb, 12, grid, 1, sample_rate=1.0, sample_size=200, seed=0)
    sp.feed(ids, kb[ids].astype(np.int32), np.array([0, len(ids)]), 0, np.array([0, 1]))
    live = int((sp.item_at >= 0).sum())
    assert live <= 200 and sp.threshold < shards.SHARDS_MODULUS
    assert live == int((sp.tkey >= 0).sum())  # the table holds exactly the live keys
    est, n = shards.shards_binned_hits(ids, grid, sample_rate=1.0, sample_size=200, key_bytes=kb)
    exact, _ = stack.binned_hits(ids, grid, key_bytes=kb)
    assert np.all(np.diff(est[0]) >= -1e-9)
    assert np.abs(est[0] - exact[0]).mean() / n[0] < 0.03


def test_bad_inputs():
    with pytest.raises(ConfigError):
        stack.lru_hit_counts(np.array([-1, 2]))
    with pytest.raises(ConfigError):
        lru.emb_lru_misses(np.array([1, 2]), -1)
    with pytest.raises(ConfigError, match="sample_rate"):
        shards.shards_binned_hits(np.array([1, 2]), np.array([1]), sample_rate=0.0)
    with pytest.raises(ConfigError, match="key_bytes"):
        stack.binned_hits(np.array([1, 2]), np.array([1]), key_bytes=np.array([1, 0, 3]))
    with pytest.raises(ConfigError, match="sorted"):
        stack.binned_hits(np.array([1, 2]), np.array([5, 1]))
    assert lru.emb_lru_misses(np.zeros(0, np.int32), 3) == 0


def _err(fn, *args, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kw)
    return info.value


def test_as_ids_checks_and_sizes():
    ids, n = stack.as_ids(np.array([2, 0, 2], np.int64), None)
    assert ids.dtype == np.int32 and ids.flags.c_contiguous and n == 3
    assert ids.tolist() == [2, 0, 2]
    assert stack.as_ids(np.array([2, 0]), 3)[1] == 3  # n_ids = largest id + 1 is enough
    assert stack.as_ids(np.array([2, 0]), 7)[1] == 7
    e0, n0 = stack.as_ids(np.zeros(0, np.int32), None)
    assert len(e0) == 0 and n0 == 0
    assert stack.as_ids(np.zeros(0, np.int32), 4)[1] == 4
    e = _err(stack.as_ids, np.array([0, -1]), None)
    assert (str(e), e.hint) == ("stack distances need dense ids >= 0", "number keys 0..n-1")
    e = _err(stack.as_ids, np.array([0, 4, 1]), 4)
    assert (str(e), e.hint) == ("n_ids=4 but the stream holds id 4", "pass n_ids")
    stack.as_ids(np.array([0]), 1)  # id 0 alone


def test_as_sizes_checks():
    ones = stack.as_sizes(None, 3)
    assert ones.dtype == np.int64 and ones.tolist() == [1, 1, 1]
    kb = stack.as_sizes(np.array([4, 1, 9], np.int32), 2)  # more sizes than keys: fine
    assert kb.dtype == np.int64 and kb.tolist() == [4, 1, 9]
    for bad in ([4], [4, 0], [-1, 3]):
        e = _err(stack.as_sizes, np.array(bad), 2)
        assert str(e) == "key_bytes needs a positive size for each of the 2 keys"
        assert e.hint == "pass one entry per dense key"
    assert len(stack.as_sizes(np.zeros(0, np.int64), 0)) == 0


def test_stream_sizes():
    ids = np.array([1, 0, 1, 2], np.int32)
    got = stack.stream_sizes(ids, None, np.ones(3, np.int64))
    assert got.dtype == np.int32 and got.tolist() == [1, 1, 1, 1]
    got = stack.stream_sizes(ids, np.full(3, 7), np.full(3, 7, np.int64))  # one size
    assert got.dtype == np.int32 and got.tolist() == [7, 7, 7, 7]
    got = stack.stream_sizes(ids, np.array([5, 6, 8]), np.array([5, 6, 8], np.int64))
    assert got.dtype == np.int32 and got.tolist() == [6, 5, 6, 8]


def test_window_sums_against_slices():
    # per-window sums of a bare stream: requests group accesses, windows group requests
    # (empty windows and empty requests included), int64 even for int32 values near 2^31
    rng = np.random.default_rng(3)
    per_req = rng.integers(0, 4, 40)
    offs = np.concatenate([[0], np.cumsum(per_req)]).astype(np.int64)
    vals = rng.integers(2**30, 2**31 - 1, int(offs[-1])).astype(np.int32)
    edges = np.array([0, 0, 7, 7, 23, 40], np.int64)
    got = stack.window_sums(vals, offs, edges)
    want = [int(vals[offs[a] : offs[b]].astype(np.int64).sum())
            for a, b in zip(edges[:-1], edges[1:], strict=True)]  # fmt: skip
    assert got.dtype == np.int64 and got.tolist() == want
    assert want[0] == want[2] == 0 and max(want) > 2**31


def test_check_grid():
    g = stack.check_grid(np.array([0, 3, 3, 10], np.int32))
    assert g.dtype == np.int64 and g.tolist() == [0, 3, 3, 10]
    assert len(stack.check_grid(np.zeros(0, np.int64))) == 0
    for bad in ([3, 2], [-1, 5], [0, 5, 4]):
        e = _err(stack.check_grid, np.array(bad))
        assert (str(e), e.hint) == ("capacities must be sorted and >= 0", "sort the grid")


def test_size_classes_edges():
    kb = np.array([3, 5, 3])
    grid = np.array([0, 2, 3, 4, 5, 6])
    got = [(b, i.tolist()) for b, i in stack.size_classes(kb, grid)]
    assert got == [(3, [2, 3]), (5, [4, 5])]
    assert stack.size_classes(np.zeros(0, np.int64), grid) == []
    assert stack.size_classes(kb, np.array([0, 1, 2])) == []  # all below the smallest key
    one = stack.size_classes(np.array([4, 4]), np.array([4]))
    assert [(b, i.tolist()) for b, i in one] == [(4, [0])]


def test_window_of_requests():
    w = stack.window_of_requests(None, 5)
    assert w.dtype == np.int64 and w.tolist() == [0, 5]
    assert stack.window_of_requests(np.array([0, 2, 2, 5]), 5).tolist() == [0, 2, 2, 5]
    msg = "window edges must run from 0 to 5 requests, non-decreasing"
    for bad in ([0], [1, 5], [0, 4], [0, 3, 2, 5], [0, 6]):
        e = _err(stack.window_of_requests, np.array(bad), 5)
        assert (str(e), e.hint) == (msg, "use arrays.window_edges")


# ids:   a b a c b a   (a=0, b=1, c=2), unit sizes.
# row stack distances: a -, b -, a 2, c -, b 3, a 3  -> hits at capacity >= d
UNIT_IDS = np.array([0, 1, 0, 2, 1, 0], np.int32)


def test_unit_lru_hit_counts_by_hand():
    assert stack.lru_hit_counts(UNIT_IDS).tolist() == [0, 0, 1, 3]
    # n_ids larger than the stream's ids: capacities up to n_ids
    assert stack.lru_hit_counts(UNIT_IDS, 5).tolist() == [0, 0, 1, 3, 3, 3]
    d = stack.stack_distances(UNIT_IDS)
    assert d.dtype == np.int64 and d.tolist() == [0, 0, 2, 0, 3, 3]  # integer distances
    assert stack.lru_hit_counts(np.zeros(0, np.int32)).tolist() == [0]


def test_binned_hits_unit_grid_between_distances():
    hits, look = stack.binned_hits(UNIT_IDS, np.array([1, 2, 3, 9]))
    assert hits.tolist() == [[0, 1, 3, 3]] and look.tolist() == [6]
    hits, _ = stack.binned_hits(UNIT_IDS, np.array([0, 2]))
    assert hits.tolist() == [[0, 1]]
    hits, look = stack.binned_hits(UNIT_IDS, np.zeros(0, np.int64))
    assert hits.shape == (1, 0) and look.tolist() == [6]


def test_binned_hits_bytes_by_hand():
    # sizes a=2, b=3, c=4.  byte distances: a -, b -, a 2+3=5, c -, b 3+4+2=9, a 2+3+4=9
    kb = np.array([2, 3, 4])
    assert stack.stack_distances(UNIT_IDS, kb).tolist() == [0, 0, 5, 0, 9, 9]
    grid = np.array([0, 1, 2, 3, 4, 5, 8, 9, 100])
    hits, look = stack.binned_hits(UNIT_IDS, grid, key_bytes=kb)
    assert look.tolist() == [2 + 3 + 2 + 4 + 3 + 2]
    # C < 2: nothing fits. C in [2, 3): only a fits; a's re-accesses are 2 and 3 (a a ...)
    #   substream of keys <= 2 bytes: a, a, a: hits 2 + 2 = 4.
    # C in [3, 4): keys a, b (<= 3 bytes): a b a b a: distances a 5, b 5, a 5 -> none < 5.
    # C in [4, 5): every key fits alone: distances 5, 9, 9 -> none.
    # C in [5, 9): a's 5 hits (2 bytes); C >= 9: also b (3) and a (2): 7.
    want = [0, 0, 4, 0, 0, 2, 2, 7, 7]
    assert hits.tolist() == [want]


def test_binned_hits_windows_and_offsets():
    # requests: [a b] [a] [c b] [a]; windows: requests [0, 2) and [2, 4) and an empty one
    offs = np.array([0, 2, 3, 5, 6])
    edges = np.array([0, 2, 2, 4])
    kb = np.array([2, 3, 4])
    grid = np.array([5, 9])
    hits, look = stack.binned_hits(UNIT_IDS, grid, key_bytes=kb, offsets=offs, edges=edges)
    # window 0 (a b a): a at 5 hits at both; window 2 (c b a): b 9 and a 9 at 9 only
    assert hits.tolist() == [[2, 2], [0, 0], [0, 5]]
    assert look.tolist() == [7, 0, 9]
    assert hits.dtype == np.int64 and look.dtype == np.int64
    # unit sizes, same windows: a at 2 (window 0); b at 3, a at 3 (window 2)
    hits, look = stack.binned_hits(UNIT_IDS, np.array([1, 2, 3]), offsets=offs, edges=edges)
    assert hits.tolist() == [[0, 1, 1], [0, 0, 0], [0, 0, 2]]
    assert look.tolist() == [3, 0, 3]


def test_stack_pass_fed_in_chunks_equals_one_pass():
    """A stream fed in two chunks (the second starting at request r0) gives one pass's bins."""
    kb = np.array([2, 3, 4], np.int64)
    grid = np.array([5, 9], np.int64)
    sizes = kb[UNIT_IDS].astype(np.int32)
    edges = np.array([0, 3, 6])
    sp = stack.StackPass(kb, 4, grid, 2)
    sp.feed(UNIT_IDS[:3], sizes[:3], np.arange(4), 0, edges)
    sp.feed(UNIT_IDS[3:], sizes[3:], np.arange(4), 3, edges)
    # window 0 (a b a): a hits at 5; window 1 (c b a): b and a at 9
    assert sp.hit_bytes().tolist() == [[2, 2], [0, 5]]
    assert sp.acc[:, -1].tolist() == [5, 4]  # first accesses: a + b, then c


def test_stack_pass_size_class_skips_larger_keys():
    """The class of 3-byte keys never caches c (4 bytes): a b a c b a -> distances a 5, b 5, a 5."""
    kb = np.array([2, 3, 4], np.int64)
    sizes = kb[UNIT_IDS].astype(np.int32)
    sp = stack.StackPass(kb, 3, np.array([3, 4, 5]), 1)
    sp.feed(UNIT_IDS, sizes, np.array([0, 6]), 0, np.array([0, 1]))
    assert sp.hit_bytes().tolist() == [[0, 0, 2 + 3 + 2]]
    # one size in the class: counted in rows of that size
    kb1 = np.array([3, 3, 8], np.int64)
    sp1 = stack.StackPass(kb1, 3, np.array([2, 3, 5, 6]), 1)
    assert not sp1.weighted and sp1.grid.tolist() == [0, 1, 1, 2]
    sp1.feed(UNIT_IDS, kb1[UNIT_IDS].astype(np.int32), np.array([0, 6]), 0, np.array([0, 1]))
    # substream a b a b a (c skipped): distances 2, 2, 2 rows: 3 hits of 3 bytes at >= 6
    assert sp1.hit_bytes().tolist() == [[0, 0, 0, 9]]


def test_many_distinct_keys_force_compactions():
    """2 * keys + 16 slots: a cyclic stream of 40 keys compacts often; distances stay exact."""
    ids = np.tile(np.arange(40, dtype=np.int32), 6)
    d = stack.stack_distances(ids)
    assert d[:40].tolist() == [0] * 40 and (d[40:] == 40).all()
    kb = np.arange(1, 41)
    db = stack.stack_distances(ids, kb)
    assert (db[40:] == kb.sum()).all()
    hits = stack.lru_hit_counts(ids)
    assert hits[:40].tolist() == [0] * 40 and hits[40] == 200  # LRU thrashes below 40 rows
    h, _ = stack.binned_hits(ids, np.array([819, 820]), key_bytes=kb)
    assert h.tolist() == [[0, 5 * 820]]


def test_more_input_edges():
    assert stack.window_of_requests(np.array([0, 5]), 5).tolist() == [0, 5]  # one window
    got = stack.stream_sizes(np.array([0, 0], np.int32), np.array([6]), np.array([6], np.int64))
    assert got.tolist() == [6, 6]  # one key: one size
    with pytest.raises(ConfigError, match="n_ids=3 but the stream holds id 4"):
        stack.binned_hits(np.array([0, 4]), np.array([1]), n_ids=3)
    with pytest.raises(ConfigError, match="n_ids=3 but the stream holds id 4"):
        stack.stack_distances(np.array([0, 4]), n_ids=3)


def test_stack_pass_layout_follows_the_docstring():
    """M = 2 * keys + 16 slots; bytes: a 1-based int64 Fenwick tree of M + 1 entries; rows: a
    bit per slot and an int32 tree over the ceil(M / 64) blocks."""
    kb = np.array([2, 3, 4, 9], np.int64)
    sp = stack.StackPass(kb, 4, np.array([5, 9]), 2)  # class of 3 keys, three sizes
    assert sp.weighted and len(sp.item_at) == 2 * 3 + 16 and len(sp.tree) == 2 * 3 + 16 + 1
    assert sp.tree.dtype == np.int64 and sp.grid.tolist() == [5, 9]
    rows = stack.StackPass(np.array([4, 4, 4, 4, 4]), 4, np.array([8]), 1)  # one size: rows
    assert not rows.weighted and len(rows.item_at) == 26 and len(rows.tree) == 1 + 1
    assert rows.tree.dtype == np.int32 and rows.grid.tolist() == [2]
    assert rows.bits.dtype == np.uint64 and len(rows.bits) == 1 and len(sp.bits) == 0
    big = stack.StackPass(np.full(60, 4), 4, np.array([8]), 1)  # 136 slots: 3 blocks
    assert len(big.item_at) == 136 and len(big.tree) == 3 + 1 and len(big.bits) == 3
    assert sp.hit_bytes().dtype == np.int64 and sp.hit_bytes().shape == (2, 2)


def test_stack_pass_edge_classes():
    """No key in the class: nothing is cached; an empty grid: no capacities to fill."""
    kb = np.array([2, 3, 4], np.int64)
    sizes = kb[UNIT_IDS].astype(np.int32)
    none = stack.StackPass(kb, 1, np.array([1, 5, 9]), 1)
    none.feed(UNIT_IDS, sizes, np.array([0, 6]), 0, np.array([0, 1]))
    assert none.hit_bytes().tolist() == [[0, 0, 0]]
    one = np.array([3, 3, 3], np.int64)
    empty = stack.StackPass(one, 3, np.zeros(0, np.int64), 1)
    empty.feed(UNIT_IDS, one[UNIT_IDS].astype(np.int32), np.array([0, 6]), 0, np.array([0, 1]))
    assert empty.hit_bytes().shape == (1, 0)
    assert empty.acc.tolist() == [[18]]  # every access lands past the (empty) grid


def test_byte_distances_beyond_int32():
    """Byte-weighted distances above 2**31 (GB-sized keys): a b a hits only at >= a + b bytes."""
    kb = np.array([1_500_000_000, 1_400_000_000], np.int64)
    ids = np.array([0, 1, 0], np.int32)
    total = 2_900_000_000
    hits, look = stack.binned_hits(ids, np.array([total - 1, total]), key_bytes=kb)
    assert hits.tolist() == [[0, 1_500_000_000]]
    assert look.tolist() == [4_400_000_000]
    assert stack.stack_distances(ids, kb).tolist() == [0, 0, total]
