"""compute_curves against per-size core.replay, plus footprint, knee, config and parquet I/O."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.cache import core
from helm_plan.cache import curves as C
from helm_plan.cache.footprint import footprint
from helm_plan.cache.knee import kneedle
from helm_plan.errors import ConfigError, InputFileError
from helm_plan.profiles import Pool, load_gpu, load_model

MODEL = dataclasses.replace(load_model("gr-small"), max_seq_len=24)
GPU = load_gpu("a100-80g")


def _setup(seed=0, n=700):
    a = A.from_table(small_table(n, n_users=30, n_items=150, max_new=6, n_candidates=4, seed=seed))
    fp = footprint(a, MODEL)
    pool = Pool(int(0.6 * fp.total_bytes), "test")
    return a, pool


def _replay_rates(a, emb_rows, kv_tokens, win, n_win):
    st = core.CacheState.empty(a.n_items, a.n_users, int(emb_rows), int(kv_tokens))
    r = core.replay(a, st, max_seq_len=MODEL.max_seq_len)
    lk = np.bincount(win, weights=r.n_lookup, minlength=n_win)
    miss = np.bincount(win, weights=r.n_miss, minlength=n_win)
    reused = np.bincount(win, weights=r.n_reused, minlength=n_win)
    ctx = np.bincount(win, weights=r.ctx_len, minlength=n_win)
    with np.errstate(invalid="ignore", divide="ignore"):
        emb = np.concatenate([[1 - miss.sum() / lk.sum()], np.where(lk > 0, 1 - miss / lk, np.nan)])
        kv = np.concatenate([[reused.sum() / ctx.sum()], np.where(ctx > 0, reused / ctx, np.nan)])
    return emb, kv


def test_curves_equal_per_size_replay_at_every_sampled_capacity():
    a, pool = _setup()
    cfg = C.CurvesConfig(window_s=3.0, ratio=0.3, n_points=21)
    cv = C.compute_curves(a, GPU, MODEL, pool, cfg)
    edges = A.window_edges(a.ts_s, 3.0)
    n_win = len(edges) - 1
    win = np.repeat(np.arange(n_win), np.diff(edges))
    emb_kv = core.capacities(0.3, pool.pool_bytes, MODEL)[1]
    assert cv.emb_kv_tokens == emb_kv
    t = cv.table
    assert t.columns == list(C.SCHEMA) and t["exact"].all()
    assert t.height == 3 * (n_win + 1) * 21
    for cap in cv.curve("emb")["capacity_bytes"].to_list():
        rows = cap // MODEL.row_bytes
        emb, _ = _replay_rates(a, rows, emb_kv, win, n_win)
        emb0, _ = _replay_rates(a, rows, 0, win, n_win)
        _, kv = _replay_rates(a, 0, cap // MODEL.kv_bytes_per_token, win, n_win)
        for kind, want in (("emb", emb), ("emb_kv0", emb0), ("kv", kv)):
            got = t.filter((t["kind"] == kind) & (t["capacity_bytes"] == cap)).sort("window")
            np.testing.assert_allclose(got["hit_rate"].to_numpy(), want, atol=1e-12, err_msg=kind)
    # the emb curve at pool share = ratio is the hit rate of split 0.3
    assert cv.hit_rate_at("emb", 0.3) == pytest.approx(
        _replay_rates(a, core.capacities(0.3, pool.pool_bytes, MODEL)[0], emb_kv, win, n_win)[0][0],
        abs=1e-12,
    )


def test_sampled_curves_are_flagged_and_close():
    a, pool = _setup(seed=2, n=1500)
    exact = C.compute_curves(a, GPU, MODEL, pool, C.CurvesConfig(n_points=11))
    est = C.compute_curves(a, GPU, MODEL, pool, C.CurvesConfig(n_points=11, sample_rate=0.5))
    emb_e = est.curve("emb_kv0")
    assert not emb_e["exact"].any() and est.curve("kv")["exact"].all()
    diff = np.abs(emb_e["hit_rate"].to_numpy() - exact.curve("emb_kv0")["hit_rate"].to_numpy())
    assert diff.mean() < 0.05


def test_footprint_is_independent_computation():
    table = small_table(300, seed=5)
    a = A.from_table(table)
    fp = footprint(a, MODEL)
    hist: dict[int, int] = {}
    for u, new in zip(
        table.column("user_id").to_pylist(), table.column("new_items").to_pylist(), strict=True
    ):
        hist[u] = hist.get(u, 0) + len(new)
    items = {i for lst in table.column("new_items").to_pylist() for i in lst}
    items |= {i for lst in table.column("candidates").to_pylist() for i in lst}
    assert fp.emb_bytes == len(items) * MODEL.row_bytes
    assert fp.kv_tokens == sum(min(h, MODEL.max_seq_len) for h in hist.values())
    assert fp.total_bytes == fp.emb_bytes + fp.kv_tokens * MODEL.kv_bytes_per_token
    assert fp.fits(fp.total_bytes) and not fp.fits(fp.total_bytes - 1)


def test_kneedle():
    x = np.linspace(0, 1, 101)
    k = kneedle(x, 1 - np.exp(-10 * x))
    assert k is not None and 0.15 <= x[k] <= 0.35
    assert kneedle(x, np.full(101, 0.5)) is None  # flat
    assert kneedle(x, x) is None  # linear: no point above the chord
    assert kneedle(x[:2], x[:2]) is None


def test_knees_table_and_parquet_roundtrip(tmp_path):
    a, pool = _setup(seed=3)
    cv = C.compute_curves(a, GPU, MODEL, pool, C.CurvesConfig(window_s=5.0, n_points=11))
    assert cv.knees.columns == list(C.KNEE_SCHEMA)
    assert cv.knees.height == cv.table.select("kind", "window").unique().height
    p = C.write(cv, tmp_path / "c.parquet", {"trace": "x"})
    back = C.read_table(p)
    assert back.equals(cv.table)
    with pytest.raises(InputFileError):
        C.read_table(tmp_path / "missing.parquet")


@pytest.mark.parametrize(
    "kw",
    [{"window_s": 0}, {"ratio": 1.5}, {"n_points": 1}, {"sample_rate": 0.0}, {"sample_size": 0}],
)
def test_config_validation(kw):
    with pytest.raises(ConfigError):
        C.CurvesConfig(**kw)
