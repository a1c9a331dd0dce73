"""FIFO queue: hand-worked examples, M/M/1 theory, and a brute-force heap model."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from queueing import fifo

from helm_plan.errors import ConfigError


def test_hand_worked_single_slot_with_block():
    # arrivals 0, 1, 2, 2.5, 6; services 2, 2, 1, 0.5, 1; a 1.5 s block enters at t=3.
    # r0: start 0, finish 2                      sojourn 2
    # r1: start max(1, 2) = 2, finish 4          sojourn 3
    # r2: start 4, finish 5                      sojourn 3
    # r3: start 5, finish 5.5                    sojourn 3
    # block (queued at 3, after r3): starts max(3, 5.5) = 5.5, ends 7
    # r4: arrives 6, starts 7, finishes 8        sojourn 2
    q = fifo(
        np.array([0, 1, 2, 2.5, 6.0]),
        np.array([2, 2, 1, 0.5, 1.0]),
        1,
        block_at_s=np.array([3.0]),
        block_dur_s=np.array([1.5]),
    )
    np.testing.assert_allclose(q.start_s, [0, 2, 4, 5, 7])
    np.testing.assert_allclose(q.sojourn_s, [2, 3, 3, 3, 2])
    assert q.blocked_s == 1.5


def test_hand_worked_two_slots_with_block():
    # arrivals 0, 0, 0.5, 1; services 3, 1, 1, 1; 2 slots; a 1 s block at 0.75.
    # r0 -> slot0 [0, 3]; r1 -> slot1 [0, 1]; r2 -> slot1 [1, 2] (slot1 frees first)
    # block waits for both slots idle: starts max(0.75, 3) = 3, ends 4
    # r3: arrives 1, starts 4, finishes 5 -> sojourn 4
    q = fifo(
        np.array([0, 0, 0.5, 1.0]),
        np.array([3, 1, 1, 1.0]),
        2,
        block_at_s=np.array([0.75]),
        block_dur_s=np.array([1.0]),
    )
    np.testing.assert_allclose(q.start_s, [0, 0, 1, 4])
    np.testing.assert_allclose(q.sojourn_s, [3, 1, 1.5, 4])


def test_mm1_mean_sojourn_matches_theory():
    rng = np.random.default_rng(12345)
    lam, mu, n = 0.5, 1.0, 1_000_000
    arr = np.cumsum(rng.exponential(1 / lam, n))
    svc = rng.exponential(1 / mu, n)
    q = fifo(arr, svc, 1)
    want = 1.0 / (mu - lam)
    assert abs(q.sojourn_s.mean() / want - 1.0) < 0.02


def _brute(arr, svc, slots, bt, bd):
    """Heap of slot free times; a block drains all slots then holds them."""
    free = [0.0] * slots
    heapq.heapify(free)
    b = 0
    out = []
    for a, s in zip(arr, svc, strict=True):
        while b < len(bt) and bt[b] <= a:
            t = max([bt[b], *free]) + bd[b]
            free = [t] * slots
            heapq.heapify(free)
            b += 1
        f = heapq.heappop(free)
        st = max(a, f)
        heapq.heappush(free, st + s)
        out.append(st + s - a)
    return np.array(out)


@pytest.mark.parametrize("slots", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fifo_matches_brute_force(slots, seed):
    rng = np.random.default_rng(seed)
    n = 500
    arr = np.sort(rng.uniform(0, 100, n))
    svc = rng.exponential(0.4 * slots, n)
    bt = np.sort(rng.uniform(0, 100, 4))
    bd = rng.uniform(0, 3, 4)
    q = fifo(arr, svc, slots, block_at_s=bt, block_dur_s=bd)
    np.testing.assert_allclose(q.sojourn_s, _brute(arr, svc, slots, bt, bd))


def test_bad_inputs():
    with pytest.raises(ConfigError, match="slots must be a positive integer, got 0"):
        fifo(np.zeros(2), np.ones(2), 0)
    with pytest.raises(ConfigError, match="sorted"):
        fifo(np.array([1.0, 0.0]), np.ones(2), 1)
