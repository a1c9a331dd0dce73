"""Node simulator: agrees with the cache core, the service formula, refill modes by hand."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core
from helm_plan.errors import ConfigError
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, evaluate_span, prepare_context, simulate_node
from helm_plan.sim.queue import fifo

GPU = load_gpu("a100-80g")
SMALL = load_model("gr-small")
LAT = build_latency_model(GPU, SMALL, resolve_latency(GPU, SMALL, None))


def _ctx(table, **pool):
    return prepare_context(A.from_table(table), GPU, SMALL, LAT, **pool)


def _formula(n, L, M, look, miss, share=1.0):
    """DESIGN.md's service time, written out independently of LatencyModel."""
    per_miss = LAT.host_gather_s + LAT.row_bytes / (LAT.h2d_bw_Bps * share)
    return (
        LAT.t0_s
        + look * LAT.row_bytes / LAT.hbm_bw_Bps
        + (miss > 0) * LAT.h2d_latency_s
        + miss * per_miss
        + LAT.prefill_a_s * n
        + LAT.prefill_b_s * n * L
        + LAT.score_c_s * M
        + LAT.score_d_s * M * L
    )


def test_lazy_hit_counts_equal_core_replay_with_resizes():
    table = small_table(1500, n_users=60, n_items=300, rate_qps=100, seed=4)
    ctx = _ctx(table, pool_fraction=0.2)
    cfg = NodeConfig(window_s=2.0, refill="lazy")
    n_w = ctx.n_windows(2.0)
    ratios = np.round(np.random.default_rng(0).uniform(0, 1, n_w), 2)
    res = simulate_node(ctx, ratios, cfg)
    a = ctx.arrays
    edges = A.window_edges(a.ts_s, 2.0)
    st = core.new_state(a, ratios[0], ctx.pool_bytes, SMALL)
    miss, comp = [], []
    for w in range(n_w):
        st.resize(*core.capacities(ratios[w], ctx.pool_bytes, SMALL))
        r = core.replay(a, st, edges[w], edges[w + 1], max_seq_len=SMALL.max_seq_len)
        miss.append(r.n_miss)
        comp.append(r.n_computed)
    np.testing.assert_array_equal(res.n_miss, np.concatenate(miss))
    np.testing.assert_array_equal(res.n_computed, np.concatenate(comp))
    assert res.prefetch_bytes == 0 and res.blocked_s == 0
    assert res.windows["prefetch_bytes"].sum() == 0


def test_eager_hit_counts_equal_core_replay_with_independent_prefetch():
    table = small_table(1500, n_users=60, n_items=300, rate_qps=100, seed=5)
    ctx = _ctx(table, pool_fraction=0.2)
    cfg = NodeConfig(window_s=2.0, refill="eager")
    n_w = ctx.n_windows(2.0)
    ratios = np.where(np.arange(n_w) % 2 == 0, 0.1, 0.8)
    res = simulate_node(ctx, ratios, cfg)
    a = ctx.arrays
    edges = A.window_edges(a.ts_s, 2.0)
    st = core.new_state(a, ratios[0], ctx.pool_bytes, SMALL)
    miss, counts, pf_total = [], None, 0
    for w in range(n_w):
        old = st.emb_capacity_rows
        emb, kv = core.capacities(ratios[w], ctx.pool_bytes, SMALL)
        st.resize(emb, kv)
        rows = None
        if w > 0 and emb > old:
            free = emb - st.emb_rows_used
            # hottest non-resident by last window's counts, ties by id: a Python sort
            cand = [(-int(c), i) for i, c in enumerate(counts) if c > 0 and not st.emb_resident[i]]
            rows = np.array([i for _, i in sorted(cand)[:free]], np.int32)
            pf_total += len(rows)
        r = core.replay(
            a, st, edges[w], edges[w + 1], max_seq_len=SMALL.max_seq_len,
            prefetch_rows=rows, prefetch_ready_s=None if rows is None else np.full(len(rows), w * 2.0),
            count_lookups=True,
        )  # fmt: skip
        counts = r.lookup_counts
        miss.append(r.n_miss)
    np.testing.assert_array_equal(res.n_miss, np.concatenate(miss))
    assert int(res.windows["prefetch_bytes"].sum()) == pf_total * SMALL.row_bytes > 0


def _tiny_table():
    # window 0: A (user 0, t=0.1, new [1, 2], cands [3, 4]); B (user 1, t=0.5, new [1], cands [3, 5])
    # window 1: C (user 0, t=1.2, new [6], cands [3, 1])
    return trace.make_table(
        np.array([0.1, 0.5, 1.2]),
        np.array([0, 1, 0]),
        np.array([0, 2, 3, 4]),
        np.array([1, 2, 1, 6]),
        np.array([2, 2, 2]),
        candidates_offsets=np.array([0, 2, 4, 6]),
        candidates_values=np.array([3, 4, 3, 5, 3, 1]),
    )


@pytest.mark.parametrize(
    ("mode", "c_miss", "pf_rows", "blocked"),
    [("lazy", 4, 0, False), ("eager", 1, 5, True), ("throttled", 1, 5, False)],
)
def test_h2d_accounting_by_hand(mode, c_miss, pf_rows, blocked):
    # pool = 10 rows = 10 KV tokens (gr-small: row_bytes = kv_bytes_per_token = 4096).
    # Window 0 at r=0: no EMB, every lookup misses: A 4 ([1,2,3,4]), B 3 ([1,3,5]) -> 7 misses.
    #   lookup counts: item1 2, item3 2, item2 1, item4 1, item5 1.
    # Window 1 at r=1: KV shrinks to 0 (user 0's prefix is lost), EMB grows to 10 free rows.
    #   eager/throttled prefetch the 5 counted rows; C looks up [1,2,6] + [3,1]:
    #   with the prefetch only 6 misses (1 miss); lazy misses 1,2,6,3 (4 misses).
    rb = SMALL.row_bytes
    assert rb == SMALL.kv_bytes_per_token == 4096
    ctx = _ctx(_tiny_table(), pool_bytes=10 * rb)
    res = simulate_node(ctx, np.array([0.0, 1.0]), NodeConfig(window_s=1.0, refill=mode))
    np.testing.assert_array_equal(res.n_miss, [4, 3, c_miss])
    np.testing.assert_array_equal(res.n_computed, [2, 1, 3])
    w = res.windows
    assert w["h2d_bytes"].to_list() == [7 * rb, (c_miss + pf_rows) * rb]
    assert w["prefetch_bytes"].to_list() == [0, pf_rows * rb]
    block = LAT.h2d_latency_s + 5 * (LAT.host_gather_s + rb / LAT.h2d_bw_Bps)
    assert res.blocked_s == pytest.approx(block if blocked else 0.0)
    want_c = _formula(3, 3, 2, 5, c_miss)
    assert res.service_s[2] == pytest.approx(want_c)
    # C arrives at 1.2 s, long after the block ends (1.0 + ~13 us): no wait either way
    assert res.sojourn_s[2] == pytest.approx(want_c)


def test_service_times_follow_the_formula():
    table = small_table(800, seed=2)
    ctx = _ctx(table, pool_fraction=0.3)
    res = simulate_node(ctx, np.array([0.4]), NodeConfig(window_s=100.0))
    a = ctx.arrays
    look = res.n_computed + np.diff(a.cand_offsets)
    want = _formula(res.n_computed, ctx.ctx_len, np.diff(a.cand_offsets), look, res.n_miss)
    np.testing.assert_allclose(res.service_s, want, rtol=1e-12)
    # and the sojourn times are a FIFO over them (independent Python loop)
    free, soj = 0.0, []
    for t, s in zip(a.ts_s, want, strict=True):
        free = max(free, t) + s
        soj.append(free - t)
    np.testing.assert_allclose(res.sojourn_s, soj, rtol=1e-9)


def _burst_ctx():
    # High load, many distinct rows: an EMB increase makes eager copy thousands of rows.
    table = small_table(
        8000, n_users=1000, n_items=60_000, max_new=20, n_candidates=64, rate_qps=1000, seed=9
    )
    return _ctx(table, pool_fraction=0.5)


def test_eager_blocks_and_throttled_does_not():
    ctx = _burst_ctx()
    n_w = ctx.n_windows(1.0)
    ratios = np.where(np.arange(n_w) < n_w // 2, 0.05, 0.9)
    w_up = n_w // 2
    out = {
        m: simulate_node(ctx, ratios, NodeConfig(window_s=1.0, refill=m))
        for m in ("lazy", "eager", "throttled")
    }
    p99 = {m: r.windows["p99_ms"].to_numpy() for m, r in out.items()}
    blk = out["eager"].windows["blocked_ms"].to_numpy()
    assert blk[w_up] > 5.0 and blk.sum() == blk[w_up]
    assert out["throttled"].blocked_s == 0 and out["lazy"].blocked_s == 0
    assert out["lazy"].prefetch_bytes == 0
    assert out["throttled"].windows["prefetch_bytes"][w_up] > 0
    # the spike: P99 right after the increase is several times throttled's and the steady level
    assert p99["eager"][w_up] > 3 * p99["throttled"][w_up]
    assert p99["eager"][w_up] > 3 * np.median(p99["eager"][w_up + 1 :])
    np.testing.assert_allclose(p99["eager"][:w_up], p99["throttled"][:w_up])


def test_evaluate_span_equals_static_simulation():
    table = small_table(1200, seed=6, rate_qps=100)
    ctx = _ctx(table, pool_fraction=0.25)
    cfg = NodeConfig(window_s=3.0)
    res = simulate_node(ctx, np.array([0.35]), cfg)
    edges = ctx.edges(3.0)
    ev = evaluate_span(ctx, 0.35, 0, int(edges[1]), int(edges[2]), cfg)
    assert ev.p99_ms == pytest.approx(res.windows["p99_ms"][1])
    assert ev.emb_hit_rate == pytest.approx(res.windows["emb_hit_rate"][1])
    # cold start at the window itself: queue and caches from scratch
    ev0 = evaluate_span(ctx, 0.35, int(edges[1]), int(edges[1]), int(edges[2]), cfg)
    s, e = int(edges[1]), int(edges[2])
    st = core.new_state(ctx.arrays, 0.35, ctx.pool_bytes, SMALL)
    r = core.replay(ctx.arrays, st, s, e, max_seq_len=SMALL.max_seq_len)
    svc = _formula(
        r.n_computed, r.ctx_len, np.diff(ctx.arrays.cand_offsets)[s:e], r.n_lookup, r.n_miss
    )
    q = fifo(ctx.arrays.ts_s[s:e], svc, 1)
    assert ev0.p99_ms == pytest.approx(np.percentile(q.sojourn_s, 99) * 1e3)


def test_config_and_input_errors():
    with pytest.raises(ConfigError, match="slots must be a positive integer, got 0"):
        NodeConfig(slots=0)
    with pytest.raises(ConfigError, match="unknown refill mode 'fast'"):
        NodeConfig(refill="fast")
    with pytest.raises(ConfigError, match=r"throttle_share must be in \(0, 1\), got 1.5"):
        NodeConfig(throttle_share=1.5)
    ctx = _ctx(small_table(200), pool_fraction=0.3)
    with pytest.raises(ConfigError, match="ratios_per_window has 3 entries but the trace has"):
        simulate_node(ctx, np.array([0.1, 0.2, 0.3]), NodeConfig(window_s=1.0))
    with pytest.raises(ConfigError, match=r"ratio must be in \[0, 1\], got 1.5"):
        simulate_node(ctx, np.array([1.5]), NodeConfig(window_s=100.0))


def test_pool_note_when_footprint_fits():
    ctx = _ctx(small_table(200))
    assert ctx.notes and "fits" in ctx.notes[0]
    assert _ctx(small_table(200), pool_fraction=0.5).notes == ()
