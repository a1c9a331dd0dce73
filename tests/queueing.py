"""Queueing references: a plain FIFO queue, Poisson traces with known service times and the
M/D/1 closed form (sim, cluster and plan tests).

:func:`fifo` serves requests in arrival order on ``slots`` parallel executors; each starts on
the slot that frees first, so ``start = max(arrival, earliest slot free time)`` and the
sojourn is ``finish - arrival``. A **blocking job** (an eager refill) enters the FIFO at its
time ``t_b`` (before any request arriving at or after ``t_b``), waits until every slot is idle,
then holds all slots for its duration. The product serves through
:mod:`helm_plan.sim.batching`; this is the independent reference its tests check
``batch_max = 1`` against, so it lives with the tests.

``poisson_table(exp_service=False)`` scores one item per request with no
history, so with a one-term latency model (``t_launch_s = d``) every request
takes exactly ``d``; ``exp_service=True`` draws the candidate count geometric
with mean MEAN_CAND, so ``dense_s_per_token = d / MEAN_CAND`` gives service
that is exponential to 0.1%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba as nb
import numpy as np

from helm_plan import trace
from helm_plan.errors import ConfigError

MEAN_CAND = 1000


def poisson_table(n: int, rate: float, seed: int, *, exp_service: bool):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.exponential(1.0 / rate, n))
    ts -= ts[0]
    users = rng.integers(0, 5000, n)
    off = np.zeros(n + 1, np.int64)
    if exp_service:
        return trace.make_table(ts, users, off, np.zeros(0, np.int64),
                                rng.geometric(1.0 / MEAN_CAND, n))  # fmt: skip
    return trace.make_table(ts, users, off, np.zeros(0, np.int64), np.ones(n, np.int64),
                            candidates_offsets=np.arange(n + 1), candidates_values=np.zeros(n))  # fmt: skip


def md1_wait_cdf(x: float, lam: float, d: float) -> float:
    """Erlang's M/D/1 waiting-time distribution P(W <= x)."""
    s = sum((lam * (k * d - x)) ** k / math.factorial(k) * math.exp(-lam * (k * d - x))
            for k in range(int(math.floor(x / d)) + 1))  # fmt: skip
    return (1.0 - lam * d) * s


def quantile(cdf, q: float, hi: float) -> float:
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class QueueResult:
    """Start and finish time of every request."""

    start_s: np.ndarray
    """Service start per request, seconds, float64."""
    finish_s: np.ndarray
    """Service end per request, seconds, float64."""
    sojourn_s: np.ndarray
    """finish - arrival per request (wait + service), seconds."""
    blocked_s: float
    """Total time all slots were held by blocking jobs, seconds."""
    free_at_s: np.ndarray
    """When each slot frees after the last request: the backlog a next span starts from."""


_NO_T = np.zeros(0, np.float64)


def fifo(
    arrival_s: np.ndarray,
    service_s: np.ndarray,
    slots: int = 1,
    *,
    block_at_s: np.ndarray | None = None,
    block_dur_s: np.ndarray | None = None,
    free_at_s: np.ndarray | None = None,
) -> QueueResult:
    """Serve ``arrival_s`` (sorted) with ``service_s`` on ``slots`` FIFO executors.

    ``free_at_s`` carries a backlog in: when each slot frees (default: all idle).
    """
    if isinstance(slots, bool) or int(slots) != slots or slots <= 0:
        raise ConfigError(
            f"slots must be a positive integer, got {slots}", hint="pass --slots >= 1"
        )
    arr = np.ascontiguousarray(arrival_s, np.float64)
    svc = np.ascontiguousarray(service_s, np.float64)
    if arr.shape != svc.shape or arr.ndim != 1:
        raise ConfigError(
            f"arrival_s and service_s must be 1-D of the same length, got {arr.shape} and {svc.shape}",
            hint="pass one service time per arrival",
        )
    if len(arr) > 1 and np.any(np.diff(arr) < 0):
        raise ConfigError("arrival_s must be sorted (non-decreasing)", hint="sort the arrivals")
    if len(svc) and svc.min() < 0:
        raise ConfigError(
            f"service_s must be >= 0, got {svc.min()}", hint="pass non-negative service times"
        )
    bt = _NO_T if block_at_s is None else np.ascontiguousarray(block_at_s, np.float64)
    bd = _NO_T if block_dur_s is None else np.ascontiguousarray(block_dur_s, np.float64)
    if bt.shape != bd.shape:
        raise ConfigError(
            "block_at_s and block_dur_s must have the same length",
            hint="pass one duration per blocking job",
        )
    if len(bt) > 1 and np.any(np.diff(bt) < 0):
        raise ConfigError("block_at_s must be sorted", hint="sort the blocking jobs by time")
    if len(bd) and bd.min() < 0:
        raise ConfigError(
            f"block durations must be >= 0, got {bd.min()}",
            hint="pass non-negative block durations",
        )
    if free_at_s is None:
        free = np.zeros(int(slots), np.float64)
    else:
        free = np.array(free_at_s, np.float64)
        if free.shape != (int(slots),):
            raise ConfigError(
                f"free_at_s must hold one time per slot ({slots}), got {free.shape}",
                hint="pass one free time per slot",
            )
    start = np.empty_like(arr)
    finish = np.empty_like(arr)
    blocked = _fifo(arr, svc, bt, bd, start, finish, free)
    return QueueResult(start, finish, finish - arr, float(blocked), free)


@nb.njit(cache=True, nogil=True)
def _fifo(arr, svc, bt, bd, start, finish, free):
    slots = free.shape[0]
    nblk = bt.shape[0]
    b = 0
    blocked = 0.0
    for i in range(arr.shape[0]):
        while b < nblk and bt[b] <= arr[i]:
            t = bt[b]
            for k in range(slots):
                if free[k] > t:
                    t = free[k]
            t += bd[b]
            for k in range(slots):
                free[k] = t
            blocked += bd[b]
            b += 1
        k = 0
        for j in range(1, slots):
            if free[j] < free[k]:
                k = j
        s = arr[i] if arr[i] > free[k] else free[k]
        start[i] = s
        finish[i] = s + svc[i]
        free[k] = finish[i]
    while b < nblk:  # blocks after the last arrival still count as blocked time
        blocked += bd[b]
        b += 1
    return blocked
