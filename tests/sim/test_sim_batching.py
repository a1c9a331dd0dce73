"""Batched service: batch_max 1 is the plain FIFO, and a hand-worked static batcher.

The batching wrapper against the brute-force batcher, its checks, and the term breakdown.

Pins :mod:`helm_plan.sim.batching` (issue 16 mutation survivors): ``serve`` equals the
brute-force batching FIFO of tests/brute.py (static and continuous, several streams, a
carried backlog, per-request H2D shares, integer inputs); a blocking job cuts the batch
being formed (worked by hand); each input check has its exact error and accepts its
boundary; ``batch_terms`` equals DESIGN.md's terms summed batch by batch in plain Python.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from brute import C, _queue, batch_time
from queueing import fifo

from helm_plan.errors import ConfigError
from helm_plan.latency.kernel import COEFFS
from helm_plan.latency.model import TERMS, LatencyModel
from helm_plan.sim.batching import BatchResult, batch_terms, serve

# Only t_launch and t_request are non-zero: T(B) = 1 ms + 0.5 ms per request.
SIMPLE = np.array([1e-3, 5e-4, 0, 0, 0, 0, 1, 1, 0, 1], np.float64)  # T(B) = 1 + 0.5|B| ms
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


CV = np.array([C[k] for k in COEFFS])
LAT = LatencyModel(**C)


def _span(n: int, seed: int):
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0, 0.05, n))
    n_comp = rng.integers(0, 20, n)
    L = n_comp + rng.integers(0, 30, n)
    M = rng.integers(1, 6, n)
    look = rng.integers(0, 50_000, n)
    miss = (look * rng.uniform(0, 1, n) * (rng.uniform(0, 1, n) < 0.6)).astype(np.int64)
    share = np.where(rng.uniform(0, 1, n) < 0.4, 0.5, 1.0)
    return arr, [n_comp, L, M, look, miss], share


def _reqs(cols) -> list[tuple[int, ...]]:
    """Brute-force outcome tuples (n, reused, L, M, lookup, miss) of the span's columns."""
    n_comp, L, M, look, miss = (c.tolist() for c in cols)
    return [(n_comp[i], 0, L[i], M[i], look[i], miss[i]) for i in range(len(n_comp))]


def _batches(size: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) of each batch, from the run of equal sizes that starts at each batch."""
    out, i = [], 0
    while i < len(size):
        out.append((i, i + int(size[i])))
        i += int(size[i])
    return out


@pytest.mark.parametrize(
    ("slots", "bmax", "timeout", "batching"),
    [(1, 1, 0.0, "static"), (2, 3, 1e-3, "static"), (1, 4, 2.5e-3, "static"),
     (3, 2, 5e-4, "static"), (2, 3, 1e-3, "continuous")],
)  # fmt: skip
def test_serve_equals_the_brute_force_batcher(slots, bmax, timeout, batching):
    arr, cols, share = _span(60, slots * 10 + bmax)
    free0 = [0.004, 0.0, 0.001][:slots]
    q = serve(arr, *cols, CV, slots=slots, batch_max=bmax, batch_timeout_s=timeout,
              batching=batching, h2d_share=share, free_at_s=np.array(free0))  # fmt: skip
    reqs = _reqs(cols)
    free = list(free0)
    cfg = SimpleNamespace(batching=batching, batch_max=bmax, batch_timeout_s=timeout)
    soj, svc = _queue(arr.tolist(), reqs, share.tolist(), C, cfg, free, [])
    np.testing.assert_allclose(q.finish_s - arr, soj, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(q.service_s, svc, rtol=1e-12)
    np.testing.assert_allclose(q.free_at_s, free, rtol=1e-12)
    np.testing.assert_allclose(q.start_s, q.finish_s - q.service_s, rtol=1e-12)
    assert q.blocked_s == 0.0 and type(q.blocked_s) is float
    spans = _batches(q.batch_size)
    assert q.batch_id.tolist() == [b for b, (lo, hi) in enumerate(spans) for _ in range(hi - lo)]
    assert q.n_batches == len(spans) and q.batch_size.dtype == np.int32
    if bmax > 1:
        assert q.batch_size.max() > 1  # batches really form here
    for lo, hi in spans:
        want = batch_time(C, reqs[lo:hi], share[lo:hi].tolist())
        assert q.service_s[lo] == pytest.approx(want, rel=1e-12)
    assert free0 == [0.004, 0.0, 0.001][:slots]


def test_defaults_one_stream_alone_full_share():
    arr, cols, _ = _span(25, 7)
    q = serve(arr, *cols, CV)
    reqs = _reqs(cols)
    cfg = SimpleNamespace(batching="static", batch_max=1, batch_timeout_s=0.0)
    free = [0.0]
    soj, _ = _queue(arr.tolist(), reqs, [1.0] * 25, C, cfg, free, [])
    np.testing.assert_allclose(q.finish_s - arr, soj, rtol=1e-12, atol=1e-15)
    assert q.free_at_s.tolist() == pytest.approx(free) and q.n_batches == 25


def test_a_blocking_job_cuts_the_forming_batch_by_hand():
    # arrivals 0, 0.5, 1.0 ms; batch_max 3, timeout 2 ms; T(B) = 1 + 0.5|B| ms.
    # B1 opens at 0; it would close at 1.0 (third arrival) but a 1 ms block enters at 0.8:
    #   closes at 0.8 with {0, 0.5}, T = 2 -> ends 2.8.
    # the block waits for the stream: 2.8 -> 3.8. B2 = {1.0}: timeout 3.0, stream free at
    #   3.8 -> starts 3.8, T = 1.5 -> ends 5.3. A 0.5 ms block at 10 ms ends at 10.5.
    z = [np.zeros(3)] * 5
    q = serve(np.array([0.0, 0.5, 1.0]) * 1e-3, *z, SIMPLE, batch_max=3, batch_timeout_s=2e-3,
              block_at_s=np.array([0.8e-3, 10e-3]), block_dur_s=np.array([1e-3, 0.5e-3]))  # fmt: skip
    np.testing.assert_allclose(q.start_s * 1e3, [0.8, 0.8, 3.8])
    np.testing.assert_allclose(q.finish_s * 1e3, [2.8, 2.8, 5.3])
    np.testing.assert_allclose(q.service_s * 1e3, [2.0, 2.0, 1.5])
    assert q.batch_size.tolist() == [2, 2, 1] and q.batch_id.tolist() == [0, 0, 1]
    assert q.blocked_s == pytest.approx(1.5e-3)
    np.testing.assert_allclose(q.free_at_s * 1e3, [10.5])


def test_empty_span():
    q = serve(np.zeros(0), *[np.zeros(0)] * 5, CV, slots=2, h2d_share=np.zeros(0))
    assert q.n_batches == 0 and q.start_s.shape == (0,) and q.free_at_s.tolist() == [0.0, 0.0]
    t = batch_terms(q, *[np.zeros(0)] * 5, np.zeros(0), LAT)
    assert t == dict.fromkeys(TERMS, 0.0)
    one = BatchResult(*[np.zeros(1)] * 4, np.array([6]), 0.0, np.zeros(1))
    assert one.n_batches == 7


Z1 = [np.zeros(1)] * 5


@pytest.mark.parametrize(
    ("args", "kw", "msg"),
    [
        ((np.zeros(1), *Z1), {"slots": 0}, "slots must be a positive integer, got 0"),
        ((np.zeros(1), *Z1), {"batch_max": 0}, "batch_max must be a positive integer, got 0"),
        (
            (np.zeros(1), *Z1),
            {"batch_timeout_s": -1e-9},
            "batch_timeout_s must be finite and >= 0, got -1e-09; pass --batch-timeout-ms >= 0",
        ),
        (
            (np.zeros(1), *Z1),
            {"batch_timeout_s": np.nan},
            "batch_timeout_s must be finite and >= 0, got nan; pass --batch-timeout-ms >= 0",
        ),
        (
            (np.zeros(1), *Z1),
            {"batching": "dynamic"},
            "unknown batching 'dynamic'; use one of static, continuous",
        ),
        *[
            (
                (np.zeros(2), *[np.zeros(1) if j == i else np.zeros(2) for j in range(5)]),
                {},
                "every per-request array must have one entry per arrival; "
                "pass one value per arrival in every array",
            )
            for i in range(5)
        ],
        *[
            (
                (np.zeros(2), *[np.zeros(2)] * 5),
                {"h2d_share": np.array(s)},
                "h2d_share must hold one value in (0, 1] per request; "
                "pass one share in (0, 1] per request",
            )
            for s in ([1.0], [0.5, 0.0], [1.0 + 1e-12, 0.5], [[1.0, 1.0]], [0.5, np.nan])
        ],
        (
            (np.zeros(1), *Z1),
            {"block_at_s": np.array([1.0])},
            "block_at_s and block_dur_s must have the same length; "
            "pass one duration per blocking job",
        ),
        (
            (np.zeros(1), *Z1),
            {"block_dur_s": np.array([1.0])},
            "block_at_s and block_dur_s must have the same length; "
            "pass one duration per blocking job",
        ),
        (
            (np.zeros(1), *Z1),
            {"slots": 2, "free_at_s": np.zeros(1)},
            "free_at_s must hold one time per slot (2), got (1,); pass one free time per slot",
        ),
        (
            (np.zeros(1), *Z1),
            {"free_at_s": np.zeros(2)},
            "free_at_s must hold one time per slot (1), got (2,); pass one free time per slot",
        ),
    ],
)
def test_each_bad_input_has_its_error(args, kw, msg):
    with pytest.raises(ConfigError) as e:
        serve(*args, SIMPLE, **kw)
    line = e.value.one_line()
    assert line == msg if "; " in msg else line.startswith(msg + "; ")


def test_boundaries_are_accepted():
    z = [np.zeros(2)] * 5
    arr = np.array([0.0, 1e-3])
    for share in ([1.0, 1.0], [1e-9, 1.0]):
        assert serve(arr, *z, SIMPLE, h2d_share=np.array(share)).n_batches == 2
    assert serve(arr, *z, SIMPLE, batch_timeout_s=0.0, batch_max=2).n_batches == 2
    # an integer timeout of whole seconds and a StrEnum-free mode name
    q = serve(arr, *z, SIMPLE, batch_timeout_s=1, batch_max=2, batching="static")
    assert q.batch_size.tolist() == [2, 2] and q.start_s.tolist() == [1e-3, 1e-3]


def test_the_link_share_slows_only_the_missing_requests():
    # one request alone, 1e6 missed bytes at 1e9 B/s: 1 ms of link at share 1, 2 ms at 0.5
    c = np.zeros(len(COEFFS))
    c[COEFFS.index("h2d_bw_Bps")] = 1e9
    for k in ("hbm_bw_Bps", "host_gather_Bps"):
        c[COEFFS.index(k)] = np.inf
    cols = [np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1), np.array([1e6])]
    full = serve(np.zeros(1), *cols, c).service_s[0]
    half = serve(np.zeros(1), *cols, c, h2d_share=np.array([0.5])).service_s[0]
    assert full == pytest.approx(1e-3) and half == pytest.approx(2e-3)


@pytest.mark.parametrize(("bmax", "timeout"), [(1, 0.0), (4, 2e-3)])
def test_batch_terms_by_hand(bmax, timeout):
    arr, cols, share = _span(40, 3)
    q = serve(arr, *cols, CV, batch_max=bmax, batch_timeout_s=timeout, h2d_share=share)
    got = batch_terms(q, *cols, share, LAT)
    want = dict.fromkeys(TERMS, 0.0)
    n_comp, L, M, look, miss = (c.tolist() for c in cols)
    for lo, hi in _batches(q.batch_size):
        idx = range(lo, hi)
        x = sum(n_comp[i] + M[i] for i in idx)
        p = sum(n_comp[i] * L[i] - n_comp[i] * (n_comp[i] - 1) / 2 + M[i] * L[i] for i in idx)
        mb = sum(miss[i] for i in idx)
        want["launch"] += C["t_launch_s"]
        want["request"] += (hi - lo) * C["t_request_s"]
        want["compute"] += max(C["weight_read_s"], C["dense_s_per_token"]
                               * (x + C["mfu_half_tokens"]) + C["attn_s_per_pair"] * p)  # fmt: skip
        want["emb_hbm"] += sum(look[i] for i in idx) / C["hbm_bw_Bps"]
        want["h2d"] += (C["h2d_latency_s"] if mb > 0 else 0.0) + sum(
            miss[i] / (C["h2d_bw_Bps"] * share[i]) for i in idx
        )
        want["host_gather"] += mb / C["host_gather_Bps"]
    assert list(got) == list(TERMS)
    for k in TERMS:
        assert type(got[k]) is float
        assert got[k] == pytest.approx(want[k], rel=1e-12), k
    assert want["h2d"] > 0 and want["compute"] > 0


def test_default_timeout_is_zero():
    # batch_max 2 without a timeout: each request closes its batch on arrival
    z = [np.zeros(2)] * 5
    q = serve(np.array([0.0, 1e-4]), *z, SIMPLE, batch_max=2)
    assert q.batch_size.tolist() == [1, 1] and q.start_s.tolist() == [0.0, 1.5e-3]


def test_integer_backlog_and_ids_keep_their_types():
    # free times given as integers: the streams' new free times are fractional seconds
    z = [np.zeros(3)] * 5
    q = serve(np.array([0.0, 0.5, 3.2]), *z, SIMPLE, slots=2, free_at_s=np.array([1, 0]))
    # r0 -> stream 1 (free at 0): 0 -> 1.5 ms; r1 (0.5 s) -> stream 1 again: 0.5 -> 0.5015 s;
    # r2 (3.2 s) -> stream 1, which frees before stream 0 (1 s): 3.2 -> 3.2015 s
    np.testing.assert_allclose(q.start_s, [0.0, 0.5, 3.2])
    assert q.free_at_s.dtype == np.float64
    np.testing.assert_allclose(q.free_at_s, [1.0, 3.2015])
    assert q.batch_id.dtype == np.int64 and q.batch_id.tolist() == [0, 1, 2]


def test_float32_token_counts_are_summed_in_float64():
    # 16777218 + 1 is not a float32 number: the batch's tokens must be counted exactly
    c = np.zeros(len(COEFFS))
    c[COEFFS.index("dense_s_per_token")] = 1.0
    for k in ("hbm_bw_Bps", "h2d_bw_Bps", "host_gather_Bps"):
        c[COEFFS.index(k)] = np.inf
    n_comp = np.array([16777218.0], np.float32)
    cols = [n_comp, n_comp, np.array([1.0], np.float32), np.zeros(1), np.zeros(1)]
    q = serve(np.zeros(1), *cols, c)
    assert q.service_s[0] == 16777219.0


def test_batch_terms_of_a_single_request():
    arr, cols, share = _span(1, 5)
    q = serve(arr, *cols, CV, h2d_share=share)
    t = batch_terms(q, *cols, share, LAT)
    assert t["launch"] == C["t_launch_s"] and t["request"] == C["t_request_s"]
    assert sum(t.values()) == pytest.approx(q.service_s[0], rel=1e-12)
