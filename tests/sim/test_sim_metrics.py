"""The figures every simulator reports, against numpy and hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helm_plan.sim import metrics


def test_latency_figures_against_numpy():
    rng = np.random.default_rng(3)
    soj = rng.exponential(0.01, 3000)
    f = metrics.latency_figures(soj, slo_ms=20.0)
    assert f.p99_ms == np.percentile(soj, 99) * 1e3
    assert f.p50_ms == np.percentile(soj, 50) * 1e3
    assert f.slo_attainment == np.mean(soj <= 0.02)
    # both percentiles come from one call: each must still be its own call's figure, bit for
    # bit, at every size (1 and 2 requests, an odd count) and with ties
    for n in (1, 2, 3, 7, 100, 3001):
        for soj in (rng.exponential(0.01, n), np.round(rng.exponential(0.01, n), 3)):
            f = metrics.latency_figures(soj, slo_ms=20.0)
            assert (f.p50_ms, f.p99_ms) == (np.percentile(soj, 50) * 1e3,
                                            np.percentile(soj, 99) * 1e3)  # fmt: skip


def test_slo_boundary_counts_as_met():
    # a sojourn exactly at the SLO meets it (<=), one a hair above does not
    f = metrics.latency_figures(np.array([0.004, 0.004 + 1e-12]), slo_ms=4.0)
    assert f.slo_attainment == 0.5


def test_empty_sets_are_nan_never_zero():
    f = metrics.latency_figures(np.zeros(0), 1.0)
    assert math.isnan(f.p50_ms) and math.isnan(f.p99_ms) and math.isnan(f.slo_attainment)
    assert math.isnan(metrics.hit_rate(0, 0)) and math.isnan(metrics.reuse_rate(0, 0))
    assert metrics.hit_rate(3, 4) == 0.25 and metrics.reuse_rate(3, 4) == 0.75
    assert metrics.throughput_rps(0, 0.0, 10.0, float("nan")) == 0.0


def test_throughput_hand_worked():
    # 20 requests in a 10 s window starting at 30 s: keeping up -> 2 rps; last finish at 55 s
    # (the node lagged 15 s past the window end) -> 20 / 25 = 0.8 rps
    assert metrics.throughput_rps(20, 30.0, 10.0, 39.0) == 2.0
    assert metrics.throughput_rps(20, 30.0, 10.0, 55.0) == pytest.approx(0.8)


def test_window_features_hand_worked():
    ts = np.array([0.0, 1.0, 2.0, 3.0, 10.0, 10.5, 11.0, 11.5, 12.0, 25.0])
    edges = np.array([0, 4, 9, 9, 10])  # windows of 10 s: 4, 5, 0 and 1 requests (one empty)
    first = np.array([1, 1, 0, 1, 0, 0, 1, 0, 0, 1], bool)
    ctx_len = np.arange(10, dtype=np.int64) * 10
    f = metrics.window_features(ts, edges, 10.0, first, ctx_len)
    np.testing.assert_allclose(f["arrival_rate_rps"], [0.4, 0.5, 0.0, 0.1])
    np.testing.assert_allclose(f["rate_trend"], [0.0, 0.25, -1.0, 0.0])  # after an empty window: 0
    np.testing.assert_allclose(f["burst_score"], [1.0, 0.5 / 0.4, 0.0, 0.1 / 0.3])
    assert f["interarrival_cv"][0] == 0.0 and np.isnan(f["interarrival_cv"][3])
    np.testing.assert_allclose(f["cold_user_share"][:2], [0.75, 0.2])
    assert f["hist_len_mean"][1] == 60.0 and np.isnan(f["hist_len_mean"][2])
    assert f["hist_len_p95"][0] == np.percentile([0, 10, 20, 30], 95)


def test_single_request_throughput_and_empty_mean():
    assert metrics.throughput_rps(1, 0.0, 10.0, 5.0) == 0.1
    assert math.isnan(metrics.latency_figures(np.zeros(0), 1.0).mean_ms)
    f = metrics.latency_figures(np.array([0.001, 0.003]), 2.0)
    assert f.mean_ms == pytest.approx(2.0) and f.slo_attainment == 0.5


def test_window_features_burst_trailing_mean_and_gap_edge_cases():
    # 9 windows of 1 s; counts 0, 2, 4, 6, 8, 10, 12, 14, 3
    counts = np.array([0, 2, 4, 6, 8, 10, 12, 14, 3])
    edges = np.concatenate([[0], np.cumsum(counts)])
    ts = np.concatenate([w + np.linspace(0.0, 0.5, c) for w, c in enumerate(counts)])
    # window 8's 3 requests at 8.0, 8.1, 8.3: gaps 0.1, 0.2 -> cv = std/mean = 0.05/0.15
    ts[edges[8] :] = [8.0, 8.1, 8.3]
    # window 1's 2 requests at the same instant; window 2's 4 too: mean gap 0 -> cv 0
    ts[edges[2] : edges[3]] = 2.25
    n = len(ts)
    f = metrics.window_features(ts, edges, 1.0, np.zeros(n, bool), np.ones(n, np.int64))
    # burst: rate / mean of the (up to) 6 previous rates; 1 when there is none or it is 0
    assert f["burst_score"][1] == 1.0  # the previous window was empty
    assert f["burst_score"][7] == pytest.approx(14 / np.mean([2, 4, 6, 8, 10, 12]))
    assert f["burst_score"][8] == pytest.approx(3 / np.mean([4, 6, 8, 10, 12, 14]))
    assert f["rate_trend"][8] == pytest.approx(3 / 14 - 1)
    assert f["interarrival_cv"][8] == pytest.approx(0.05 / 0.15)  # exactly 3 requests
    assert np.isnan(f["interarrival_cv"][1])  # 2 requests
    assert f["interarrival_cv"][2] == 0.0  # all at one instant
    assert all(v.dtype == np.float64 and v.shape == (9,) for v in f.values())
