"""FIFO queue with ``slots`` parallel executors and blocking jobs (DESIGN.md, Node model step 4).

Requests are served in arrival order; each starts on the slot that frees
first, so ``start = max(arrival, earliest slot free time)`` and the sojourn
time is ``wait + service = finish - arrival``.

A **blocking job** models an eager refill: it enters the FIFO at its time
``t_b`` (before any request arriving at or after ``t_b``), waits until every
slot is idle (requests queued before it are served first), then occupies all
slots for its duration. Serving resumes when it ends.

Window figures (:mod:`helm_plan.sim.metrics`) are computed over the requests that
**arrive** in each window, whenever they finish:

- ``p50_ms``/``p99_ms``: percentiles of their sojourn times (numpy's default
  linear interpolation; NaN for an empty window);
- ``slo_attainment``: share with sojourn <= SLO;
- ``throughput_rps``: their count divided by ``max(window length, last finish
  - window start)``; it equals the arrival rate while the node keeps up and
  falls below it when the node lags.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from helm_plan.errors import ConfigError


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
