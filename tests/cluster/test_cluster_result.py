"""Cluster result figures (``cluster/result.py``), hand-worked.

``build_result`` is fed a seven-request, two-node, three-window run whose
every figure is worked out below by hand (percentiles by linear interpolation:
the P99 of sorted ``a, b`` is ``a + 0.99 (b - a)``); the nodes' own results are
plain stand-ins carrying distinct numbers, so a figure read from the wrong
node, window or column shows.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from helm_plan.cluster.result import build_result
from helm_plan.sim import NodeConfig

WS = 2.0
SLO_MS = 15.0

# request: node, sojourn s, service s, batch size, finish s, lookup B, miss B, reused, ctx, computed
REQS = [
    (0, 0.010, 0.004, 2, 1.0, 100, 20, 3, 10, 7),  # window 0 (warm-up)
    (1, 0.020, 0.006, 1, 3.2, 50, 50, 0, 5, 5),
    (0, 0.030, 0.009, 3, 2.8, 200, 0, 8, 8, 0),  # window 1
    (1, 0.001, 0.002, 1, 2.4, 0, 0, 2, 4, 2),
    (1, 0.005, 0.008, 2, 3.9, 100, 10, 1, 4, 3),
    (0, 0.050, 0.010, 1, 5.6, 40, 40, 5, 10, 5),  # window 2
    (0, 0.002, 0.001, 1, 7.0, 60, 0, 0, 10, 10),
]
EDGES = np.array([0, 2, 5, 7])
RATIOS = ([0.5, 0.2, 0.6], [0.5, 0.7, 0.4])  # per node, per window
H2D = ([100, 200, 300], [1000, 2000, 4000])
PREFETCH = ([1, 2, 3], [10, 20, 40])


def _node_stub(n: int):
    """What build_result reads of a node's own result, with numbers unique to node ``n``."""
    return SimpleNamespace(
        ratios=np.array(RATIOS[n]),
        windows=pl.DataFrame({"h2d_bytes": H2D[n], "prefetch_bytes": PREFETCH[n]}),
        requests=3 + n, p50_ms=1.0 + n, p99_ms=10.0 + n, slo_attainment=0.5 + 0.25 * n,
        throughput_rps=100.0 + n, emb_hit_rate=0.3 + 0.1 * n, kv_reuse_rate=0.6 - 0.2 * n,
        h2d_bytes=7 + n, blocked_s=0.25 * (n + 1),
    )  # fmt: skip


def _out():
    cols = list(zip(*REQS, strict=True))
    names = ("sojourn_s", "service_s", "batch_size", "finish_s", "lookup_bytes", "miss_bytes",
             "n_reused", "ctx_len", "n_computed")  # fmt: skip
    out = {k: np.array(c) for k, c in zip(names, cols[1:], strict=True)}
    out["batch_size"] = out["batch_size"].astype(np.int32)
    return np.array(cols[0], np.int32), out


def _result(warmup: int = 1):
    node, out = _out()
    cfg = NodeConfig(window_s=WS, warmup_windows=warmup, slo_ms=SLO_MS)
    return build_result("jsq", "static:0.5", cfg, EDGES, node, out, [_node_stub(0), _node_stub(1)])


def test_overall_figures_by_hand():
    res = _result()
    # measured: windows 1 and 2, requests 2..6; sojourns sorted 1, 2, 5, 30, 50 ms
    assert res.measured_from_window == 1 and res.requests == 5
    assert res.p50_ms == pytest.approx(5.0)
    assert res.p99_ms == pytest.approx(30.0 + 0.96 * 20.0)  # rank 0.99 * 4 = 3.96
    assert res.slo_attainment == pytest.approx(3 / 5)  # 1, 2 and 5 ms are within 15 ms
    # 5 requests from the first measured window's start (2 s) to the last finish (7 s)
    assert res.throughput_rps == pytest.approx(5 / (7.0 - 2.0))
    assert res.emb_hit_rate == pytest.approx(1 - 50 / 400)
    assert res.kv_reuse_rate == pytest.approx(16 / 36)
    assert res.h2d_bytes == 2200 + 4300 and res.prefetch_bytes == 22 + 43
    assert isinstance(res.h2d_bytes, int) and isinstance(res.prefetch_bytes, int)
    assert res.blocked_s == pytest.approx(0.75)
    # work = service / batch: node 0 does 3 + 10 + 1 ms, node 1 2 + 4 ms -> mean 10, std 4
    assert res.imbalance_max_mean == pytest.approx(14 / 10)
    assert res.imbalance_cv == pytest.approx(4 / 10)
    # spreads of the measured windows: 0.7 - 0.2 and 0.6 - 0.4
    assert res.ratio_spread == pytest.approx((0.5 + 0.2) / 2)
    assert res.overall() == {
        "router": "jsq", "policy": "static:0.5", "nodes": 2, "requests": 5,
        "p50_ms": res.p50_ms, "p99_ms": res.p99_ms, "slo_attainment": res.slo_attainment,
        "throughput_rps": res.throughput_rps, "emb_hit_rate": res.emb_hit_rate,
        "kv_reuse_rate": res.kv_reuse_rate, "h2d_bytes": 6500, "prefetch_bytes": 65,
        "blocked_s": res.blocked_s, "imbalance_max_mean": res.imbalance_max_mean,
        "imbalance_cv": res.imbalance_cv, "ratio_spread": res.ratio_spread,
        "measured_from_window": 1,
    }  # fmt: skip


def test_per_request_arrays_pass_through():
    node, out = _out()
    res = _result()
    assert (res.router, res.policy, res.nodes) == ("jsq", "static:0.5", 2)
    np.testing.assert_array_equal(res.node, node)
    for k in ("sojourn_s", "service_s", "batch_size", "n_computed", "n_reused", "ctx_len",
              "lookup_bytes", "miss_bytes"):  # fmt: skip
        np.testing.assert_array_equal(getattr(res, k), out[k], err_msg=k)
    np.testing.assert_array_equal(res.window_idx, [0, 0, 1, 1, 1, 2, 2])
    assert res.window_idx.dtype == np.int64
    np.testing.assert_array_equal(res.ratios, np.array(RATIOS).T)
    assert len(res.per_node) == 2 and res.per_node[1].requests == 4


def test_window_table_by_hand():
    w = _result().windows
    assert w["window"].to_list() == [0, 1, 2]
    assert w["start_s"].to_list() == [0.0, 2.0, 4.0]
    assert w["requests"].to_list() == [2, 3, 2] and w["requests"].dtype == pl.Int64
    assert w["measured"].to_list() == [False, True, True]
    # sojourns: {10, 20}, {1, 5, 30}, {2, 50} ms
    np.testing.assert_allclose(w["p50_ms"], [15.0, 5.0, 26.0])
    np.testing.assert_allclose(w["p99_ms"], [10 + 0.99 * 10, 5 + 0.98 * 25, 2 + 0.99 * 48])
    np.testing.assert_allclose(w["slo_attainment"], [1 / 2, 2 / 3, 1 / 2])
    # n / max(window, last finish - window start): 2 / 3.2, 3 / max(2, 1.9), 2 / 3.0
    np.testing.assert_allclose(w["throughput_rps"], [2 / 3.2, 3 / 2.0, 2 / 3.0])
    np.testing.assert_allclose(w["emb_hit_rate"], [1 - 70 / 150, 1 - 10 / 300, 1 - 40 / 100])
    np.testing.assert_allclose(w["kv_reuse_rate"], [3 / 15, 11 / 16, 5 / 20])
    assert w["h2d_bytes"].to_list() == [1100, 2200, 4300]
    assert w["prefetch_bytes"].to_list() == [11, 22, 43]
    assert w["h2d_bytes"].dtype == pl.Int64 and w["prefetch_bytes"].dtype == pl.Int64
    np.testing.assert_allclose(w["ratio_min"], [0.5, 0.2, 0.4])
    np.testing.assert_allclose(w["ratio_mean"], [0.5, 0.45, 0.5])
    np.testing.assert_allclose(w["ratio_max"], [0.5, 0.7, 0.6])
    np.testing.assert_allclose(w["ratio_spread"], [0.0, 0.5, 0.2], atol=1e-12)
    # work per node (ms): [2, 6], [3, 6], [11, 0] (node 1 idle still counts as a node)
    np.testing.assert_allclose(w["work_max_mean"], [6 / 4, 6 / 4.5, 11 / 5.5])
    np.testing.assert_allclose(w["work_cv"], [2 / 4, 1.5 / 4.5, 5.5 / 5.5])
    assert w.columns == [
        "window", "start_s", "requests", "p50_ms", "p99_ms", "slo_attainment",
        "throughput_rps", "emb_hit_rate", "kv_reuse_rate", "h2d_bytes", "prefetch_bytes",
        "ratio_min", "ratio_mean", "ratio_max", "ratio_spread", "work_max_mean", "work_cv",
        "measured",
    ]  # fmt: skip


def test_node_table_by_hand():
    t = _result().node_table
    assert t["node"].to_list() == [0, 1]
    assert t["requests"].to_list() == [3, 4]
    np.testing.assert_allclose(t["work_s"], [0.014, 0.006])
    for col, want in (("p50_ms", [1.0, 2.0]), ("p99_ms", [10.0, 11.0]),
                      ("slo_attainment", [0.5, 0.75]), ("throughput_rps", [100.0, 101.0]),
                      ("emb_hit_rate", [0.3, 0.4]), ("kv_reuse_rate", [0.6, 0.4])):  # fmt: skip
        np.testing.assert_allclose(t[col], want, err_msg=col)
    assert t["h2d_bytes"].to_list() == [7, 8]
    # the nodes' shares over the measured windows only
    np.testing.assert_allclose(t["ratio_mean"], [0.4, 0.55])
    np.testing.assert_allclose(t["ratio_min"], [0.2, 0.4])
    np.testing.assert_allclose(t["ratio_max"], [0.6, 0.7])


def test_warmup_is_capped_at_the_last_window_and_zero_keeps_all():
    res = _result(warmup=5)  # three windows: the last one is still measured
    assert res.measured_from_window == 2 and res.requests == 2
    assert res.windows["measured"].to_list() == [False, False, True]
    assert res.p50_ms == pytest.approx(26.0)
    assert res.throughput_rps == pytest.approx(2 / (7.0 - 4.0))
    assert res.h2d_bytes == 4300 and res.ratio_spread == pytest.approx(0.2)
    np.testing.assert_allclose(res.node_table["ratio_mean"], [0.6, 0.4])
    np.testing.assert_allclose(res.node_table["work_s"], [0.011, 0.0])
    res = _result(warmup=0)
    assert res.measured_from_window == 0 and res.requests == 7
    assert res.throughput_rps == pytest.approx(7 / 7.0)
    assert res.h2d_bytes == 7600 and res.prefetch_bytes == 76
    assert res.ratio_spread == pytest.approx(0.7 / 3)
    # work (ms): node 0 2 + 3 + 10 + 1, node 1 6 + 2 + 4 -> mean 14, std 2
    assert res.imbalance_max_mean == pytest.approx(16 / 14)
    assert res.imbalance_cv == pytest.approx(2 / 14)


def test_an_empty_window_and_no_work():
    # one node, window 0 empty, window 1 two zero-service requests, nothing warm
    out = {
        "sojourn_s": np.array([0.004, 0.008]), "service_s": np.zeros(2),
        "batch_size": np.zeros(2, np.int32), "finish_s": np.array([1.5, 1.7]),
        "lookup_bytes": np.zeros(2, np.int64), "miss_bytes": np.zeros(2, np.int64),
        "n_reused": np.zeros(2, np.int64), "ctx_len": np.zeros(2, np.int64),
        "n_computed": np.zeros(2, np.int64),
    }  # fmt: skip
    stub = _node_stub(0)
    stub.ratios = np.array([0.3, 0.9])
    stub.windows = pl.DataFrame({"h2d_bytes": [5, 6], "prefetch_bytes": [0, 1]})
    cfg = NodeConfig(window_s=1.0, warmup_windows=0, slo_ms=5.0)
    res = build_result("rr", "p", cfg, np.array([0, 0, 2]), np.zeros(2, np.int32), out, [stub])
    w = res.windows
    assert w["requests"].to_list() == [0, 2]
    assert math.isnan(w["p50_ms"][0]) and math.isnan(w["emb_hit_rate"][0])
    assert w["throughput_rps"].to_list() == [0.0, 2.0]
    # no work at all: the imbalance is undefined, not an error
    assert all(math.isnan(x) for x in w["work_max_mean"].to_list() + w["work_cv"].to_list())
    assert math.isnan(res.imbalance_max_mean) and math.isnan(res.imbalance_cv)
    assert math.isnan(res.emb_hit_rate) and math.isnan(res.kv_reuse_rate)
    assert res.slo_attainment == pytest.approx(0.5) and res.requests == 2
    assert res.throughput_rps == pytest.approx(2 / 1.7)
    assert res.ratio_spread == 0.0 and res.h2d_bytes == 11


def _empty_out(n: int = 0) -> dict:
    keys = ("sojourn_s", "service_s", "batch_size", "finish_s", "lookup_bytes", "miss_bytes",
            "n_reused", "ctx_len", "n_computed")  # fmt: skip
    return {k: np.zeros(n) for k in keys}


def test_one_window_is_measured_even_with_a_warmup():
    # warm-up 1 of a single window: nothing would be left, so the window is measured;
    # three requests finishing within 0.8 s of the start: throughput over 0.8 s, not the window
    out = _empty_out(3) | {"sojourn_s": np.array([0.001, 0.002, 0.003]),
                           "finish_s": np.array([0.2, 0.5, 0.8])}  # fmt: skip
    stub = _node_stub(0)
    stub.ratios = np.array([0.4])
    stub.windows = pl.DataFrame({"h2d_bytes": [9], "prefetch_bytes": [2]})
    cfg = NodeConfig(window_s=2.0, warmup_windows=1, slo_ms=5.0)
    res = build_result("rr", "p", cfg, np.array([0, 3]), np.zeros(3, np.int32), out, [stub])
    assert res.measured_from_window == 0 and res.requests == 3
    assert res.windows["measured"].to_list() == [True]
    assert res.throughput_rps == pytest.approx(3 / 0.8)
    assert res.windows["throughput_rps"].to_list() == [pytest.approx(3 / 2.0)]
    assert res.h2d_bytes == 9 and res.prefetch_bytes == 2
    # a window length given as an integer still starts windows at float seconds
    cfg = NodeConfig(window_s=2, warmup_windows=0, slo_ms=5.0)
    res = build_result("rr", "p", cfg, np.array([0, 3]), np.zeros(3, np.int32), out, [stub])
    assert res.windows["start_s"].dtype == pl.Float64


def test_no_windows_gives_empty_tables_and_undefined_figures():
    stub = _node_stub(0)
    stub.ratios = np.zeros(0)
    stub.windows = pl.DataFrame({"h2d_bytes": np.zeros(0, np.int64),
                                 "prefetch_bytes": np.zeros(0, np.int64)})  # fmt: skip
    res = build_result("rr", "p", NodeConfig(warmup_windows=1), np.array([0]),
                       np.zeros(0, np.int32), _empty_out(), [stub, stub])  # fmt: skip
    assert res.ratios.shape == (0, 2) and res.window_idx.shape == (0,)
    assert res.windows.height == 0 and res.windows.width == 18
    assert res.windows["ratio_spread"].dtype == pl.Float64
    t = res.node_table
    assert t["node"].to_list() == [0, 1]
    for col in ("ratio_mean", "ratio_min", "ratio_max"):
        assert t[col].to_list() == [0.0, 0.0], col
    assert res.requests == 0 and res.measured_from_window == 0
    assert res.h2d_bytes == 0 and res.prefetch_bytes == 0
    for k in ("p50_ms", "p99_ms", "throughput_rps", "emb_hit_rate", "kv_reuse_rate",
              "imbalance_max_mean", "ratio_spread"):  # fmt: skip
        assert math.isnan(getattr(res, k)), k
