"""Ghost curves and gains (``cache/ghost.py``) against brute force on a tiny trace.

The EMB curve of a window is checked at every one of the 101 grid shares against an
OrderedDict byte LRU that starts cold, replays the remembered past windows' lookups and then
counts the hit bytes of this window's (history 0, 1 and 2 windows, and after ``reset``). The
KV curve is checked against the documented binning: reused tokens at capacity ``K`` are the
``c_i`` of the window's requests with ``0 <= d_i <= K``, including a capacity equal to a
``d_i`` and a window with no cached KV. ``gains`` is checked on hand-worked curves; the
constructor's refusals and the grids on hand-computed values.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest
from conftest import small_table

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core
from helm_plan.cache.ghost import (
    EXACT_KEYS,
    MIN_SAMPLED_KEYS,
    NO_GAINS,
    Ghost,
    GhostCurves,
    _sample_stream,
    gains,
    sample_plan,
    share_grid,
)
from helm_plan.cache.kvcurve import kv_distances
from helm_plan.errors import ConfigError
from helm_plan.profiles import EmbTable, ModelProfile

TABLES = (
    EmbTable("item", dim=8, dtype_bytes=1),
    EmbTable("cat", dim=3, dtype_bytes=1, rows=5, key="hash"),
)
MODEL = ModelProfile(
    name="t", layers=1, d_model=2, kv_dtype_bytes=1, max_seq_len=12, n_candidates=3,
    weights_bytes=0, reserve_bytes=0, source="test", tables=TABLES, kv_slide_chunk=4,
)  # fmt: skip
EDGES = [0, 1, 30, 60, 90, 120]
SHARES = np.linspace(0.0, 1.0, 101)
"""The ghost grid's EMB shares 0, 0.01, ..., 1 (capacities are floored products with them)."""
"""Windows of the ghost tests: the first holds one request (no KV can be cached yet)."""


def _workload(model=MODEL):
    a = A.from_table(small_table(120, n_users=10, n_items=40, max_new=4, n_candidates=3))
    return core.Workload.of(a, model)


def _streams(wl, n_computed):
    """Each window's EMB key stream (the lookups the node made with ``n_computed``)."""
    out = []
    for s, e in zip(EDGES[:-1], EDGES[1:], strict=True):
        ids, _ = core.lookup_stream(wl, n_computed[s:e], s, e)
        out.append([int(k) for k in ids])
    return out


def _lru_hits(past: list[list[int]], cur: list[int], key_bytes, cap: int) -> int:
    """Hit bytes of ``cur`` in a cold byte LRU of ``cap`` that first replays ``past``."""
    lru: OrderedDict[int, int] = OrderedDict()
    hit = used = 0
    for w, stream in enumerate([*past, cur]):
        for k in stream:
            b = int(key_bytes[k])
            if k in lru:
                lru.move_to_end(k)
                hit += b if w == len(past) else 0
                continue
            if b <= cap:
                while used + b > cap:
                    used -= lru.popitem(last=False)[1]
                lru[k] = b
                used += b
    return hit


@pytest.mark.parametrize("one_size", [False, True])
@pytest.mark.parametrize("history", [None, 0, 1, 2])
def test_emb_curve_is_the_lru_over_the_remembered_windows(history, one_size):
    """``history=None``: the default, one remembered window. ``one_size``: every key of one
    size (the item table alone; the ghost then streams no sizes)."""
    model = dataclasses.replace(MODEL, tables=TABLES[:1]) if one_size else MODEL
    wl = _workload(model)
    pool = 400  # above the 335 bytes of all keys: reuse two windows back can hit
    n_comp = core.kv_pass(wl, 30).n_computed
    streams = _streams(wl, n_comp)
    kb = wl.keys.key_bytes
    assert (len(np.unique(kb)) == 1) == one_size
    if history is None:  # the default must be told apart from remembering two windows
        caps = [int(np.floor(r * pool)) for r in SHARES]
        one = [_lru_hits(streams[2:3], streams[3], kb, cap) for cap in caps]
        assert one != [_lru_hits(streams[1:3], streams[3], kb, cap) for cap in caps]
    if history is None:
        g, history = Ghost(wl, pool, model.kv_bytes_per_token), 1
    else:
        g = Ghost(wl, pool, model.kv_bytes_per_token, history_windows=history)
    for w, (s, e) in enumerate(zip(EDGES[:-1], EDGES[1:], strict=True)):
        c = g.observe(s, e, n_comp[s:e])
        np.testing.assert_array_equal(c.r_grid, SHARES)
        assert c.emb_hit_bytes.dtype == np.float64 and c.emb_hit_bytes.shape == (101,)
        past = streams[max(0, w - history) : w] if history else []
        want = [_lru_hits(past, streams[w], kb, int(np.floor(r * pool))) for r in SHARES]
        np.testing.assert_array_equal(c.emb_hit_bytes, want)
        assert c.lookup_bytes == sum(int(kb[k]) for k in streams[w])
        assert isinstance(c.lookup_bytes, float)


def _wide_workload():
    """4,000 requests over ~43k item keys (uniform) plus a 50-row hashed table every lookup
    touches: the hot small table SHARDS must not sample."""
    rng = np.random.default_rng(0)
    n = 4000
    off = np.zeros(n + 1, np.int64)
    np.cumsum(rng.integers(0, 40, n), out=off[1:])
    t = trace.make_table(np.sort(rng.uniform(0, 40, n)), rng.integers(0, 400, n), off,
                         rng.integers(0, 60_000, off[-1]), np.full(n, 8))  # fmt: skip
    tables = (EmbTable("item", dim=8, dtype_bytes=1),
              EmbTable("cat", dim=3, dtype_bytes=1, rows=50, key="hash"))  # fmt: skip
    model = dataclasses.replace(MODEL, tables=tables, max_seq_len=64, n_candidates=8)
    return core.Workload.of(A.from_table(t), model)


@pytest.mark.parametrize("rate", [None, 0.25])
def test_sampled_ghost_tracks_the_exact_one(rate):
    """SHARDS against the exact ghost (``rate=1``): at the default rate (EXACT_KEYS of the
    ~43k keys) and at R = 1/4 of the item keys; the 50-row table whole either way."""
    wl = _wide_workload()
    assert wl.n_keys > EXACT_KEYS  # so the default ghost samples
    exact, sampled = Ghost(wl, 8 * 40_000, 4, rate=1.0), Ghost(wl, 8 * 40_000, 4, rate=rate)
    assert exact.rate == 1.0
    assert sampled.rate == (0.25 if rate else pytest.approx(EXACT_KEYS / wl.n_keys))
    n_comp = np.full(1000, 64, np.int64)
    for s in range(0, 4000, 1000):
        idx = np.arange(s, s + 1000)
        e = exact.observe_requests(idx, n_comp)
        c = sampled.observe_requests(idx, n_comp, per_request=True)
        assert c.lookup_bytes == e.lookup_bytes  # exact: counted on the whole stream
        err = np.abs(c.emb_hit_bytes - e.emb_hit_bytes) / e.lookup_bytes
        assert err.max() < 0.02, (s, err.max())
        assert e.emb_hit_bytes[50] / e.lookup_bytes > 0.5  # a curve worth estimating
        np.testing.assert_array_equal(c.kv_reused_tokens, e.kv_reused_tokens)
        # each request's row is the window's scale applied to its sampled hits
        np.testing.assert_allclose(c.emb_hit_bytes_req.sum(axis=0), c.emb_hit_bytes,
                                   atol=len(idx), rtol=1e-9)  # fmt: skip
    # sampling the 50-row table too (forced) is what makes plain SHARDS noisy here
    assert sample_plan(wl.keys.key_table, 0.25)[0].tolist() == [True, False]


def test_sample_plan_rule():
    tables = np.repeat(np.array([0, 1, 2], np.int16), [EXACT_KEYS, 3000, 40])
    big, rate = sample_plan(tables)
    assert rate == pytest.approx(EXACT_KEYS / (EXACT_KEYS + 3040))
    # a table is sampled only if its sample holds MIN_SAMPLED_KEYS keys: 3000 R >= 256
    assert big.tolist() == [True, True, False]
    big, rate = sample_plan(tables[EXACT_KEYS:])  # few keys: the exact ghost
    assert rate == 1.0 and big.tolist() == [False, True, False]  # (unused at rate 1)
    assert sample_plan(tables, 256 / 3000)[0].tolist() == [True, True, False]
    assert sample_plan(tables, 255 / 3000)[0].tolist() == [True, False, False]
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ConfigError, match="^rate must be in"):
            sample_plan(tables, bad)
    assert MIN_SAMPLED_KEYS == 256


def test_reset_forgets_the_remembered_windows():
    wl = _workload()
    n_comp = core.kv_pass(wl, 30).n_computed
    streams = _streams(wl, n_comp)
    g = Ghost(wl, 150, MODEL.kv_bytes_per_token, history_windows=3)
    g.observe(1, 30, n_comp[1:30])
    g.reset()
    c = g.observe(30, 60, n_comp[30:60])
    want = [_lru_hits([], streams[2], wl.keys.key_bytes, int(np.floor(r * 150))) for r in SHARES]
    np.testing.assert_array_equal(c.emb_hit_bytes, want)
    # and remembers again afterwards
    c = g.observe(60, 90, n_comp[60:90])
    want = [_lru_hits([streams[2]], streams[3], wl.keys.key_bytes, int(np.floor(r * 150)))
            for r in SHARES]  # fmt: skip
    np.testing.assert_array_equal(c.emb_hit_bytes, want)


def _kv_ref(kd, s, e, cap):
    return sum(int(kd.reuse_tokens[i]) for i in range(s, e) if 0 <= kd.dist_tokens[i] <= cap)


def test_kv_curve_bins_reuse_by_distance_with_capacity_inclusive():
    wl = _workload()
    kvb = MODEL.kv_bytes_per_token
    kd = kv_distances(wl)
    n_comp = core.kv_pass(wl, 30).n_computed
    # a pool whose whole-KV capacity (share 0) is exactly one request's distance
    found = [i for i in range(30, 60) if kd.dist_tokens[i] > 0 and kd.reuse_tokens[i] > 0]
    d = int(kd.dist_tokens[found[0]])
    pool = d * kvb
    g = Ghost(wl, pool, kvb)
    assert g.kv_grid[0] == d and g.kv_grid[-1] == 0
    assert g.pool_bytes == pool
    ctx = core.kv_pass(wl, 30).ctx_len
    for s, e in zip(EDGES[:-1], EDGES[1:], strict=True):
        c = g.observe(s, e, n_comp[s:e])
        assert c.kv_reused_tokens.dtype == np.float64
        caps = [int(np.floor((1.0 - r) * pool / kvb)) for r in SHARES]
        np.testing.assert_array_equal(c.kv_reused_tokens, [_kv_ref(kd, s, e, k) for k in caps])
        assert c.ctx_tokens == int(ctx[s:e].sum()) and isinstance(c.ctx_tokens, float)
    assert _kv_ref(kd, 30, 60, d) > _kv_ref(kd, 30, 60, d - 1)  # the boundary matters


def test_window_without_cached_kv_reuses_nothing():
    wl = _workload()
    g = Ghost(wl, 500, MODEL.kv_bytes_per_token)
    c = g.observe(0, 1, core.kv_pass(wl, 30).n_computed[:1])
    assert kv_distances(wl).dist_tokens[0] == -1
    np.testing.assert_array_equal(c.kv_reused_tokens, np.zeros(101))
    np.testing.assert_array_equal(c.emb_hit_bytes[0], 0.0)  # nothing cached at capacity 0


def test_grids_and_refusals():
    wl = _workload()
    g = Ghost(wl, 1000, 3, history_windows=0)
    np.testing.assert_allclose(g.r_grid, [j / 100 for j in range(101)], rtol=0, atol=1e-15)
    assert g.emb_grid.dtype == np.int64 and g.kv_grid.dtype == np.int64
    assert g.emb_grid[[0, 1, 37, 100]].tolist() == [0, 10, 370, 1000]
    assert g.kv_grid[[0, 1, 50, 100]].tolist() == [333, 330, 166, 0]
    assert share_grid().tolist() == g.r_grid.tolist()
    assert share_grid(5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    Ghost(wl, 1, 1)  # the smallest valid pool and token size
    # each refusal says what to pass instead (the hint the CLI prints after the message)
    with pytest.raises(ConfigError, match="^history_windows must be >= 0, got -1$") as e:
        Ghost(wl, 1000, 3, history_windows=-1)
    assert e.value.hint == "pass how many past windows the EMB ghost remembers"
    for pool, kvb in ((0, 3), (1000, 0), (-5, 3)):
        with pytest.raises(
            ConfigError,
            match=f"^pool_bytes and kv_bytes_per_token must be positive, got {pool}, {kvb}$",
        ) as e:
            Ghost(wl, pool, kvb)
        assert e.value.hint == "pass the node's pool and the model's KV bytes per token"


def _curves(lb=2000.0, ct=400.0):
    g = np.linspace(0.0, 1.0, 101)
    return GhostCurves(g, emb_hit_bytes=1000.0 * g**2, lookup_bytes=lb,
                       kv_reused_tokens=200.0 * (1.0 - g) ** 2, ctx_tokens=ct)  # fmt: skip


def test_gains_hand_worked_on_curved_curves():
    # r = 0.3, delta = 0.1: EMB hits 40, 90, 160 at 0.2, 0.3, 0.4; KV 128, 98, 72
    out = gains(_curves(), 0.3, 0.1, emb_s_per_byte=0.01, kv_s_per_token=0.1)
    assert out.emb_gain_up == pytest.approx(70 / 2000)
    assert out.emb_loss_down == pytest.approx(50 / 2000)
    assert out.kv_gain_down == pytest.approx(30 / 400)
    assert out.kv_loss_up == pytest.approx(26 / 400)
    assert out.net_up_s == pytest.approx(70 * 0.01 - 26 * 0.1)
    assert out.net_down_s == pytest.approx(30 * 0.1 - 50 * 0.01)
    d = out.as_dict()
    assert list(d) == ["ghost_emb_gain_up", "ghost_emb_loss_down", "ghost_kv_gain_down",
                       "ghost_kv_loss_up", "ghost_net_up_s", "ghost_net_down_s"]  # fmt: skip
    assert d["ghost_net_down_s"] == pytest.approx(2.5) and type(d["ghost_kv_loss_up"]) is float


def test_gains_clamp_at_the_ends_of_the_grid():
    # r = 0.95, delta = 0.1: r + delta is clamped to 1 (EMB 902.5 -> 1000, KV 0.5 -> 0)
    out = gains(_curves(), 0.95, 0.1, emb_s_per_byte=1.0, kv_s_per_token=1.0)
    assert out.emb_gain_up == pytest.approx(97.5 / 2000)
    assert out.kv_loss_up == pytest.approx(0.5 / 400)
    # EMB 722.5 and KV 4.5 at 0.85
    assert out.emb_loss_down == pytest.approx((902.5 - 722.5) / 2000)
    assert out.kv_gain_down == pytest.approx((4.5 - 0.5) / 400)
    # r = 0.05: r - delta is clamped to 0
    out = gains(_curves(), 0.05, 0.1, emb_s_per_byte=1.0, kv_s_per_token=1.0)
    assert out.emb_loss_down == pytest.approx(2.5 / 2000)
    assert out.kv_gain_down == pytest.approx((200.0 - 180.5) / 400)


def test_gains_of_an_empty_window_and_of_no_split():
    out = gains(_curves(lb=0.0, ct=0.0), 0.3, 0.1, emb_s_per_byte=0.01, kv_s_per_token=0.1)
    assert (out.emb_gain_up, out.emb_loss_down, out.kv_gain_down, out.kv_loss_up) == (0, 0, 0, 0)
    assert out.net_up_s == pytest.approx(-1.9)  # the seconds do not divide by the totals
    for r in (float("nan"), float("inf")):
        assert gains(_curves(), r, 0.1, 1.0, 1.0) == NO_GAINS
    assert NO_GAINS.as_dict() == dict.fromkeys(out.as_dict(), 0.0)
    for delta in (0.0, 1.0, -0.1):
        with pytest.raises(ConfigError, match=f"^delta must be in \\(0, 1\\), got {delta}$") as e:
            gains(_curves(), 0.3, delta, 1.0, 1.0)
        assert e.value.hint == "pass e.g. 0.05"
    assert gains(_curves(), 0.5, 0.999, 1.0, 1.0).emb_gain_up == pytest.approx(750 / 2000)


@pytest.mark.parametrize("one_size", [False, True])
def test_sample_stream_equals_the_brute_force_filter(one_size):
    """The compiled filter against numpy: the sampled accesses as tracked ids, each request's
    offsets into them and its exact lookup bytes (every key one size, or per key)."""
    rng = np.random.default_rng(4)
    n_keys = 500
    dense = np.full(n_keys, -1, np.int32)
    picked = np.flatnonzero(rng.random(n_keys) < 0.3)
    dense[picked] = np.arange(len(picked), dtype=np.int32)
    kb = np.full(n_keys, 24, np.int64) if one_size else rng.integers(1, 100, n_keys)
    counts = rng.integers(0, 40, 60)
    counts[[3, 17]] = 0  # requests without lookups
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    ids = rng.integers(0, n_keys, offs[-1]).astype(np.int64)
    out = np.empty(len(ids), np.int32)
    out_offs = np.empty(len(offs), np.int64)
    look = np.empty(len(offs) - 1, np.int64)
    n = _sample_stream(ids, offs, dense, kb, 24 if one_size else 0, out, out_offs, look)
    keep = dense[ids] >= 0
    np.testing.assert_array_equal(out[:n], dense[ids][keep])
    np.testing.assert_array_equal(
        np.diff(out_offs), np.add.reduceat(keep, offs[:-1]) * (counts > 0)
    )
    np.testing.assert_array_equal(
        look, [kb[ids[a:b]].sum() for a, b in zip(offs[:-1], offs[1:], strict=True)]
    )
