"""sim/node.collect and NodeResult.compact on hand-made windows (issue 16, mutation of sim/node).

Three windows of 10 s: a warm-up window of 2 requests, a measured one of 3, and a measured
empty one. Per-request inputs come in narrow dtypes (int32, float32) so the widening is
checked; every figure is recomputed here from the raw numbers by hand or with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from brute import coeff_latency
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.errors import ConfigError
from helm_plan.latency.model import TERMS
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import metrics, prepare_context, simulate_node
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.node import collect
from helm_plan.sim.policy import Policy
from helm_plan.sim.step import NodeRunner, WindowResult


def _w(i, first, soj, r, *, look, miss, reused, ctx, last, miss_b, pre, blocked, **kw):
    n = len(soj)
    f, n32 = np.float32, np.int32  # narrow scalars too: the window table widens every column
    base = dict(
        window=i, start_s=f(10.0 * i), end_s=f(10.0 * (i + 1)), ratio=f(r), first=first,
        sojourn_s=np.array(soj, np.float32), service_s=np.arange(n, dtype=np.float32) / 8,
        n_computed=np.arange(n, dtype=np.int32) + 10 * i, n_reused=np.array(reused, np.int32),
        ctx_len=np.array(ctx, np.int32), n_cand=np.full(n, 4, np.int32),
        lookup_bytes=np.array(look, np.int32), miss_bytes_req=np.array(miss, np.int32),
        n_miss=np.arange(n, dtype=np.int32) + 100 * i, batch_size=np.ones(n, np.int64),
        last_finish_s=last, p50_ms=f(1.0 + i), p99_ms=f(2.0 + i), slo_attainment=f(0.5 + i / 8),
        mean_ms=f(1.5 + i), throughput_rps=f(3.0 + i), emb_hit_rate=f(0.25 * i),
        kv_reuse_rate=f(0.125 * i), miss_bytes=n32(miss_b), prefetch_bytes=n32(pre),
        blocked_s=f(blocked),
        term_s={k: f(j + i) for j, k in enumerate(TERMS)},
    )  # fmt: skip
    return WindowResult(**(base | kw))


def _windows():
    w0 = _w(0, 0, [0.5, 0.25], 0.25, look=[100, 60], miss=[100, 60], reused=[0, 0], ctx=[8, 8],
            last=9.0, miss_b=1000, pre=7, blocked=0.5)  # fmt: skip
    w1 = _w(1, 2, [0.001, 0.002, 0.004], 0.5, look=[40, 40, 20], miss=[10, 0, 5],
            reused=[4, 0, 2], ctx=[8, 4, 4], last=13.5, miss_b=15, pre=3, blocked=0.25)  # fmt: skip
    w2 = _w(2, -1, [], 0.75, look=[], miss=[], reused=[], ctx=[], last=99.0, miss_b=0, pre=11,
            blocked=0.125)  # fmt: skip
    return [w0, w1, w2]


CFG = NodeConfig(window_s=10.0, warmup_windows=1, slo_ms=3.0)


def test_collect_concatenates_widens_and_indexes_requests():
    res = collect(_windows(), CFG)
    np.testing.assert_array_equal(res.sojourn_s, np.float32([0.5, 0.25, 0.001, 0.002, 0.004]))
    assert res.sojourn_s.dtype == np.float64 and res.service_s.dtype == np.float64
    np.testing.assert_array_equal(res.service_s, [0.0, 0.125, 0.0, 0.125, 0.25])
    np.testing.assert_array_equal(res.n_computed, [0, 1, 10, 11, 12])
    np.testing.assert_array_equal(res.n_miss, [0, 1, 100, 101, 102])
    np.testing.assert_array_equal(res.lookup_bytes, [100, 60, 40, 40, 20])
    np.testing.assert_array_equal(res.miss_bytes, [100, 60, 10, 0, 5])
    for k in ("n_computed", "n_miss", "lookup_bytes", "miss_bytes"):
        assert getattr(res, k).dtype == np.int64, k
    assert res.batch_size.dtype == np.int32
    np.testing.assert_array_equal(res.window_idx, [0, 0, 1, 1, 1])
    assert res.window_idx.dtype == np.int64
    np.testing.assert_array_equal(res.ratios, [0.25, 0.5, 0.75])
    assert res.ratios.dtype == np.float64


def test_collect_window_table():
    t = collect(_windows(), CFG).windows
    assert t.columns == ["window", "start_s", "end_s", "ratio", "requests", "p50_ms", "p99_ms",
                         "slo_attainment", "throughput_rps", "emb_hit_rate", "kv_reuse_rate",
                         "h2d_bytes", "prefetch_bytes", "blocked_ms", "measured"]  # fmt: skip
    want = {
        "window": [0, 1, 2], "start_s": [0.0, 10.0, 20.0], "end_s": [10.0, 20.0, 30.0],
        "ratio": [0.25, 0.5, 0.75], "requests": [2, 3, 0], "p50_ms": [1.0, 2.0, 3.0],
        "p99_ms": [2.0, 3.0, 4.0], "slo_attainment": [0.5, 0.625, 0.75],
        "throughput_rps": [3.0, 4.0, 5.0], "emb_hit_rate": [0.0, 0.25, 0.5],
        "kv_reuse_rate": [0.0, 0.125, 0.25], "h2d_bytes": [1007, 18, 11],
        "prefetch_bytes": [7, 3, 11], "blocked_ms": [500.0, 250.0, 125.0],
        "measured": [False, True, True],
    }  # fmt: skip
    assert t.to_dict(as_series=False) == want
    ints = ("window", "requests", "h2d_bytes", "prefetch_bytes")
    assert {c: str(t[c].dtype) for c in ints} == dict.fromkeys(ints, "Int64")
    floats = [c for c in t.columns if c not in ints and c != "measured"]
    assert {c: str(t[c].dtype) for c in floats} == dict.fromkeys(floats, "Float64")


def test_collect_figures_exclude_the_warm_up_window():
    res = collect(_windows(), CFG)
    soj = np.array([0.001, 0.002, 0.004], np.float32).astype(np.float64)  # window 1 only
    assert res.requests == 3 and res.measured_from_window == 1
    assert res.p50_ms == pytest.approx(np.percentile(soj, 50) * 1e3)
    assert res.p99_ms == pytest.approx(np.percentile(soj, 99) * 1e3)
    assert res.mean_ms == pytest.approx(np.mean(soj) * 1e3)
    assert res.slo_attainment == 2 / 3  # 4 ms > the 3 ms SLO
    # 3 requests from the end of warm-up (10 s) to the last measured finish (13.5 s); the empty
    # window's finish (99 s) does not count
    assert res.throughput_rps == pytest.approx(3 / 3.5)
    assert res.emb_hit_rate == pytest.approx(1 - 15 / 100)
    assert res.kv_reuse_rate == pytest.approx(6 / 16)
    assert res.h2d_bytes == 18 + 11 and res.prefetch_bytes == 3 + 11
    assert res.blocked_s == 0.875  # blocking is counted over every window, warm-up included
    assert sorted(res.term_s) == sorted(TERMS)
    for j, k in enumerate(TERMS):
        np.testing.assert_array_equal(res.term_s[k], [j, j + 1.0, j + 2.0])
        assert res.term_s[k].dtype == np.float64


def test_collect_warm_up_never_swallows_the_last_window():
    # 5 warm-up windows asked, 3 served: the last window is still measured
    res = collect(_windows(), NodeConfig(window_s=10.0, warmup_windows=5, slo_ms=3.0))
    assert res.measured_from_window == 2 and res.requests == 0
    assert np.isnan(res.p99_ms) and np.isnan(res.throughput_rps)
    assert np.isnan(res.emb_hit_rate) and np.isnan(res.kv_reuse_rate)
    assert res.windows["measured"].to_list() == [False, False, True]
    assert res.h2d_bytes == 11
    one = collect(_windows()[:1], NodeConfig(window_s=10.0, warmup_windows=1, slo_ms=3.0))
    assert one.measured_from_window == 0 and one.requests == 2
    assert one.throughput_rps == pytest.approx(2 / 9.0)


def test_collect_of_no_windows():
    res = collect([], CFG)
    assert res.requests == 0 and res.h2d_bytes == 0 and res.prefetch_bytes == 0
    assert res.sojourn_s.dtype == np.float64 and len(res.sojourn_s) == 0
    assert res.batch_size.dtype == np.int32 and res.windows.height == 0
    assert res.blocked_s == 0.0 and res.measured_from_window == 0


def test_compact_drops_per_request_arrays_but_sojourns():
    res = collect(_windows(), CFG)
    c = res.compact()
    for k in ("service_s", "n_miss", "n_computed", "lookup_bytes", "miss_bytes", "batch_size"):
        assert len(getattr(c, k)) == 0 and getattr(c, k).dtype == getattr(res, k).dtype, k
    np.testing.assert_array_equal(c.sojourn_s, res.sojourn_s)
    np.testing.assert_array_equal(c.window_idx, res.window_idx)
    assert c.p99_ms == res.p99_ms and c.windows.equals(res.windows)


# ---------------------------------------------------------------- simulate_node's loop


def _small_ctx():
    table = small_table(120, n_users=12, n_items=60, rate_qps=8.0, seed=4)  # ~15 s of arrivals
    g, m = load_gpu("a100-80g"), load_model("gr-small")
    return prepare_context(A.from_table(table), g, m, coeff_latency(), pool_bytes=2**22)


class Recorder(Policy):
    """Records what it is shown and answers 0.1, 0.2, ... by window."""

    def __init__(self):
        self.seen, self.resets = [], 0

    def reset(self):
        self.resets += 1

    def decide(self, obs):
        self.seen.append(obs)
        return 0.1 * (obs.window + 1)

    @property
    def spec(self):
        return "rec"


def test_simulate_node_shows_each_policy_decision_the_previous_window():
    ctx, cfg = _small_ctx(), NodeConfig(window_s=5.0, warmup_windows=0, refill="lazy")
    pol = Recorder()
    res = simulate_node(ctx, pol, cfg)
    n_w = NodeRunner(ctx, cfg).n_windows
    assert n_w >= 3 and pol.resets == 1 and [o.window for o in pol.seen] == list(range(n_w))
    feats = metrics.window_features(ctx.arrays.ts_s, ctx.edges(5.0), 5.0, ctx.first_visit,
                                    ctx.ctx_len)  # fmt: skip
    for w, o in enumerate(pol.seen):
        if w == 0:  # nothing measured yet: NaN ratio, no window, no features
            assert np.isnan(o.ratio) and o.last is None and o.features == {}
            continue
        assert o.ratio == pytest.approx(0.1 * w)  # what the node ran at in window w - 1
        assert o.last.window == w - 1 and o.last.ratio == pytest.approx(0.1 * w)
        assert o.features == {k: float(v[w - 1]) for k, v in feats.items()}
    np.testing.assert_allclose(res.ratios, 0.1 * np.arange(1, n_w + 1))


def test_simulate_node_ratio_arrays():
    ctx, cfg = _small_ctx(), NodeConfig(window_s=5.0, warmup_windows=0, refill="lazy")
    n_w = NodeRunner(ctx, cfg).n_windows
    per = np.linspace(0.1, 0.9, n_w)
    # a column of ratios (n_w x 1) is read as one per window; a single one holds for all
    np.testing.assert_allclose(simulate_node(ctx, per[:, None], cfg).ratios, per)
    np.testing.assert_allclose(simulate_node(ctx, [0.25], cfg).ratios, np.full(n_w, 0.25))
    np.testing.assert_allclose(simulate_node(ctx, np.array([1, 0] * n_w)[:n_w], cfg).ratios,
                               np.array([1.0, 0.0] * n_w)[:n_w])  # fmt: skip
    with pytest.raises(ConfigError, match=f"ratios_per_window has 2 entries but the trace has "
                       f"{n_w} windows of 5.0 s") as e:  # fmt: skip
        simulate_node(ctx, [0.1, 0.2], cfg)
    assert e.value.hint == "pass one ratio per window, or one for all"
    # a trace of a single window takes a single ratio as its one entry; two windows share it
    one = NodeConfig(window_s=1000.0, warmup_windows=0, refill="lazy")
    assert simulate_node(ctx, 0.5, one).ratios.tolist() == [0.5]
    two = NodeConfig(window_s=10.0, warmup_windows=0, refill="lazy")
    assert NodeRunner(ctx, two).n_windows == 2
    assert simulate_node(ctx, 0.5, two).ratios.tolist() == [0.5, 0.5]
