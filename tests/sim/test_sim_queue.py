"""FIFO queue: hand-worked examples, M/M/1 theory, and a brute-force heap model.

The FIFO wrapper's checks and what it hands the kernel (a carried backlog, dtypes).

Pins ``tests/queueing.py``'s ``fifo`` (issue 16 mutation survivors): each input check has
its exact error and accepts its boundary (equal arrivals, zero service, an integral float
slot count); a carried ``free_at_s`` backlog, integer inputs and blocks are compared with a
plain-Python slot loop (the earliest-free slot, lowest index on ties).
"""

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


def _brute_slots(arr, svc, free, bt=(), bd=()):
    """(start, finish, blocked, free) of a FIFO on len(free) slots with blocking jobs."""
    free = [float(f) for f in free]
    b, blocked, start, finish = 0, 0.0, [], []
    for a, s in zip(arr, svc, strict=True):
        while b < len(bt) and bt[b] <= a:
            free = [max([bt[b], *free]) + bd[b]] * len(free)
            blocked += bd[b]
            b += 1
        k = min(range(len(free)), key=lambda j: (free[j], j))
        st = max(a, free[k])
        start.append(st)
        finish.append(st + s)
        free[k] = st + s
    blocked += sum(bd[b:])
    return start, finish, blocked, free


def test_backlog_blocks_and_integer_inputs_match_the_brute_force():
    arr = [0, 0, 1, 1, 2, 4, 9]
    svc = [2.5, 0.25, 1.5, 0, 3.25, 0.5, 0.75]
    free0 = [3, 1]  # integers: the carried free times stay float seconds
    bt, bd = [1.5, 8.0, 20.0], [0.5, 1.25, 2.0]
    q = fifo(np.array(arr), np.array(svc), 2, block_at_s=np.array(bt),
             block_dur_s=np.array(bd), free_at_s=np.array(free0))  # fmt: skip
    st, fi, blocked, free = _brute_slots(arr, svc, free0, bt, bd)
    assert q.start_s.dtype == np.float64 and q.finish_s.dtype == np.float64
    assert q.start_s.tolist() == st and q.finish_s.tolist() == fi
    assert q.sojourn_s.tolist() == [f - a for f, a in zip(fi, arr, strict=True)]
    assert q.free_at_s.dtype == np.float64 and q.free_at_s.tolist() == free
    assert type(q.blocked_s) is float and q.blocked_s == blocked == 3.75
    assert free0 == [3, 1]


def test_backlog_is_copied_not_mutated():
    free0 = np.array([0.5, 2.0])
    q = fifo(np.array([0.0, 0.1]), np.array([1.0, 1.0]), 2, free_at_s=free0)
    assert free0.tolist() == [0.5, 2.0]
    # r0 takes slot 0 at 0.5 (ends 1.5); r1 takes it again at 1.5, before slot 1 frees at 2
    assert q.start_s.tolist() == [0.5, 1.5] and q.free_at_s.tolist() == [2.5, 2.0]


def test_defaults_idle_slots_and_no_blocks():
    q = fifo([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], 2.0)  # an integral float slot count is fine
    assert q.start_s.tolist() == [0.0, 0.0, 1.0] and q.blocked_s == 0.0
    assert q.free_at_s.tolist() == [4.0, 2.0]
    one = fifo([0.0, 0.0], [1.0, 1.0])  # one slot by default
    assert one.finish_s.tolist() == [1.0, 2.0]
    empty = fifo(np.zeros(0), np.zeros(0), 3, block_at_s=[1.0], block_dur_s=[2.0])
    assert empty.start_s.shape == (0,) and empty.blocked_s == 2.0
    assert empty.free_at_s.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("args", "kw", "msg"),
    [
        (([0.0], [1.0], 0), {}, "slots must be a positive integer, got 0; pass --slots >= 1"),
        (([0.0], [1.0], -1), {}, "slots must be a positive integer, got -1; pass --slots >= 1"),
        (([0.0], [1.0], True), {}, "slots must be a positive integer, got True; pass --slots >= 1"),
        (([0.0], [1.0], 1.5), {}, "slots must be a positive integer, got 1.5; pass --slots >= 1"),
        (
            ([0.0, 1.0], [1.0], 1),
            {},
            "arrival_s and service_s must be 1-D of the same length, got (2,) and (1,); "
            "pass one service time per arrival",
        ),
        (
            ([[0.0]], [[1.0]], 1),
            {},
            "arrival_s and service_s must be 1-D of the same length, got (1, 1) and (1, 1); "
            "pass one service time per arrival",
        ),
        (
            ([0.0, 2.0, 1.0], [1.0] * 3, 1),
            {},
            "arrival_s must be sorted (non-decreasing); sort the arrivals",
        ),
        (
            ([0.0, 1.0], [1.0, -0.5], 1),
            {},
            "service_s must be >= 0, got -0.5; pass non-negative service times",
        ),
        (
            ([0.0], [1.0], 1),
            {"block_at_s": [1.0, 2.0], "block_dur_s": [1.0]},
            "block_at_s and block_dur_s must have the same length; "
            "pass one duration per blocking job",
        ),
        (
            ([0.0], [1.0], 1),
            {"block_at_s": [1.0]},
            "block_at_s and block_dur_s must have the same length; "
            "pass one duration per blocking job",
        ),
        (
            ([0.0], [1.0], 1),
            {"block_dur_s": [1.0]},
            "block_at_s and block_dur_s must have the same length; "
            "pass one duration per blocking job",
        ),
        (
            ([0.0], [1.0], 1),
            {"block_at_s": [2.0, 1.0], "block_dur_s": [1.0, 1.0]},
            "block_at_s must be sorted; sort the blocking jobs by time",
        ),
        (
            ([0.0], [1.0], 1),
            {"block_at_s": [1.0, 2.0], "block_dur_s": [1.0, -2.0]},
            "block durations must be >= 0, got -2.0; pass non-negative block durations",
        ),
        (
            ([0.0], [1.0], 2),
            {"free_at_s": [0.0]},
            "free_at_s must hold one time per slot (2), got (1,); pass one free time per slot",
        ),
        (
            ([0.0], [1.0], 1),
            {"free_at_s": [[0.0]]},
            "free_at_s must hold one time per slot (1), got (1, 1); pass one free time per slot",
        ),
    ],
)
def test_each_bad_input_has_its_error(args, kw, msg):
    arr, svc, slots = args
    with pytest.raises(ConfigError) as e:
        fifo(np.array(arr), np.array(svc), slots, **{k: np.array(v) for k, v in kw.items()})
    assert e.value.one_line() == msg


def test_boundaries_are_accepted():
    # equal arrivals, zero service, equal block times, a zero-length block
    q = fifo([1.0, 1.0], [0.0, 0.0], 1, block_at_s=[0.5, 0.5], block_dur_s=[0.0, 0.25])
    assert q.start_s.tolist() == [1.0, 1.0] and q.blocked_s == 0.25
    one = fifo([3.0], [1.0], 1)  # a single arrival needs no order check
    assert one.finish_s.tolist() == [4.0]
    single_block = fifo([3.0], [1.0], 1, block_at_s=[2.0], block_dur_s=[2.0])
    assert single_block.start_s.tolist() == [4.0]
