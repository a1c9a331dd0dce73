"""Refill modes on a regime switch: the directions the physics says (DESIGN.md, Reallocation)."""

from __future__ import annotations

import numpy as np
import pytest
from brute import C, coeff_latency
from conftest import small_table
from test_sim_node import GPU, _model

from helm_plan import arrays as A
from helm_plan.sim import NodeConfig, prepare_context, simulate_node


def test_eager_spikes_and_recovers_first_lazy_recovers_last_throttled_neither_spikes():
    # A slow link makes the copy of the hot set take ~3.6 ms. EMB holds 10% of the pool,
    # then 90%: the rows counted hot before the switch are missing after it.
    c = dict(C, h2d_bw_Bps=2e8, host_gather_Bps=1e9)
    lat = coeff_latency(c)
    t = small_table(6000, n_users=400, n_items=3000, max_new=6, n_candidates=16,
                    rate_qps=400.0, seed=3)  # fmt: skip
    ctx = prepare_context(A.from_table(t), GPU, _model(), lat, pool_bytes=2_000_000)
    n_w = ctx.n_windows(1.0)
    up = n_w // 2
    ratios = np.where(np.arange(n_w) < up, 0.1, 0.9)
    s, e = ctx.edges(1.0)[up : up + 2]
    res, spike, hit_after = {}, {}, {}
    for mode in ("lazy", "throttled", "eager"):
        r = simulate_node(ctx, ratios, NodeConfig(window_s=1.0, refill=mode, throttle_share=0.3))
        res[mode] = r
        spike[mode] = r.sojourn_s[s:e].max()
        first = slice(s, s + 100)
        hit_after[mode] = 1 - r.miss_bytes[first].sum() / r.lookup_bytes[first].sum()
    # before the switch the three are the same node
    for mode in ("throttled", "eager"):
        np.testing.assert_array_equal(res[mode].sojourn_s[:s], res["lazy"].sojourn_s[:s])
    # eager: the node blocks for the copy, the worst spike at the boundary...
    blocked = res["eager"].windows["blocked_ms"].to_numpy()
    assert blocked[up] > 3.0 and blocked.sum() == blocked[up]
    assert spike["eager"] > 1.5 * max(spike["lazy"], spike["throttled"])
    # ...and the best hit rate right after; lazy refills on demand: the slowest recovery
    assert hit_after["eager"] >= hit_after["throttled"] > hit_after["lazy"] + 0.05
    assert res["lazy"].prefetch_bytes == 0 < res["throttled"].prefetch_bytes
    # throttled copies the same keys without blocking
    assert res["throttled"].blocked_s == 0 and res["lazy"].blocked_s == 0
    assert res["throttled"].prefetch_bytes == res["eager"].prefetch_bytes


# A hand-worked throttled copy that requests arrive during (DESIGN.md, Reallocation).
# One 100-byte table, pool 1000 B = 10 rows = 10 KV tokens; windows of 1 s at r = 0, 1, 0.5.
# Link: h2d 1e4 B/s, host gather 1e4 B/s, latency 1e-5 s; throttle share phi = 0.05, so a copied
# row takes 100 * (1/(0.05 * 1e4) + 1/1e4) = 0.21 s and row k (0-based) lands at
# 1 + 1e-5 + 0.21 (k + 1): 1.21001, 1.42001, 1.63001, 1.84001, 2.05001.
PHI = 0.05
SLOW = dict(C, h2d_bw_Bps=1e4, host_gather_Bps=1e4, h2d_latency_s=1e-5)
ROW = 100


def _slow_ctx():
    import dataclasses

    from helm_plan import trace
    from helm_plan.profiles import EmbTable

    # w0: A (user 0, t=0.1, new [1, 2], cands [3, 4]); B (user 1, t=0.5, new [1], cands [3, 5])
    # w1: C (user 0, t=1.6, new [6], cands [3, 1])   -- during the copy, rows 0-1 landed
    # w2: D (user 1, t=2.02, new [7], cands [8])     -- after the change that cancels row 4
    t = trace.make_table(
        np.array([0.1, 0.5, 1.6, 2.02]), np.array([0, 1, 0, 1]), np.array([0, 2, 3, 4, 5]),
        np.array([1, 2, 1, 6, 7]), np.array([2, 2, 2, 1]),
        candidates_offsets=np.array([0, 2, 4, 6, 7]),
        candidates_values=np.array([3, 4, 3, 5, 3, 1, 8]),
    )  # fmt: skip
    m = dataclasses.replace(_model(multi=False), tables=(EmbTable("item", dim=25, dtype_bytes=4),),
                            layers=1, d_model=25, kv_dtype_bytes=2, max_seq_len=2048)  # fmt: skip
    assert m.kv_bytes_per_token == ROW
    return prepare_context(A.from_table(t), GPU, m, coeff_latency(SLOW), pool_bytes=10 * ROW)


def _service(n, L, M, lookups, misses, share):
    """DESIGN.md's service time of a lone request, term by term (``misses`` rows)."""
    c = SLOW
    X, P = n + M, n * L - n * (n - 1) / 2 + M * L
    compute = max(
        c["weight_read_s"],
        c["dense_s_per_token"] * (X + c["mfu_half_tokens"]) + c["attn_s_per_pair"] * P,
    )
    mb = misses * ROW
    return (c["t_launch_s"] + c["t_request_s"] + compute + lookups * ROW / c["hbm_bw_Bps"]
            + (c["h2d_latency_s"] if mb else 0.0) + mb / (c["h2d_bw_Bps"] * share)
            + mb / c["host_gather_Bps"])  # fmt: skip


LANDS = 1.0 + 1e-5 + 0.21 * np.arange(1, 6)


def test_throttled_copy_plan_by_hand_hottest_first_and_landing_times():
    from helm_plan.sim import NodeRunner

    ctx = _slow_ctx()
    runner = NodeRunner(ctx, NodeConfig(window_s=1.0, refill="throttled", throttle_share=PHI))
    runner.step(0.0)
    nxt = runner.fork()
    assert nxt.begin_window(1.0) == 0.0  # a throttled copy never blocks
    keys, ready = nxt.pending_prefetch
    # window 0 looked up 1 twice, 3 twice, 2, 4, 5 once; halved at the boundary
    np.testing.assert_array_equal(nxt.counts[keys], [1.0, 1.0, 0.5, 0.5, 0.5])
    assert keys[0] < keys[1] and keys[2] < keys[3] < keys[4]  # ties: lower key first
    np.testing.assert_allclose(ready, LANDS, rtol=1e-12)
    # demand misses get 1 - phi of the link from the boundary until the last row lands
    share = nxt.h2d_share(np.array([0.999, 1.0, 1.6, 2.05, 2.0501, 2.5]))
    np.testing.assert_allclose(share, [1.0, 0.95, 0.95, 0.95, 1.0, 1.0], rtol=1e-12)
    assert runner.pending_prefetch[0].size == 0  # the fork left the runner unchanged


def test_requests_during_a_throttled_copy_and_a_change_that_cancels_it_by_hand():
    ctx = _slow_ctx()
    cfg = NodeConfig(window_s=1.0, refill="throttled", throttle_share=PHI)
    res = simulate_node(ctx, np.array([0.0, 1.0, 0.5]), cfg)
    # C at 1.6: rows 0-1 (items 1 and 3) landed, item 2 not yet (1.63001). KV was shrunk to 0,
    # so C recomputes its history [1, 2, 6] and looks up 1, 2, 6 + cands 3, 1: misses 2 and 6,
    # on 0.95 of the link.
    # D at 2.02: the change to r=0.5 at t=2 cancelled row 4 (item 5, due 2.05001) and ended the
    # share there. D (history [1, 7], KV lost at r=1) looks up 1, 7 + cand 8: misses 7 and 8 on
    # the full link.
    np.testing.assert_array_equal(res.n_miss, [4, 3, 2, 2])
    np.testing.assert_array_equal(res.n_computed, [2, 1, 3, 2])
    want_c = _service(3, 3, 2, 5, 2, 1.0 - PHI)
    want_d = _service(2, 2, 1, 3, 2, 1.0)
    assert res.service_s[2] == pytest.approx(want_c, rel=1e-12)
    assert res.service_s[3] == pytest.approx(want_d, rel=1e-12)
    assert res.sojourn_s[2] == pytest.approx(want_c, rel=1e-12)  # the node was idle
    assert res.sojourn_s[3] == pytest.approx(want_d, rel=1e-12)
    # four rows landed in window 1 (item 2 too, though a demand miss fetched it first); the
    # cancelled row never lands
    w = res.windows
    assert w["prefetch_bytes"].to_list() == [0, 4 * ROW, 0]
    assert w["h2d_bytes"].to_list() == [7 * ROW, (2 + 4) * ROW, 2 * ROW]
    assert res.blocked_s == 0.0


def test_fewer_free_rows_than_candidates_copies_exactly_the_hottest():
    from helm_plan.sim.step import hottest_missing

    counts = np.array([0.0, 5.0, 3.0, 3.0, 9.0, 1.0, 3.0, 0.5], np.float32)
    resident = np.array([False, False, True, False, False, False, False, False])
    kb = np.full(8, 100, np.int64)
    # candidates (non-resident, counted): 4 (9), 1 (5), 3 (3), 6 (3), 5 (1), 7 (0.5)
    np.testing.assert_array_equal(hottest_missing(counts, resident, kb, 350), [4, 1, 3])
    np.testing.assert_array_equal(hottest_missing(counts, resident, kb, 400), [4, 1, 3, 6])
    np.testing.assert_array_equal(hottest_missing(counts, resident, kb, 99), [])
    np.testing.assert_array_equal(hottest_missing(counts, resident, kb, 10_000), [4, 1, 3, 6, 5, 7])
    # rows of different sizes: copying stops at the first that does not fit
    kb2 = np.array([1, 100, 1, 100, 100, 10, 300, 1])
    np.testing.assert_array_equal(hottest_missing(counts, resident, kb2, 250), [4, 1])
    assert hottest_missing(counts, resident, kb, 350).dtype == np.int32


def test_refill_plans_by_hand():
    from helm_plan.errors import ConfigError
    from helm_plan.sim.refill import REFILL_MODES, Eager, Lazy, Throttled, get_refill

    lat = coeff_latency(SLOW)
    assert list(REFILL_MODES) == ["lazy", "eager", "throttled"]
    assert isinstance(get_refill("eager"), Eager) and isinstance(get_refill("lazy"), Lazy)
    with pytest.raises(ConfigError) as err:
        get_refill("fast")
    assert str(err.value) == "unknown refill mode 'fast'"
    assert err.value.hint == "use one of lazy, eager, throttled"
    keys, kb = np.array([7], np.int64), np.array([100], np.int64)
    # one key of 100 B: eager blocks for latency + 100/h2d + 100/host; resident at the boundary
    p = get_refill("eager").plan(keys, kb, 3.0, lat, PHI)
    assert p.keys.dtype == np.int32 and p.keys.tolist() == [7]
    assert p.ready_s.tolist() == [3.0] and p.copy_end_s == 3.0 and p.demand_share == 1.0
    assert p.block_s == pytest.approx(1e-5 + 100 / 1e4 + 100 / 1e4, rel=1e-12)
    # throttled: no block, lands at 3 + latency + 100 (1/(phi h2d) + 1/host); 1 - phi meanwhile
    p = get_refill("throttled").plan(keys, kb, 3.0, lat, PHI)
    assert p.keys.dtype == np.int32 and p.keys.tolist() == [7] and p.block_s == 0.0
    assert p.ready_s[0] == pytest.approx(3.0 + 1e-5 + 0.21, rel=1e-12)
    assert p.copy_end_s == p.ready_s[0] and p.demand_share == pytest.approx(1 - PHI)
    # nothing to copy (and lazy never copies): an empty plan ending at the boundary
    for mode in (Lazy(), Eager(), Throttled()):
        for k in (np.zeros(0, np.int64), keys) if mode.name == "lazy" else (np.zeros(0, np.int64),):
            p = mode.plan(k, kb[: len(k)], 3.0, lat, PHI)
            assert (p.keys.size, p.ready_s.size, p.block_s, p.demand_share, p.copy_end_s) == (
                0, 0, 0.0, 1.0, 3.0,
            )  # fmt: skip
            assert p.keys.dtype == np.int32
    assert not Lazy.prefetches and Eager.prefetches and Throttled.prefetches
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ConfigError) as err:
            get_refill("throttled").plan(keys, kb, 3.0, lat, bad)
        assert str(err.value) == f"throttle_share must be in (0, 1), got {bad}"
        assert err.value.hint == "pass --throttle-share between 0 and 1"
