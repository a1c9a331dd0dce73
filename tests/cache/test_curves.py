"""compute_curves against per-capacity core.replay, plus footprint, knee, config and parquet I/O.

On a three-request trace worked out by hand, the tests after the replay comparison pin what it
leaves open: every column of the
curves table of a tiny trace (one 1-byte key, KV 16 bytes per token, an empty window,
windows whose lookups or context are exactly 1 byte or token), the progress calls, the
settings handed to the EMB pass (KV capacity, SHARDS sampling, the stream sink), the
error texts, ``capacity_grid`` on hand-picked footprints, the knee of hand-made curves,
``table_info``, the parquet metadata and ``read_table``'s checks.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import small_table
from test_core import MULTI, BruteNode, model

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core, embstream
from helm_plan.cache import curves as C
from helm_plan.cache.footprint import Footprint, footprint
from helm_plan.cache.knee import kneedle
from helm_plan.cache.shards import SHARDS_MODULUS
from helm_plan.errors import ConfigError, InputFileError
from helm_plan.pool import Pool
from helm_plan.profiles import EmbTable, load_gpu

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


@pytest.mark.parametrize(("explicit", "kv_first"), [(True, False), (False, False), (True, True)])
def test_curves_equal_per_size_replay_at_every_sampled_capacity(explicit, kv_first):
    # kv_first: the compile-ahead process's order of the passes (helm_plan.analyze.warm)
    wl, pool = _setup(explicit=explicit)
    cfg = C.CurvesConfig(window_s=3.0, ratio=0.3, n_points=21)
    ticks = []
    cv = C.compute_curves(wl, GPU, MODEL, pool, cfg, lambda d, t: ticks.append((d, t)),
                          kv_first=kv_first)  # fmt: skip
    assert ticks[-1] == (4, 4) and len(ticks) == 5
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


M1 = model([EmbTable("item", dim=1, dtype_bytes=1)], max_seq_len=40, chunk=1)  # 1-byte rows
NAN = float("nan")


def _tiny_arrays():
    # r0 t=0: u0 reads item 7; r1 t=1: u1 reads item 7; r2 t=3: u0 again, no new item.
    # No candidates. Windows of 1 s: [0,1) r0, [1,2) r1, [2,3) empty, [3,4) r2.
    t = trace.make_table(
        np.array([0.0, 1.0, 3.0]),
        np.array([0, 1, 0]),
        np.array([0, 1, 2, 2]),
        np.array([7, 7]),
        np.zeros(3, np.int64),
        candidates_offsets=np.zeros(4, np.int64),
        candidates_values=np.zeros(0, np.int64),
    )
    return A.from_table(t)


CFG = C.CurvesConfig(window_s=1.0, ratio=0.25, n_points=3)
POOL = Pool(64, "test")
# Grid: 0, geomspace(1, 64, 2) = {1, 64}, the split 0.25 * 64 = 16, the EMB footprint 1 (one
# 1-byte key) and the KV footprint 2 tokens * 16 = 32 bytes.
CAPS = [0, 1, 16, 32, 64]
# KV tokens at each capacity: 0, 0, 1, 2, 4. The emb curve's KV capacity: 0.75 * 64 / 16 = 3.
#
# emb (KV 3 tokens): r0 looks item 7 up (miss), r1 too (hit from 1 byte), r2 reuses its one
#   cached token and looks nothing up. Whole: 1 hit byte of 2.
# emb_kv0: r2 recomputes its token: 3 lookups, 2 hits from 1 byte.
# kv: r2 reuses u0's 1 token if u0 survived u1's insert: from 2 tokens. Context 1 a request.
WANT = {
    ("emb", -1): ([0, 0.5, 0.5, 0.5, 0.5], 2),
    ("emb", 0): ([0, 0, 0, 0, 0], 1),
    ("emb", 1): ([0, 1, 1, 1, 1], 1),
    ("emb", 2): ([NAN] * 5, 0),
    ("emb", 3): ([NAN] * 5, 0),
    ("emb_kv0", -1): ([0] + [2 / 3] * 4, 3),
    ("emb_kv0", 0): ([0, 0, 0, 0, 0], 1),
    ("emb_kv0", 1): ([0, 1, 1, 1, 1], 1),
    ("emb_kv0", 2): ([NAN] * 5, 0),
    ("emb_kv0", 3): ([0, 1, 1, 1, 1], 1),
    ("kv", -1): ([0, 0, 0, 1 / 3, 1 / 3], 3),
    ("kv", 0): ([0, 0, 0, 0, 0], 1),
    ("kv", 1): ([0, 0, 0, 0, 0], 1),
    ("kv", 2): ([NAN] * 5, 0),
    ("kv", 3): ([0, 0, 0, 1, 1], 1),
}


def test_tiny_trace_curves_by_hand():
    calls = []
    cv = C.compute_curves(_tiny_arrays(), GPU, M1, POOL, CFG, lambda d, n: calls.append((d, n)))
    assert calls == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    t = cv.table
    assert t.schema == pl.Schema(C.SCHEMA)
    assert t.height == len(WANT) * len(CAPS)
    keys = t.select("kind", "window").unique(maintain_order=True).rows()
    assert keys == list(WANT)  # kinds in KINDS order, the whole trace first, then windows
    for (kind, w), (rates, n_acc) in WANT.items():
        g = t.filter((pl.col("kind") == kind) & (pl.col("window") == w))
        assert g["capacity_bytes"].to_list() == CAPS
        assert g["pool_fraction"].to_list() == [c / 64 for c in CAPS]
        np.testing.assert_allclose(g["hit_rate"].to_numpy(), rates, atol=1e-12, err_msg=kind)
        assert g["n_accesses"].to_list() == [n_acc] * 5, (kind, w)
        start, end = (0.0, 3.0) if w == -1 else (float(w), float(w + 1))
        assert g["window_start_s"].to_list() == [start] * 5
        assert g["window_end_s"].to_list() == [end] * 5
        assert g["exact"].to_list() == [True] * 5
    assert cv.gpu == GPU.name and cv.model == "t" and cv.pool_bytes == 64
    assert cv.kv_bytes_per_token == 16
    assert cv.emb_kv_tokens == 3 and type(cv.emb_kv_tokens) is int
    assert cv.footprint == Footprint(n_keys=1, emb_bytes=1, kv_tokens=2, kv_bytes=32)
    assert cv.config is CFG
    assert cv.tables == (
        {"name": "item", "key": "identity", "rows": 0, "row_bytes": 1,
         "per_history_token": 1, "per_candidate": 1, "n_keys": 1},
    )  # fmt: skip
    # knees: the kv curves rise at 32 bytes (Kneedle on log bytes); the others are flat
    knees = {(k, w): c for k, w, c, *_ in cv.knees.rows()}
    assert knees == {kw: (32 if kw in (("kv", -1), ("kv", 3)) else None) for kw in WANT}
    # the whole-trace figures from a Workload are the same
    wl = core.Workload.of(_tiny_arrays(), M1)
    assert C.compute_curves(wl, GPU, M1, POOL, CFG).table.equals(t)
    # 2-second windows: [0, 2) holds r0 and r1, [2, 4) holds r2
    two = C.compute_curves(wl, GPU, M1, POOL, C.CurvesConfig(window_s=2.0, ratio=0.25, n_points=3))
    g = two.curve("kv", 1)
    assert g["window_start_s"][0] == 2.0 and g["window_end_s"][0] == 4.0
    assert two.curve("kv")["window_end_s"][0] == 3.0  # the whole trace ends at its last request
    # curve() and hit_rate_at() read one kind and window
    assert cv.curve("kv", 3)["hit_rate"].to_list() == [0, 0, 0, 1, 1]
    assert cv.hit_rate_at("kv", 0.375, 3) == pytest.approx(0.5)  # halfway from 16 to 32 bytes
    assert cv.hit_rate_at("kv", 0.75) == pytest.approx(1 / 3)
    assert cv.hit_rate_at("emb_kv0", 1 / 128) == pytest.approx(1 / 3)  # halfway 0 to 1 byte
    with pytest.raises(ConfigError) as e:
        cv.curve("emb0")
    assert str(e.value) == "unknown curve kind 'emb0'"
    assert e.value.hint == "one of emb, emb_kv0, kv"


def test_emb_passes_get_the_kv_capacity_sampling_and_sink(monkeypatch):
    seen = []
    real = embstream.emb_hits

    def spy(wl, kv_tokens, grid, edges, *, sampling=None, sink=None):
        seen.append((kv_tokens, sampling, sink))
        return real(wl, kv_tokens, grid, edges, sampling=sampling, sink=sink)

    monkeypatch.setattr(embstream, "emb_hits", spy)
    got = []

    def sink(first, offsets, keys, key_bytes):
        got.append(np.asarray(keys).tolist())

    C.compute_curves(_tiny_arrays(), GPU, M1, POOL, CFG, sink=sink)
    assert seen == [(3, None, sink), (0, None, None)]
    assert sum(got, []) == [0, 0]  # the emb stream: r0 and r1 look key 0 up, r2 reuses
    seen.clear()
    cfg = C.CurvesConfig(window_s=1.0, sample_rate=0.5, sample_size=7, seed=3, shards_adjust=False)
    cv = C.compute_curves(_tiny_arrays(), GPU, M1, POOL, cfg)
    want = embstream.Sampling(rate=0.5, size=7, seed=3, adjust=False)
    assert [s for _, s, _ in seen] == [want, want]
    assert not cv.curve("emb")["exact"].any() and cv.curve("kv")["exact"].all()


def test_refused_inputs():
    empty = trace.make_table(
        np.zeros(0), np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64),
        np.zeros(0, np.int64),
    )  # fmt: skip
    with pytest.raises(ConfigError) as e:
        C.compute_curves(A.from_table(empty), GPU, M1, POOL, CFG)
    assert str(e.value) == "cannot measure curves of an empty trace"
    assert e.value.hint == "pass a non-empty trace"
    with pytest.raises(ConfigError, match="pool_bytes must be positive"):
        C.compute_curves(_tiny_arrays(), GPU, M1, Pool(0, "empty"), CFG)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"window_s": 0.0}, "window_s must be positive, got 0.0"),
        ({"ratio": 1.5}, "ratio must be in [0.0, 1.0], got 1.5"),
        ({"ratio": -0.1}, "ratio must be in [0.0, 1.0], got -0.1"),
        ({"n_points": 1}, "n_points must be >= 2, got 1"),
        ({"sample_rate": 1.5}, "sample_rate must be in ["),
        ({"sample_rate": 0.5 / SHARDS_MODULUS}, "sample_rate must be in ["),
        ({"sample_size": 0}, "sample_size must be positive, got 0"),
    ],
)
def test_config_errors_name_the_field(kw, msg):
    with pytest.raises(ConfigError) as e:
        C.CurvesConfig(**kw)
    assert str(e.value).startswith(msg)
    if "n_points" in kw:
        assert e.value.hint == "set [curves] n_points >= 2 in the plan file"


def test_config_bounds_are_inclusive():
    for kw in (
        {"ratio": 0.0}, {"ratio": 1.0}, {"n_points": 2}, {"sample_rate": 1.0},
        {"sample_rate": 1.0 / SHARDS_MODULUS}, {"sample_size": 1},
    ):  # fmt: skip
        C.CurvesConfig(**kw)
    assert not C.CurvesConfig().sampled
    assert C.CurvesConfig(sample_size=5).sampled and C.CurvesConfig(sample_rate=0.5).sampled


def test_capacity_grid_by_hand():
    m = model([EmbTable("wide", dim=32, dtype_bytes=1)])  # 32-byte rows, 16 KV bytes a token
    cfg = C.CurvesConfig(ratio=0.25, n_points=4)
    fp = Footprint(n_keys=3, emb_bytes=500, kv_tokens=125, kv_bytes=2000)
    # lo = min(32, 16, 1000) = 16; geomspace(16, 1000, 3) = 16, 126.49, 1000; the split 250;
    # the EMB footprint 500; the KV footprint is past the pool
    grid = C.capacity_grid(1000, m, cfg, fp)
    assert grid.tolist() == [0, 16, 126, 250, 500, 1000]
    assert grid.dtype == np.int64
    # rows narrower than a KV token set the low end: 8-byte rows, geomspace(8, 1000, 3)
    m8 = model([EmbTable("narrow", dim=8, dtype_bytes=1)])
    assert C.capacity_grid(1000, m8, cfg, fp).tolist() == [0, 8, 89, 250, 500, 1000]
    # a pool below every row and token: every log-spaced point is the pool itself
    assert C.capacity_grid(10, m, cfg, fp).tolist() == [0, 2, 10]


def _curve_table(groups):
    rows = []
    for kind, w, rates in groups:
        for c, r in zip([0, 1, 16, 32, 64], rates, strict=True):
            rows.append((kind, w, 0.0, 1.0, c, c / 64, r, 1, True))
    return pl.DataFrame(rows, schema=C.SCHEMA, orient="row")


def test_knees_on_log_bytes_by_hand():
    # Kneedle on log bytes of the positive capacities: x = log(1, 16, 32, 64) / log 64
    # = 0, 2/3, 5/6, 1. Rates 0, .9, 1, 1 -> y - x = 0, .233, .167, 0: knee at 16 bytes
    # (without the 1-byte point: x = 0, .5, 1 and y = 0, 1, 1, the knee would be 32).
    # Rates 0, 0, 1, 1: y - x = 0, -.667, .167, 0: knee at 32. Flat or linear: none.
    groups = [
        ("kv", 2, [0.0, 0.0, 0.9, 1.0, 1.0]),
        ("emb", -1, [0.0, 0.0, 0.0, 1.0, 1.0]),
        ("emb", 0, [0.5] * 5),
        ("kv", -1, [0.0, 0.0, 0.9, 1.0, 1.0]),
        ("emb_kv0", 1, [0.0, 0.0, 2 / 3, 5 / 6, 1.0]),
    ]
    knees = C._knees(_curve_table(groups))
    assert knees.schema == pl.Schema(C.KNEE_SCHEMA)
    assert knees.rows() == [
        ("kv", 2, 16, 0.25, 0.9),
        ("emb", -1, 32, 0.5, 1.0),
        ("emb", 0, None, None, None),
        ("kv", -1, 16, 0.25, 0.9),
        ("emb_kv0", 1, None, None, None),
    ]


def test_table_info_counts_keys_per_table():
    m = model(MULTI)
    t = trace.make_table(
        np.array([0.0, 1.0]), np.array([0, 1]), np.array([0, 2, 3]), np.array([5, 9, 5]),
        np.zeros(2, np.int64),
        candidates_offsets=np.zeros(3, np.int64), candidates_values=np.zeros(0, np.int64),
    )  # fmt: skip
    wl = core.Workload.of(A.from_table(t), m)
    info = C.table_info(wl, m)
    assert [d["name"] for d in info] == ["item", "cat", "seller", "ctx"]
    assert [d["key"] for d in info] == ["identity", "hash", "hash", "hash"]
    assert [d["rows"] for d in info] == [0, 7, 13, 3]
    assert [d["row_bytes"] for d in info] == [16, 4, 6, 8]
    assert [d["per_history_token"] for d in info] == [1, 1, 1, 0]
    assert [d["per_candidate"] for d in info] == [1, 1, 0, 1]
    # two distinct items: 2 identity rows; a hashed table has 1 or 2 rows of them
    n_keys = [d["n_keys"] for d in info]
    assert n_keys[0] == 2 and all(1 <= n <= 2 for n in n_keys[1:])
    assert sum(n_keys) == wl.n_keys
    # a trace that reaches no item: zero keys in every table
    none = trace.make_table(
        np.array([0.0]), np.array([0]), np.array([0, 0]), np.zeros(0, np.int64),
        np.zeros(1, np.int64),
        candidates_offsets=np.zeros(2, np.int64), candidates_values=np.zeros(0, np.int64),
    )  # fmt: skip
    wl0 = core.Workload.of(A.from_table(none), m)
    assert [d["n_keys"] for d in C.table_info(wl0, m)] == [0, 0, 0, 0]


def test_write_metadata_and_read_checks(tmp_path):
    cv = C.compute_curves(_tiny_arrays(), GPU, M1, POOL, CFG)
    p = C.write(cv, tmp_path / "c.parquet", {"trace": "t.parquet"})
    md = pq.read_schema(p).metadata
    meta = json.loads(md[b"helm_plan.curves"])
    assert meta == {
        "gpu": GPU.name,
        "model": "t",
        "pool_bytes": 64,
        "tables": [dict(d) for d in cv.tables],
        "kv_bytes_per_token": 16,
        "emb_kv_tokens": 3,
        "footprint": {"n_keys": 1, "emb_bytes": 1, "kv_tokens": 2, "kv_bytes": 32},
        "config": {
            "window_s": 1.0, "ratio": 0.25, "n_points": 3, "sample_rate": 1.0,
            "sample_size": None, "shards_adjust": True, "seed": 0, "worst_case": True,
        },
        "knees": json.loads(json.dumps(cv.knees.to_dicts())),
    }  # fmt: skip
    assert len(meta["knees"]) == 15
    assert json.loads(md[b"helm_plan.provenance"]) == {"trace": "t.parquet"}
    assert C.read_table(p).equals(cv.table)
    q = C.write(cv, tmp_path / "d.parquet")
    assert b"helm_plan.provenance" not in pq.read_schema(q).metadata
    assert C.read_table(q).equals(cv.table)

    missing = tmp_path / "none.parquet"
    with pytest.raises(InputFileError) as e:
        C.read_table(missing)
    assert str(e.value) == f"curves file {missing} not found"
    assert e.value.hint == "create it with `helm-plan profile`"

    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(InputFileError) as e:
        C.read_table(bad)
    assert str(e.value).startswith(f"cannot read {bad} as parquet: ")
    assert e.value.hint == "pass a curves file from `helm-plan profile`"
    assert e.value.__cause__ is not None

    part = tmp_path / "part.parquet"
    pq.write_table(cv.table.drop("kind", "hit_rate").to_arrow(), part)
    with pytest.raises(InputFileError) as e:
        C.read_table(part)
    assert str(e.value) == f"{part} is not a curves file: column 'kind' missing"
    assert e.value.hint == "pass a curves file from `helm-plan profile`"


def test_without_the_worst_case_the_other_curves_are_the_same_rows():
    # analyze skips the emb_kv0 pass by default: emb and kv must not move, and the missing
    # curve is an error, not an empty frame a caller would plot as "no hits"
    a = _tiny_arrays()
    full = C.compute_curves(a, GPU, M1, POOL, CFG)
    lean = C.compute_curves(a, GPU, M1, POOL, dataclasses.replace(CFG, worst_case=False))
    assert set(full.table["kind"]) == {"emb", "emb_kv0", "kv"}
    assert set(lean.table["kind"]) == {"emb", "kv"}
    assert lean.table.equals(full.table.filter(pl.col("kind") != "emb_kv0"))
    assert lean.knees.equals(full.knees.filter(pl.col("kind") != "emb_kv0"))
    with pytest.raises(ConfigError, match="emb_kv0 curve was not measured"):
        lean.curve("emb_kv0")
