"""compute_curves against per-capacity core.replay, plus footprint, knee, config and parquet I/O."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import small_table
from test_core import MULTI, BruteNode, model

from helm_plan import arrays as A
from helm_plan.cache import core
from helm_plan.cache import curves as C
from helm_plan.cache.footprint import footprint
from helm_plan.cache.knee import kneedle
from helm_plan.errors import ConfigError, InputFileError
from helm_plan.pool import Pool
from helm_plan.profiles import load_gpu

MODEL = model(MULTI, max_seq_len=24, chunk=5)
GPU = load_gpu("a100-80g")


def _setup(seed=0, n=700, explicit=True):
    t = small_table(n, n_users=30, n_items=150, max_new=6, n_candidates=4, seed=seed,
                    with_candidates=explicit)  # fmt: skip
    wl = core.Workload.of(A.from_table(t, seed=seed), MODEL)
    fp = footprint(wl, MODEL)
    # a multiple of 20 bytes: the 21-point grid then lands on whole bytes at exact shares
    return wl, Pool(int(0.6 * fp.total_bytes) // 20 * 20, "test")


def _replay_rates(wl, emb_bytes, kv_tokens, edges):
    """(emb hit rate by bytes, kv reuse rate), whole trace then per window, from core.replay."""
    st = core.CacheState.empty(wl.keys.key_bytes, wl.arrays.n_users, int(emb_bytes), kv_tokens)
    r = core.replay(wl, st)
    n_win = len(edges) - 1
    win = np.repeat(np.arange(n_win), np.diff(edges))

    def rate(num, den):
        num = np.bincount(win, weights=num, minlength=n_win)
        den = np.bincount(win, weights=den, minlength=n_win)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.concatenate([[num.sum() / den.sum()], np.where(den > 0, num / den, np.nan)])

    return rate(r.lookup_bytes - r.miss_bytes, r.lookup_bytes), rate(r.n_reused, r.ctx_len)


@pytest.mark.parametrize("explicit", [True, False])
def test_curves_equal_per_size_replay_at_every_sampled_capacity(explicit):
    wl, pool = _setup(explicit=explicit)
    cfg = C.CurvesConfig(window_s=3.0, ratio=0.3, n_points=21)
    cv = C.compute_curves(wl, GPU, MODEL, pool, cfg)
    edges = A.window_edges(wl.arrays.ts_s, 3.0)
    n_win = len(edges) - 1
    emb_kv = core.capacities(0.3, pool.pool_bytes, MODEL)[1]
    assert cv.emb_kv_tokens == emb_kv
    t = cv.table
    assert t.columns == list(C.SCHEMA) and t["exact"].all()
    grid = C.capacity_grid(pool.pool_bytes, MODEL, cfg, footprint(wl, MODEL))
    assert t.height == 3 * (n_win + 1) * len(grid)
    for cap in cv.curve("emb")["capacity_bytes"].to_list():
        emb, _ = _replay_rates(wl, cap, emb_kv, edges)
        emb0, _ = _replay_rates(wl, cap, 0, edges)
        _, kv = _replay_rates(wl, 0, cap // MODEL.kv_bytes_per_token, edges)
        for kind, want in (("emb", emb), ("emb_kv0", emb0), ("kv", kv)):
            got = t.filter((t["kind"] == kind) & (t["capacity_bytes"] == cap)).sort("window")
            np.testing.assert_allclose(got["hit_rate"].to_numpy(), want, atol=1e-12, err_msg=kind)
    # the emb curve at pool share = ratio is the EMB hit rate of split 0.3
    emb_b = core.capacities(0.3, pool.pool_bytes, MODEL)[0]
    assert cv.hit_rate_at("emb", 0.3) == pytest.approx(
        _replay_rates(wl, emb_b, emb_kv, edges)[0][0], abs=1e-12
    )
    # n_accesses counts the keys looked up (all tables)
    r = core.kv_pass(wl, emb_kv)
    ids, _ = core.lookup_stream(wl, r.n_computed)
    assert cv.curve("emb")["n_accesses"][0] == len(ids)


def test_sampled_curves_are_flagged_and_close():
    wl, pool = _setup(seed=2, n=1500)
    exact = C.compute_curves(wl, GPU, MODEL, pool, C.CurvesConfig(n_points=11))
    est = C.compute_curves(wl, GPU, MODEL, pool, C.CurvesConfig(n_points=11, sample_rate=0.5))
    emb_e = est.curve("emb_kv0")
    assert not emb_e["exact"].any() and est.curve("kv")["exact"].all()
    diff = np.abs(emb_e["hit_rate"].to_numpy() - exact.curve("emb_kv0")["hit_rate"].to_numpy())
    assert diff.mean() < 0.05


def test_footprint_is_where_neither_cache_evicts():
    table = small_table(600, n_users=25, n_items=150, max_new=8, n_candidates=4, seed=5)
    m = model(MULTI, max_seq_len=20, chunk=6)
    wl = core.Workload.of(A.from_table(table), m)
    fp = footprint(wl, m)
    # EMB: every (table, row) key of the trace's items, recomputed by the brute-force node
    ref = BruteNode(m, 0, 0)
    items = {i for col in ("new_items", "candidates") for lst in table.column(col).to_pylist()
             for i in lst}  # fmt: skip
    keys = {ref.key(t, i) for i in items for t in range(len(m.tables))}
    assert fp.n_keys == len(keys)
    assert fp.emb_bytes == sum(m.tables[k[0]].row_bytes for k in keys)
    # ... and here every one is looked up in the KV-0 stream
    ids, _ = core.lookup_stream(wl, core.kv_pass(wl, 0).n_computed)
    assert fp.emb_bytes == int(wl.keys.key_bytes[np.unique(ids)].sum())
    # KV: the peak held by a cache that never evicts, replayed request by request
    st = core.CacheState.empty(wl.keys.key_bytes, wl.arrays.n_users, 0, 10**9)
    peak = 0
    for i in range(wl.arrays.n_requests):
        core.replay(wl, st, i, i + 1)
        peak = max(peak, st.kv_tokens_used)
    assert fp.kv_tokens == peak
    assert fp.kv_bytes == peak * m.kv_bytes_per_token
    np.testing.assert_array_equal(
        core.kv_pass(wl, fp.kv_tokens).n_reused, core.kv_pass(wl, 10**9).n_reused
    )
    # at the footprint the EMB cache misses only first accesses
    st = core.CacheState.empty(wl.keys.key_bytes, wl.arrays.n_users, fp.emb_bytes, 0)
    assert core.replay(wl, st).miss_bytes.sum() == fp.emb_bytes
    assert fp.total_bytes == fp.emb_bytes + fp.kv_bytes
    assert fp.fits(fp.total_bytes) and not fp.fits(fp.total_bytes - 1)


def test_kneedle():
    x = np.linspace(0, 1, 101)
    k = kneedle(x, 1 - np.exp(-10 * x))
    assert k is not None and 0.15 <= x[k] <= 0.35
    assert kneedle(x, np.full(101, 0.5)) is None  # flat
    assert kneedle(x, x) is None  # linear: no point above the chord
    assert kneedle(x[:2], x[:2]) is None


def test_knees_table_parquet_roundtrip_and_per_table_metadata(tmp_path):
    wl, pool = _setup(seed=3)
    cv = C.compute_curves(wl.arrays, GPU, MODEL, pool, C.CurvesConfig(window_s=5.0, n_points=11))
    assert cv.knees.columns == list(C.KNEE_SCHEMA)
    assert cv.knees.height == cv.table.select("kind", "window").unique().height
    p = C.write(cv, tmp_path / "c.parquet", {"trace": "x"})
    back = C.read_table(p)
    assert back.equals(cv.table)
    meta = json.loads(pq.read_schema(p).metadata[b"helm_plan.curves"])
    assert "row_bytes" not in meta
    assert [t["name"] for t in meta["tables"]] == [t.name for t in MODEL.tables]
    assert [t["row_bytes"] for t in meta["tables"]] == [t.row_bytes for t in MODEL.tables]
    assert sum(t["n_keys"] for t in meta["tables"]) == wl.n_keys
    with pytest.raises(InputFileError):
        C.read_table(tmp_path / "missing.parquet")


@pytest.mark.parametrize(
    "kw",
    [{"window_s": 0}, {"ratio": 1.5}, {"n_points": 1}, {"sample_rate": 0.0}, {"sample_size": 0}],
)
def test_config_validation(kw):
    with pytest.raises(ConfigError):
        C.CurvesConfig(**kw)


def test_grid_is_log_spaced_with_the_split_point_and_footprints():
    wl, _ = _setup()
    fp = footprint(wl, MODEL)
    B = 1000 * fp.total_bytes
    cfg = C.CurvesConfig(ratio=0.3, n_points=41)
    grid = C.capacity_grid(B, MODEL, cfg, fp)
    assert grid[0] == 0 and grid[-1] == B and np.all(np.diff(grid) > 0)
    assert {int(0.3 * B), fp.emb_bytes, fp.kv_bytes} <= set(grid.tolist())
    spaced = np.setdiff1d(grid[1:], [int(0.3 * B), fp.emb_bytes, fp.kv_bytes])
    # equal steps in log bytes (where flooring to whole bytes is negligible)
    step = np.diff(np.log(spaced[spaced >= 10_000]))
    np.testing.assert_allclose(step, step.mean(), rtol=1e-3)
    assert grid[1] == min(min(t.row_bytes for t in MODEL.tables), MODEL.kv_bytes_per_token)


def test_knee_of_a_small_footprint_is_below_it_not_on_the_first_point():
    # The EMB footprint is 0.1% of the pool: every capacity from the footprint up holds
    # every row, so the curve is flat there and its knee lies at or below the footprint.
    wl, _ = _setup()
    fp = footprint(wl, MODEL)
    pool = Pool(1000 * fp.total_bytes, "test")
    cv = C.compute_curves(wl, GPU, MODEL, pool, C.CurvesConfig(window_s=1e3))
    emb0 = cv.curve("emb_kv0")
    full = emb0.filter(pl.col("capacity_bytes") >= fp.emb_bytes)["hit_rate"]
    assert full.max() - full.min() < 1e-12  # saturated past the footprint
    knee = cv.knees.filter((pl.col("kind") == "emb_kv0") & (pl.col("window") == C.WHOLE))
    cap = knee["capacity_bytes"][0]
    first = emb0.filter(pl.col("capacity_bytes") > 0)["capacity_bytes"].min()
    assert first < cap <= fp.emb_bytes
    # A linear 101-point axis would have put it on its first point: 1% of the pool.
    lin = np.linspace(0, 1, 101) * pool.pool_bytes
    assert lin[1] > 5 * fp.emb_bytes
