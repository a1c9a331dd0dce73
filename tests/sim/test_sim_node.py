"""The node simulator against the brute-force node of DESIGN.md (tests/brute.py), and by hand."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from brute import BruteNodeConfig, C, coeff_latency, simulate
from conftest import small_table

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.errors import ConfigError
from helm_plan.profiles import EmbTable, load_gpu, load_model
from helm_plan.sim import NodeConfig, evaluate_span, prepare_context, simulate_node
from helm_plan.sim.refill import Throttled

GPU = load_gpu("a100-80g")


LAT = coeff_latency()


def _model(chunk: int = 4, multi: bool = True):
    base = load_model("gr-small")
    tables = (
        EmbTable("item", dim=64, dtype_bytes=4),
        EmbTable("cat", dim=32, dtype_bytes=4, rows=50, key="hash"),
        EmbTable("seller", dim=16, dtype_bytes=4, rows=300, key="hash", per_candidate=0),
    )
    import dataclasses

    return dataclasses.replace(
        base, tables=tables if multi else tables[:1], max_seq_len=24, kv_slide_chunk=chunk
    )


def _ctx(table, model, pool_bytes):
    return prepare_context(A.from_table(table), GPU, model, LAT, pool_bytes=pool_bytes)


CASES = [
    # (refill, batch_max, timeout_ms, batching, slots)
    ("lazy", 1, 0.0, "static", 1),
    ("eager", 1, 0.0, "static", 1),
    ("throttled", 1, 0.0, "static", 2),
    ("throttled", 4, 3.0, "static", 1),
    ("eager", 8, 0.0, "continuous", 2),
    ("lazy", 3, 50.0, "static", 3),
    ("lazy", 4, 3.0, "continuous", 1),  # continuous batching ignores the timeout
]


@pytest.mark.parametrize(("refill", "bmax", "timeout_ms", "batching", "slots"), CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_node_equals_the_brute_force_node(refill, bmax, timeout_ms, batching, slots, seed):
    table = small_table(260, n_users=25, n_items=90, max_new=5, n_candidates=4,
                        rate_qps=120.0, seed=seed)  # fmt: skip
    m = _model(chunk=1 + seed % 4)
    pool = 9000 + 700 * seed
    ctx = _ctx(table, m, pool)
    ws = 0.4
    n_w = ctx.n_windows(ws)
    # up and down moves of the split, different per seed
    ratios = np.resize(np.roll([0.05, 0.95, 0.3, 0.6, 0.1], seed), n_w)
    cfg = NodeConfig(window_s=ws, refill=refill, batch_max=bmax, batch_timeout_ms=timeout_ms,
                     batching=batching, slots=slots, throttle_share=0.4)  # fmt: skip
    res = simulate_node(ctx, ratios, cfg)
    ref = simulate(table, m, ctx.pool_bytes, C,
                   BruteNodeConfig(ws, slots, bmax, timeout_ms / 1e3, batching, refill, 0.4),
                   ratios.tolist())  # fmt: skip
    out = np.array(ref.outcomes, np.int64)
    np.testing.assert_array_equal(res.n_computed, out[:, 0])
    np.testing.assert_array_equal(res.lookup_bytes, out[:, 4])
    np.testing.assert_array_equal(res.miss_bytes, out[:, 5])
    np.testing.assert_array_equal(res.n_miss, out[:, 6])
    np.testing.assert_allclose(res.service_s, ref.service, rtol=1e-9)
    np.testing.assert_allclose(res.sojourn_s, ref.sojourn, rtol=1e-9, atol=1e-12)
    w = res.windows
    assert w["h2d_bytes"].to_list() == ref.h2d_bytes
    assert w["prefetch_bytes"].to_list() == ref.prefetch_bytes
    np.testing.assert_allclose(w["blocked_ms"].to_numpy(), np.array(ref.blocked) * 1e3, rtol=1e-12)
    if refill != "lazy":
        assert sum(ref.prefetch_bytes) > 0  # the case really exercises the copy


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_copies_cut_by_the_next_ratio_change_equal_the_brute_force(seed, monkeypatch):
    """A link so slow that a throttled copy outlives its window and the next change cancels it:
    landed bytes, the demand-miss share interval and where it ends all match the reference."""
    slow = dict(C, h2d_bw_Bps=1e5, host_gather_Bps=2e6)
    table = small_table(300, n_users=25, n_items=120, max_new=5, n_candidates=4,
                        rate_qps=150.0, seed=seed)  # fmt: skip
    m = _model(chunk=2)
    ctx = prepare_context(A.from_table(table), GPU, m, coeff_latency(slow), pool_bytes=12_000)
    ws = 0.25
    ratios = np.resize([0.05, 0.95, 0.6, 0.95, 0.05, 0.9], ctx.n_windows(ws))
    planned = []
    orig = Throttled.plan

    def spy(self, keys, key_bytes, *args):
        planned.append(int(np.sum(key_bytes)))
        return orig(self, keys, key_bytes, *args)

    monkeypatch.setattr(Throttled, "plan", spy)
    for refill, bmax in (("throttled", 1), ("throttled", 3), ("eager", 2)):
        cfg = NodeConfig(window_s=ws, refill=refill, throttle_share=0.25, batch_max=bmax,
                         batch_timeout_ms=1.0)  # fmt: skip
        res = simulate_node(ctx, ratios, cfg)
        ref = simulate(table, m, ctx.pool_bytes, slow,
                       BruteNodeConfig(ws, 1, bmax, 1e-3, "static", refill, 0.25),
                       ratios.tolist())  # fmt: skip
        np.testing.assert_allclose(res.sojourn_s, ref.sojourn, rtol=1e-9, atol=1e-12)
        assert res.windows["prefetch_bytes"].to_list() == ref.prefetch_bytes
        assert res.windows["h2d_bytes"].to_list() == ref.h2d_bytes
        if refill == "throttled":
            # the copies really were cut: fewer bytes landed than the plans would copy
            assert 0 < sum(ref.prefetch_bytes) < sum(planned)
            planned.clear()


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
    # One 100-byte table; pool 1000 B = 10 rows = 10 KV tokens (kv_bytes_per_token 100).
    # Window 0 at r=0: no EMB, every lookup misses: A 4 ([1,2,3,4]), B 3 ([1,3,5]) -> 7 misses.
    #   lookup counts: item1 2, item3 2, item2 1, item4 1, item5 1 (halved at the boundary).
    # Window 1 at r=1: KV shrinks to 0 (user 0's prefix is lost), EMB grows to 10 free rows.
    #   eager/throttled copy the 5 counted rows; C looks up [1,2,6] + [3,1]:
    #   with the copy only 6 misses (1 miss); lazy misses 1,2,6,3 (4 misses).
    import dataclasses

    m = dataclasses.replace(_model(multi=False), tables=(EmbTable("item", dim=25, dtype_bytes=4),),
                            layers=1, d_model=25, kv_dtype_bytes=2, max_seq_len=2048)  # fmt: skip
    rb = 100
    assert m.kv_bytes_per_token == rb
    ctx = _ctx(_tiny_table(), m, 10 * rb)
    res = simulate_node(ctx, np.array([0.0, 1.0]), NodeConfig(window_s=1.0, refill=mode))
    np.testing.assert_array_equal(res.n_miss, [4, 3, c_miss])
    np.testing.assert_array_equal(res.n_computed, [2, 1, 3])
    w = res.windows
    assert w["h2d_bytes"].to_list() == [7 * rb, (c_miss + pf_rows) * rb]
    assert w["prefetch_bytes"].to_list() == [0, pf_rows * rb]
    block = C["h2d_latency_s"] + 5 * rb / C["h2d_bw_Bps"] + 5 * rb / C["host_gather_Bps"]
    assert res.blocked_s == pytest.approx(block if blocked else 0.0)
    # C: n=3, L=3, M=2, 5 lookups of 100 B; misses c_miss rows; it arrives long after any copy
    X, P = 3 + 2, 3 * 3 - 3 * 2 / 2 + 2 * 3
    want = (C["t_launch_s"] + C["t_request_s"]
            + max(C["weight_read_s"], C["dense_s_per_token"] * (X + C["mfu_half_tokens"])
                  + C["attn_s_per_pair"] * P)
            + 500 / C["hbm_bw_Bps"] + C["h2d_latency_s"]
            + c_miss * rb / C["h2d_bw_Bps"] + c_miss * rb / C["host_gather_Bps"])  # fmt: skip
    assert res.service_s[2] == pytest.approx(want, rel=1e-12)
    assert res.sojourn_s[2] == pytest.approx(want, rel=1e-12)


def test_evaluate_span_equals_static_simulation():
    table = small_table(1200, seed=6, rate_qps=100)
    m = _model()
    ctx = _ctx(table, m, 40_000)
    cfg = NodeConfig(window_s=3.0, batch_max=4, batch_timeout_ms=5.0)
    res = simulate_node(ctx, np.array([0.35]), cfg)
    edges = ctx.edges(3.0)
    ev = evaluate_span(ctx, 0.35, 0, int(edges[1]), int(edges[2]), cfg)
    # a cold start at request 0 that measures window 1 is window 1 of a static run
    assert ev.p99_ms == pytest.approx(res.windows["p99_ms"][1], rel=1e-12)
    assert ev.emb_hit_rate == pytest.approx(res.windows["emb_hit_rate"][1], rel=1e-12)


def test_config_and_input_errors():
    with pytest.raises(ConfigError, match="slots must be a positive integer, got 0"):
        NodeConfig(slots=0)
    with pytest.raises(ConfigError, match="batch_max must be a positive integer, got 0"):
        NodeConfig(batch_max=0)
    with pytest.raises(ConfigError, match="unknown batching 'dynamic'"):
        NodeConfig(batching="dynamic")
    with pytest.raises(ConfigError, match="batch_timeout_ms must be finite and >= 0"):
        NodeConfig(batch_timeout_ms=-1.0)
    with pytest.raises(ConfigError, match="unknown refill mode 'fast'"):
        NodeConfig(refill="fast")
    with pytest.raises(ConfigError, match=r"throttle_share must be in \(0, 1\), got 1.5"):
        NodeConfig(throttle_share=1.5)
    ctx = _ctx(small_table(200), _model(), 20_000)
    with pytest.raises(ConfigError, match="ratios_per_window has 3 entries but the trace has"):
        simulate_node(ctx, np.array([0.1, 0.2, 0.3]), NodeConfig(window_s=1.0))
    with pytest.raises(ConfigError, match=r"ratio must be in \[0, 1\], got 1.5"):
        simulate_node(ctx, np.array([1.5]), NodeConfig(window_s=100.0))


def test_pool_note_when_footprint_fits():
    ctx = prepare_context(A.from_table(small_table(200)), GPU, _model(), LAT)
    assert ctx.notes and "fits" in ctx.notes[0]
    assert _ctx(small_table(200), _model(), 20_000).notes == ()


@pytest.mark.parametrize("warm", [0, 1, 2])
def test_warmup_windows_are_excluded_by_value(warm):
    """Overall figures over the requests after the warm-up windows, from the brute-force node.

    Window 0 is a burst (160 requests in 40 ms) that queues for tens of ms; the
    later windows are light. Including the burst would change every figure."""
    base = small_table(300, n_users=25, n_items=90, max_new=5, n_candidates=4, seed=4)
    rng = np.random.default_rng(4)
    ts = np.sort(np.concatenate([rng.uniform(0.0, 0.04, 160), rng.uniform(1.0, 3.0, 140)]))
    table = base.set_column(0, "ts_s", pa.array(ts))
    m = _model()
    ctx = _ctx(table, m, 9000)
    ratios = np.array([0.3, 0.6, 0.6])
    cfg = NodeConfig(window_s=1.0, refill="throttled", warmup_windows=warm, slo_ms=2.0)
    res = simulate_node(ctx, ratios, cfg)
    ref = simulate(table, m, ctx.pool_bytes, C, BruteNodeConfig(1.0, refill="throttled", phi=0.3),
                   ratios.tolist())  # fmt: skip
    soj, out = np.array(ref.sojourn), np.array(ref.outcomes, np.int64)
    post = ts >= warm * 1.0
    s = soj[post]
    assert res.requests == post.sum() and res.measured_from_window == warm
    assert res.windows["measured"].to_list() == [w >= warm for w in range(3)]
    assert res.p99_ms == pytest.approx(np.percentile(s, 99) * 1e3, rel=1e-9)
    assert res.p50_ms == pytest.approx(np.percentile(s, 50) * 1e3, rel=1e-9)
    assert res.mean_ms == pytest.approx(s.mean() * 1e3, rel=1e-9)
    assert res.slo_attainment == np.mean(s <= 2e-3)
    span = np.max(ts[post] + s) - warm * 1.0
    assert res.throughput_rps == pytest.approx(post.sum() / span, rel=1e-9)
    assert res.emb_hit_rate == pytest.approx(1 - out[post, 5].sum() / out[post, 4].sum())
    assert res.h2d_bytes == sum(ref.h2d_bytes[warm:])
    assert res.prefetch_bytes == sum(ref.prefetch_bytes[warm:])
    assert res.blocked_s == sum(ref.blocked)
    if warm:  # the burst really would change the figures
        assert np.percentile(soj, 99) > 2 * np.percentile(s, 99)
        assert np.mean(soj <= 2e-3) < res.slo_attainment - 0.1
        assert len(soj) / span > 1.5 * res.throughput_rps
