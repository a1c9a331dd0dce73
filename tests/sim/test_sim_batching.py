"""Batched service: batch_max 1 is the plain FIFO, and a hand-worked static batcher."""

from __future__ import annotations

import numpy as np
import pytest
from queueing import fifo

from helm_plan.errors import ConfigError
from helm_plan.latency.kernel import COEFFS
from helm_plan.sim.batching import serve

# Only t_launch and t_request are non-zero: T(B) = 1 ms + 0.5 ms per request.
SIMPLE = np.array([1e-3, 5e-4, 0, 0, 0, 0, 1, 1, 0, 1], np.float64)
assert len(SIMPLE) == len(COEFFS)


def _zeros(n):
    return [np.zeros(n)] * 5


def test_batch_max_one_is_the_fifo_of_per_request_times():
    rng = np.random.default_rng(1)
    n = 3000
    arr = np.sort(rng.uniform(0, 10, n))
    n_comp = rng.integers(0, 50, n)
    L = n_comp + rng.integers(0, 100, n)
    M = rng.integers(0, 20, n)
    look = rng.integers(0, 10_000, n)
    miss = (look * rng.uniform(0, 1, n)).astype(np.int64)
    c = np.array([2e-4, 3e-5, 4e-4, 2e-7, 64.0, 3e-10, 2e12, 2e9, 1e-5, 5e9])
    for slots in (1, 3):
        b = serve(arr, n_comp, L, M, look, miss, c, slots=slots, batch_max=1,
                  block_at_s=np.array([4.0]), block_dur_s=np.array([0.2]))  # fmt: skip
        # the same per-request times through the plain FIFO
        single = np.array([
            serve(arr[i:i + 1], n_comp[i:i + 1], L[i:i + 1], M[i:i + 1], look[i:i + 1],
                  miss[i:i + 1], c).service_s[0] for i in range(n)
        ])  # fmt: skip
        q = fifo(arr, single, slots, block_at_s=np.array([4.0]), block_dur_s=np.array([0.2]))
        np.testing.assert_array_equal(b.service_s, single)
        np.testing.assert_array_equal(b.finish_s, q.finish_s)
        assert b.blocked_s == q.blocked_s == 0.2
        assert np.all(b.batch_size == 1)


def test_static_batching_by_hand():
    # arrivals 0, 0.1, 0.2, 5, 5.5 ms; batch_max 3, timeout 2 ms, T(B) = 1 + 0.5·|B| ms.
    # B1: first at 0, full (3rd arrives at 0.2) -> closes at 0.2, T = 2.5 -> ends 2.7.
    # B2: first at 5, timeout -> closes at 7 (5.5 joins), T = 2 -> ends 9.
    arr = np.array([0.0, 0.1, 0.2, 5.0, 5.5]) * 1e-3
    b = serve(arr, *_zeros(5), SIMPLE, batch_max=3, batch_timeout_s=2e-3)
    np.testing.assert_allclose(b.start_s * 1e3, [0.2, 0.2, 0.2, 7.0, 7.0])
    np.testing.assert_allclose(b.finish_s * 1e3, [2.7, 2.7, 2.7, 9.0, 9.0])
    np.testing.assert_array_equal(b.batch_size, [3, 3, 3, 2, 2])
    assert b.n_batches == 2
    # continuous: start at once with whatever waits. B1 = {0} at 0 (ends 1.5);
    # B2 = {0.1, 0.2} at 1.5 (ends 3.5); B3 = {5} at 5 (ends 6.5); B4 = {5.5} at 6.5 (ends 8).
    c = serve(arr, *_zeros(5), SIMPLE, batch_max=3, batching="continuous")
    np.testing.assert_allclose(c.start_s * 1e3, [0.0, 1.5, 1.5, 5.0, 6.5])
    np.testing.assert_allclose(c.finish_s * 1e3, [1.5, 3.5, 3.5, 6.5, 8.0])


def test_busy_stream_takes_everything_waiting_up_to_batch_max():
    # the stream is busy until 10 ms: everything that arrived by then goes, 4 at most
    arr = np.arange(6) * 1e-3
    b = serve(arr, *_zeros(6), SIMPLE, batch_max=4, batch_timeout_s=1.0,
              free_at_s=np.array([10e-3]))  # fmt: skip
    np.testing.assert_array_equal(b.batch_size, [4, 4, 4, 4, 2, 2])
    np.testing.assert_allclose(b.start_s[:4], 10e-3)
    np.testing.assert_allclose(b.finish_s[:4], 13e-3)


def test_bad_inputs():
    with pytest.raises(ConfigError, match="batch_max must be a positive integer"):
        serve(np.zeros(1), *_zeros(1), SIMPLE, batch_max=0)
    with pytest.raises(ConfigError, match="batch_timeout_s must be finite"):
        serve(np.zeros(1), *_zeros(1), SIMPLE, batch_timeout_s=np.inf)
    with pytest.raises(ConfigError) as e:
        serve(np.zeros(1), *_zeros(1), SIMPLE, batching="dynamic")
    assert e.value.one_line() == "unknown batching 'dynamic'; use one of static, continuous"


def test_batch_terms_add_up_to_the_service_time():
    from helm_plan.latency.model import TERMS, LatencyModel
    from helm_plan.sim.batching import batch_terms

    rng = np.random.default_rng(4)
    n = 400
    arr = np.sort(rng.uniform(0, 0.5, n))
    cols = [rng.integers(0, 40, n), rng.integers(40, 200, n), rng.integers(0, 30, n)]
    look = rng.integers(0, 5000, n)
    miss = (look * rng.uniform(0, 1, n) * (rng.uniform(0, 1, n) < 0.5)).astype(np.int64)
    share = np.where(rng.uniform(0, 1, n) < 0.3, 0.7, 1.0)
    c = np.array([2e-4, 3e-5, 4e-4, 2e-7, 64.0, 3e-10, 2e12, 2e9, 1e-5, 5e9])
    for bmax, timeout in ((1, 0.0), (6, 2e-3)):
        q = serve(arr, *cols, look, miss, c, batch_max=bmax, batch_timeout_s=timeout,
                  h2d_share=share)  # fmt: skip
        lat = LatencyModel(*c)
        t = batch_terms(q, *cols, look, miss, share, lat)
        assert set(t) == set(TERMS)
        # every batch's terms sum to its T(B): over the span, to the summed per-batch times
        per_batch = q.service_s[np.flatnonzero(np.diff(q.start_s, prepend=-1.0))]
        assert sum(t.values()) == pytest.approx(per_batch.sum(), rel=1e-12)
        assert t["launch"] == pytest.approx(2e-4 * q.n_batches)
        assert t["request"] == pytest.approx(3e-5 * n)


def test_a_batch_never_spans_a_blocking_refill_on_a_busy_stream():
    # The stream is busy until 3 ms (backlog of the previous window); arrivals at 0 and 1 ms,
    # an eager refill queued at 1.5 ms for 2 ms, a later arrival at 2 ms; batch_max 3,
    # timeout 2 ms, T(B) = 1 + 0.5·|B| ms. The batch of 0 closes at the refill (1.5 ms) and
    # waits for the stream (3 ms): {0, 1} runs 3 -> 5. The 2 ms arrival came after the refill
    # was queued, so it may not jump it, though it arrived before the batch started: the
    # refill holds the stream 5 -> 7, then {2} runs 7 -> 8.5.
    arr = np.array([0.0, 1.0, 2.0]) * 1e-3
    b = serve(arr, *_zeros(3), SIMPLE, batch_max=3, batch_timeout_s=2e-3,
              block_at_s=np.array([1.5e-3]), block_dur_s=np.array([2e-3]),
              free_at_s=np.array([3e-3]))  # fmt: skip
    np.testing.assert_allclose(b.start_s * 1e3, [3.0, 3.0, 7.0])
    np.testing.assert_allclose(b.finish_s * 1e3, [5.0, 5.0, 8.5])
    np.testing.assert_array_equal(b.batch_size, [2, 2, 1])
    assert b.blocked_s == pytest.approx(2e-3) and b.free_at_s[0] == pytest.approx(8.5e-3)


def test_a_batch_closes_at_a_queued_blocking_refill_on_an_idle_stream():
    # Idle stream; arrivals 0, 0.5 ms, refill queued at 1 ms for 2 ms, arrival at 1.5 ms;
    # batch_max 3 and a 2 ms timeout would close the first batch at 1.5 ms (its 3rd arrival),
    # but the queue splits at the refill: {0, 0.5} starts at 1 ms (ends 3), the refill holds
    # the stream 3 -> 5, {1.5} starts at 5 (its timeout, 3.5, is long past) and ends 6.5.
    arr = np.array([0.0, 0.5, 1.5]) * 1e-3
    b = serve(arr, *_zeros(3), SIMPLE, batch_max=3, batch_timeout_s=2e-3,
              block_at_s=np.array([1e-3]), block_dur_s=np.array([2e-3]))  # fmt: skip
    np.testing.assert_allclose(b.start_s * 1e3, [1.0, 1.0, 5.0])
    np.testing.assert_allclose(b.finish_s * 1e3, [3.0, 3.0, 6.5])
    np.testing.assert_array_equal(b.batch_size, [2, 2, 1])
