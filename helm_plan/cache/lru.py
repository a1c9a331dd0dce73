"""A specialised EMB-only LRU over a bare id stream (same semantics as the core's EMB cache).

``core.replay`` needs a whole trace; this replays just an access stream of
dense ids, e.g. ``core.lookup_stream`` output or a benchmark stream. A miss
with capacity 0 is not inserted, as in the core.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.errors import ConfigError


def emb_lru_misses(ids: np.ndarray, capacity_rows: int, n_ids: int | None = None) -> int:
    """Misses of a cold unit-size LRU of ``capacity_rows`` rows over dense ``ids``.

    The LRU order is the access log itself: ``last[x]`` is x's latest position
    and a pointer ``tail`` walks the log in time order; x is resident iff
    ``last[x] >= tail``, and an eviction advances ``tail`` to the next live
    entry (``last[ids[p]] == p``) and drops it. Each position is passed once,
    so a request costs O(1) amortised with about two random memory touches
    (a linked-list LRU needs four or five on a hit).
    """
    if capacity_rows < 0:
        raise ConfigError(f"capacity_rows must be >= 0, got {capacity_rows}")
    ids = np.ascontiguousarray(ids, np.int32)
    if len(ids) == 0:
        return 0
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0:
        raise ConfigError("emb_lru_misses needs dense ids >= 0")
    n = hi + 1 if n_ids is None else n_ids
    if n <= hi:
        raise ConfigError(f"n_ids={n} but the stream holds id {hi}")
    if capacity_rows == 0:
        return len(ids)
    last = np.full(n, -1, np.int64 if len(ids) >= 2**31 else np.int32)
    return int(_lru_log_misses(ids, last, capacity_rows))


@nb.njit(cache=True)
def _lru_log_misses(ids, last, cap):
    tail = 0
    used = 0
    miss = 0
    for t in range(ids.shape[0]):
        x = ids[t]
        if last[x] >= tail:
            last[x] = t
            continue
        miss += 1
        if used == cap:
            while last[ids[tail]] != tail:
                tail += 1
            tail += 1
        else:
            used += 1
        last[x] = t
    return miss
