"""Byte-weighted stack distances, the bare-stream LRU and SHARDS against brute force and libCacheSim."""

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
