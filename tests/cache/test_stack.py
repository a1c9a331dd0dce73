"""Stack distances, the EMB-only LRU and SHARDS against brute force and libcachesim."""

from __future__ import annotations

import csv
from collections import OrderedDict
from pathlib import Path

import libcachesim as lcs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helm_plan.cache import lru, stack
from helm_plan.errors import ConfigError


def brute_misses(ids: list[int], cap: int) -> int:
    od: OrderedDict[int, None] = OrderedDict()
    miss = 0
    for x in ids:
        if x in od:
            od.move_to_end(x)
        else:
            miss += 1
            if cap > 0:
                if len(od) >= cap:
                    od.popitem(last=False)
                od[x] = None
    return miss


def zipf_stream(n: int, n_ids: int, alpha: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_ids + 1) ** alpha
    x = rng.choice(n_ids, size=n, p=p / p.sum())
    return rng.permutation(n_ids)[x].astype(np.int32)


@settings(max_examples=25, deadline=None)
@given(
    ids=st.lists(st.integers(0, 40), min_size=0, max_size=400),
    caps=st.lists(st.integers(0, 45), min_size=1, max_size=4),
)
def test_hits_equal_brute_force_lru(ids, caps):
    arr = np.array(ids, np.int32)
    hc = stack.lru_hit_counts(arr, 41)
    for cap in caps:
        want = brute_misses(ids, cap)
        assert lru.emb_lru_misses(arr, cap, 41) == want
        assert len(ids) - hc[min(cap, 41)] == want
    # SHARDS at rate 1 is the exact curve
    grid = np.arange(0, 46)
    est, n = stack.shards_binned_hits(arr, grid, sample_rate=1.0, n_ids=41)
    exact, n2 = stack.binned_hits(arr, grid, n_ids=41)
    np.testing.assert_array_equal(n, n2)
    np.testing.assert_allclose(est, exact)


def test_stack_distances_brute_force_and_compaction():
    ids = zipf_stream(8_000, 200, 0.9, 3)  # many compactions of the 2*200+16-slot tree
    d = stack.stack_distances(ids)
    seen: list[int] = []
    want = []
    for x in ids.tolist():
        if x in seen:
            k = seen.index(x)
            want.append(k + 1)
            seen.pop(k)
        else:
            want.append(0)
        seen.insert(0, x)
    np.testing.assert_array_equal(d, want)


def test_windows_are_warm_and_sum_to_whole():
    ids = zipf_stream(5_000, 300, 1.0, 1)
    offs = np.arange(0, 5_001, 10, dtype=np.int64)  # 500 requests of 10 accesses
    win = (np.arange(500) // 100).astype(np.int32)
    grid = np.array([0, 5, 50, 299])
    hits, n = stack.binned_hits(ids, grid, offsets=offs, request_window=win, n_windows=5)
    whole, _ = stack.binned_hits(ids, grid)
    np.testing.assert_array_equal(hits.sum(axis=0), whole[0])
    assert list(n) == [1000] * 5
    for cap_i, cap in enumerate(grid):  # window 3 with a warm LRU: replay prefix, diff misses
        m_end = brute_misses(ids[:4000].tolist(), int(cap))
        m_start = brute_misses(ids[:3000].tolist(), int(cap))
        assert hits[3, cap_i] == 1000 - (m_end - m_start)


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


def _lcs_misses(ids: np.ndarray, cap: int, path: Path) -> int:
    rec = np.zeros(len(ids), dtype=[("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nxt", "<i8")])
    rec["t"] = np.arange(len(ids))
    rec["id"] = ids
    rec["sz"] = 1
    rec["nxt"] = -1
    if not path.exists():
        rec.tofile(path)
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = lcs.LRU(cache_size=cap).process_trace(reader)
    return int(round(miss_ratio * len(ids)))


def test_hits_equal_libcachesim_on_real_datasets(datasets, tmp_path):
    for name, ids in _real_streams(datasets).items():
        n_ids = int(ids.max()) + 1
        hc = stack.lru_hit_counts(ids)
        path = tmp_path / f"{name}.oracleGeneral"
        for frac in (0.005, 0.02, 0.1, 0.5):
            cap = max(1, int(frac * n_ids))
            want = _lcs_misses(ids, cap, path)
            assert lru.emb_lru_misses(ids, cap) == want, (name, cap)
            assert len(ids) - int(hc[cap]) == want, (name, cap)


def test_shards_small_fast_variant():
    ids = zipf_stream(300_000, 30_000, 1.0, 7)
    grid = np.linspace(0, 30_000, 51).astype(np.int64)
    maes = [stack.shards_mae(ids, grid, sample_rate=0.1, seed=s) for s in range(3)]
    assert float(np.median(maes)) < 0.005 and max(maes) < 0.01, maes
    fs = [stack.shards_mae(ids, grid, sample_rate=1.0, sample_size=2000, seed=s) for s in range(3)]
    assert max(fs) < 0.01, fs
    # unadjusted SHARDS is a valid estimator too, just noisier
    assert stack.shards_mae(ids, grid, sample_rate=0.1, seed=0, adjust=False) < 0.1


@pytest.mark.slow
def test_shards_one_percent_within_0002_mae_on_5m_accesses():
    ids = zipf_stream(5_000_000, 1_000_000, 1.0, 1)
    grid = np.linspace(0, 1_000_000, 101).astype(np.int64)
    maes = [stack.shards_mae(ids, grid, sample_rate=0.01, seed=s) for s in range(5)]
    assert float(np.median(maes)) <= 0.002, maes
    assert max(maes) <= 0.003, maes
    fixed = stack.shards_mae(ids, grid, sample_rate=1.0, sample_size=8_000, seed=0)
    assert fixed <= 0.003


def test_fixed_size_bounds_the_sample():
    ids = zipf_stream(50_000, 5_000, 0.8, 2)
    grid = np.arange(0, 5_001, 100)
    est, n = stack.shards_binned_hits(ids, grid, sample_rate=1.0, sample_size=200)
    exact, _ = stack.binned_hits(ids, grid)
    assert np.all(np.diff(est[0]) >= -1e-9)
    assert np.abs(est[0] - exact[0]).mean() / n[0] < 0.03


def test_bad_inputs():
    with pytest.raises(ConfigError):
        stack.lru_hit_counts(np.array([-1, 2]))
    with pytest.raises(ConfigError):
        lru.emb_lru_misses(np.array([1, 2]), -1)
    with pytest.raises(ConfigError, match="sample_rate"):
        stack.shards_binned_hits(np.array([1, 2]), np.array([1]), sample_rate=0.0)
    assert lru.emb_lru_misses(np.zeros(0, np.int32), 3) == 0
