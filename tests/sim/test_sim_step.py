"""NodeRunner's boundary logic by hand: exact-boundary landings, fork, adopt (DESIGN.md, Reallocation)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from brute import C, coeff_latency
from test_sim_node import GPU, _model

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.errors import ConfigError
from helm_plan.profiles import EmbTable
from helm_plan.sim import NodeConfig, NodeRunner, prepare_context, simulate_node
from helm_plan.sim.step import hottest_missing

ROW = 128
# dyadic link figures: a 128-byte row takes 128 (1/(0.5 * 1024) + 1/2**20) = 0.2501220703125 s
# at phi = 0.5, and a latency of 1 - 2 * that lands row 1 of a copy from t=1 at exactly t=2.0
PER_ROW = 128 / 512 + 128 / 2**20
LINK = dict(C, h2d_bw_Bps=1024.0, host_gather_Bps=2.0**20, h2d_latency_s=1.0 - 2 * PER_ROW)


def _ctx():
    # w0: A (user 0, t=0.1, new [1], cand [2]) -> items 1 and 2 counted once each
    # w1: nothing; w2: B (user 1, t=2.5, new [2], cand [1])
    t = trace.make_table(
        np.array([0.1, 2.5]), np.array([0, 1]), np.array([0, 1, 2]), np.array([1, 2]),
        np.array([1, 1]), candidates_offsets=np.array([0, 1, 2]), candidates_values=np.array([2, 1]),
    )  # fmt: skip
    m = dataclasses.replace(_model(multi=False), tables=(EmbTable("item", dim=32, dtype_bytes=4),),
                            layers=1, d_model=32, kv_dtype_bytes=2, max_seq_len=2048)  # fmt: skip
    assert m.kv_bytes_per_token == ROW
    return prepare_context(A.from_table(t), GPU, m, coeff_latency(LINK), pool_bytes=10 * ROW)


CFG = NodeConfig(window_s=1.0, refill="throttled", throttle_share=0.5)


def test_a_row_landing_exactly_at_the_next_change_is_kept():
    ctx = _ctx()
    runner = NodeRunner(ctx, CFG)
    runner.step(0.0)
    nxt = runner.fork()
    nxt.begin_window(1.0)
    _, ready = nxt.pending_prefetch
    assert ready.tolist() == [1.0 + LINK["h2d_latency_s"] + PER_ROW, 2.0]  # exact
    res = simulate_node(ctx, np.array([0.0, 1.0, 0.5]), CFG)
    # the change at t=2 keeps the row that lands at t=2: B finds both its items resident
    np.testing.assert_array_equal(res.n_miss, [2, 0])
    # row 0 lands in window 1, row 1 (t = 2.0) in window 2
    assert res.windows["prefetch_bytes"].to_list() == [0, ROW, ROW]
    # without the change the copy also completes: the same answer
    res2 = simulate_node(ctx, np.array([0.0, 1.0, 1.0]), CFG)
    assert res2.windows["prefetch_bytes"].to_list() == [0, ROW, ROW]


def test_growing_emb_with_every_counted_key_resident_copies_nothing_and_never_blocks():
    ctx = _ctx()
    for refill in ("eager", "throttled"):
        cfg = dataclasses.replace(CFG, refill=refill)
        # A's two items stay resident at r=0.5 (5 rows); growing to 1.0 finds nothing to copy
        res = simulate_node(ctx, np.array([0.5, 1.0, 1.0]), cfg)
        assert res.blocked_s == 0.0 and res.windows["blocked_ms"].to_list() == [0.0] * 3
        assert res.windows["prefetch_bytes"].to_list() == [0, 0, 0]


def test_fork_is_independent_of_the_runner():
    ctx = _ctx()
    cold = NodeRunner(ctx, CFG)
    cold.fork().step(0.3)  # a fork before window 0 works and leaves the cold runner cold
    assert cold.state is None and cold.window == 0
    runner = NodeRunner(ctx, CFG)
    runner.step(0.0)
    counts, free = runner.counts.copy(), runner.free_at_s.copy()
    used = runner.state.emb_bytes_used
    a = runner.fork()
    wa = [a.step(r) for r in (1.0, 0.5)]
    # stepping the fork changed none of the runner's state
    np.testing.assert_array_equal(runner.counts, counts)
    np.testing.assert_array_equal(runner.free_at_s, free)
    assert runner.state.emb_bytes_used == used and runner.window == 1
    wb = [runner.step(r) for r in (1.0, 0.5)]
    for x, y in zip(wa, wb, strict=True):
        np.testing.assert_array_equal(x.sojourn_s, y.sojourn_s)
        assert x.prefetch_bytes == y.prefetch_bytes


def test_adopt_takes_the_callers_arrays_and_checks_them():
    ctx = _ctx()
    runner = NodeRunner(ctx, CFG)
    with pytest.raises(ConfigError) as err:
        runner.adopt(None)
    assert str(err.value) == "adopt needs a started node"
    assert err.value.hint == "call begin_window first"
    runner.step(0.0)
    with pytest.raises(ConfigError) as err:
        runner.adopt(runner.state.copy())
    assert str(err.value) == "adopt: pass hotness counts exactly when the refill mode copies rows"
    assert err.value.hint == "refill 'throttled' copies"
    state, counts = runner.state.copy(), runner.counts.copy()
    runner.adopt(state, counts)
    assert runner.state is state and runner.counts is counts
    runner.begin_window(1.0)
    assert runner.counts is counts and counts.max() == 0.5  # halved in place
    lazy = NodeRunner(ctx, dataclasses.replace(CFG, refill="lazy"))
    lazy.step(0.0)
    with pytest.raises(ConfigError) as err:
        lazy.adopt(lazy.state.copy(), np.zeros(ctx.workload.n_keys, np.float32))
    assert err.value.hint == "refill 'lazy' does not copy"
    state = lazy.state.copy()
    lazy.adopt(state)
    assert lazy.state is state and lazy.counts is None


def test_hottest_missing_edge_cases():
    kb = np.full(4, 100, np.int64)
    none = np.zeros(4, bool)
    one = np.array([0.0, 2.0, 0.0, 0.0], np.float32)
    np.testing.assert_array_equal(hottest_missing(one, none, kb, 100), [1])  # one candidate
    for counts, free in ((np.zeros(4, np.float32), 1000), (one, 0), (one, -5)):
        got = hottest_missing(counts, none, kb, free)
        assert got.shape == (0,) and got.dtype == np.int32


def test_window_results_by_value():
    """Every figure of every WindowResult from its own per-request arrays (numpy), half-second
    windows, one of them empty, and a fork taken while the slots carry a backlog."""
    from conftest import small_table

    base = small_table(1000, n_users=25, n_items=90, max_new=5, n_candidates=4, seed=2)
    ts = np.sort(np.concatenate([np.linspace(0.0, 0.3, 850), np.linspace(1.0, 1.4, 150)]))
    import pyarrow as pa

    t = base.set_column(0, "ts_s", pa.array(ts))
    ctx = prepare_context(A.from_table(t), GPU, _model(), coeff_latency(), pool_bytes=9000)
    cfg = NodeConfig(window_s=0.5, refill="throttled", slo_ms=5.0)
    runner = NodeRunner(ctx, cfg)
    edges = ctx.edges(0.5)
    ratios = [0.2, 0.7, 0.4]
    for w, r in enumerate(ratios):
        if w == 1:
            assert runner.free_at_s.max() > 0.3  # window 0's burst left a backlog
            fork = runner.fork()
            assert fork.free_at_s.tolist() == runner.free_at_s.tolist()
            assert fork.free_at_s is not runner.free_at_s
            fw = [fork.step(x) for x in ratios[1:]]
        x = runner.step(r)
        s, e = int(edges[w]), int(edges[w + 1])
        arr = ts[s:e]
        assert (x.window, x.start_s, x.end_s, x.ratio, x.first) == (w, w * 0.5, w * 0.5 + 0.5, r, s)
        assert x.requests == e - s
        assert x.n_cand.tolist() == [4] * (e - s)  # small_table: 4 candidates each
        if w == 1:  # empty window
            assert np.isnan(x.last_finish_s) and x.throughput_rps == 0.0
            assert np.isnan(x.p50_ms) and np.isnan(x.mean_ms) and np.isnan(x.kv_reuse_rate)
            continue
        soj = x.sojourn_s
        assert x.p50_ms == np.percentile(soj, 50) * 1e3 and x.p99_ms == np.percentile(soj, 99) * 1e3
        assert x.mean_ms == np.mean(soj) * 1e3 and x.slo_attainment == np.mean(soj <= 5e-3)
        last = np.max(arr + soj)
        assert x.last_finish_s == pytest.approx(last, rel=1e-12)
        assert x.throughput_rps == pytest.approx((e - s) / max(0.5, last - w * 0.5), rel=1e-12)
        if w == 0:
            assert last > 0.5  # the burst's requests finish after the window ends
        assert x.kv_reuse_rate == x.n_reused.sum() / x.ctx_len.sum()
        assert x.emb_hit_rate == 1 - x.miss_bytes_req.sum() / x.lookup_bytes.sum()
        # batches of one: the terms of T(B) add up to the service times
        assert sum(x.term_s.values()) == pytest.approx(x.service_s.sum(), rel=1e-9)
    assert [np.asarray(y.sojourn_s).tolist() for y in fw][1] == x.sojourn_s.tolist()


def test_begin_window_rejects_bad_ratios_and_a_finished_node():
    runner = NodeRunner(_ctx(), CFG)
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ConfigError) as err:
            runner.begin_window(bad)
        assert str(err.value) == f"ratio must be in [0, 1], got {bad}"
        assert err.value.hint == "decide r in [0, 1]"
    for r in (0.0, 1.0, 1.0):
        runner.step(r)
    assert runner.done
    with pytest.raises(ConfigError) as err:
        runner.step(1.0)
    assert str(err.value) == "the node has served all 3 windows"
    assert err.value.hint == "call reset() first"
    runner.reset()
    assert np.isnan(runner.ratio) and runner.window == 0 and runner.state is None
    assert runner.free_at_s.tolist() == [0.0] and runner.free_at_s.dtype == np.float64


def test_a_copy_runs_on_across_a_boundary_where_the_ratio_stays():
    from test_sim_refill import PHI, ROW, _slow_ctx

    cfg = NodeConfig(window_s=1.0, refill="throttled", throttle_share=PHI)
    # rows land at 1.21001 ... 1.84001 and 2.05001: the last in window 2, as r stays at 1
    res = simulate_node(_slow_ctx(), np.array([0.0, 1.0, 1.0]), cfg)
    assert res.windows["prefetch_bytes"].to_list() == [0, 4 * ROW, ROW]
