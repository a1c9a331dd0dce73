"""Work counters that follow tasks into worker processes and come back with their results.

A module that counts its work registers a counter by name (the cache kernels
count the requests they replay, :data:`helm_plan.cache.core.REPLAYED`). A task
run in a pool worker adds to the worker's copy; the process and Ray pools send
each task's increments back with its result and add them into the driver's
counters, so a count taken in the driver covers the work its workers did, at
any worker count. Tests and benchmarks read the counters; nothing else does.
"""

from __future__ import annotations

import threading

Counts = dict[str, dict[str, int]]
"""Counter name -> key -> count."""

_COUNTERS: Counts = {}
_LOCK = threading.Lock()  # tasks count from several threads (the carry oracle's forks)


def counter(name: str, *keys: str) -> dict[str, int]:
    """The counter registered as ``name``, its ``keys`` at 0 if new (read it; :func:`add` to it)."""
    with _LOCK:
        d = _COUNTERS.setdefault(name, {})
        for k in keys:
            d.setdefault(k, 0)
        return d


def add(counts: Counts) -> None:
    """Add ``counts`` (e.g. a worker task's increments) into this process's counters."""
    with _LOCK:
        for name, inc in counts.items():
            d = _COUNTERS.setdefault(name, {})
            for k, v in inc.items():
                d[k] = d.get(k, 0) + v


def snapshot() -> Counts:
    """Every counter's current values (to measure a task's increments with :func:`since`)."""
    with _LOCK:
        return {n: dict(d) for n, d in _COUNTERS.items()}


def since(before: Counts) -> Counts:
    """What the counters gained since ``before`` (non-zero increments only)."""
    with _LOCK:
        out: Counts = {}
        for n, d in _COUNTERS.items():
            b = before.get(n, {})
            inc = {k: v - b.get(k, 0) for k, v in d.items() if v != b.get(k, 0)}
            if inc:
                out[n] = inc
        return out


def counted(fn, *args):  # noqa: ANN001, ANN201
    """``fn(*args)`` and the counters' increments while it ran, as a pool worker runs a task."""
    before = snapshot()
    return fn(*args), since(before)
