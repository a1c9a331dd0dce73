"""A specialised EMB-only LRU over a bare key stream (same semantics as the core's EMB cache).

``core.replay`` needs a whole trace; this replays just a stream of dense keys
with their byte sizes, e.g. an exported ``--stream-out`` stream or a
benchmark stream: a miss evicts LRU keys until the new key fits, and a key
larger than the whole capacity is fetched but not cached (tests check it
against a brute-force LRU and libCacheSim, and against the stack-distance curves).

Only tests and ``benchmarks/bench_cache.py`` (which races it against libCacheSim) use it,
so it lives under ``tests/`` rather than in the product.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.cache.stack import as_ids, as_sizes, stream_sizes
from helm_plan.errors import ConfigError


def emb_lru(
    ids: np.ndarray,
    capacity_bytes: int,
    key_bytes: np.ndarray | None = None,
    n_ids: int | None = None,
) -> tuple[int, int]:
    """(misses, miss bytes) of a cold LRU of ``capacity_bytes`` over dense ``ids``.

    ``key_bytes`` gives each id's size (None: 1 byte each, capacity in rows).

    The LRU order is the access log itself: ``last[x]`` is x's latest
    position and a pointer ``tail`` walks the log in time order; x is
    resident iff ``last[x] >= tail``, and an eviction advances ``tail`` to
    the next live entry (``last[ids[p]] == p``) and drops it. Each position is
    passed once, so an access costs O(1) amortised with about two random
    memory touches (a linked-list LRU needs four or five on a hit). A key
    that is not cached keeps its stale ``last`` (below ``tail``), so it stays
    out.
    """
    if capacity_bytes < 0:
        raise ConfigError(
            f"capacity must be >= 0, got {capacity_bytes}", hint="pass a capacity in bytes"
        )
    ids, n_ids = as_ids(ids, n_ids)
    if len(ids) == 0:
        return 0, 0
    sizes = stream_sizes(ids, key_bytes, as_sizes(key_bytes, n_ids))  # in log order
    last = np.full(n_ids, -1, np.int64 if len(ids) >= 2**31 else np.int32)
    miss, miss_b = _lru_log(ids, sizes, last, int(capacity_bytes))
    return int(miss), int(miss_b)


def emb_lru_misses(ids: np.ndarray, capacity_rows: int, n_ids: int | None = None) -> int:
    """Misses of a cold unit-size LRU of ``capacity_rows`` rows over dense ``ids``."""
    return emb_lru(ids, capacity_rows, None, n_ids)[0]


@nb.njit(cache=True, nogil=True)
def _lru_log(ids, sizes, last, cap):
    tail = 0
    used = 0
    miss = 0
    miss_b = 0
    for t in range(ids.shape[0]):
        x = ids[t]
        if last[x] >= tail:
            last[x] = t
            continue
        b = sizes[t]
        miss += 1
        miss_b += b
        if b > cap:
            continue
        while used + b > cap:  # evict the LRU entry: the next live position of the log
            while last[ids[tail]] != tail:
                tail += 1
            used -= sizes[tail]
            tail += 1
        used += b
        last[x] = t
    return miss, miss_b
