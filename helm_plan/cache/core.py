"""The compiled cache core: EMB row LRU and per-user KV LRU with prefix reuse.

This is the engine every later stage calls (curves, node simulator, oracle,
cluster). State is explicit (:class:`CacheState`): it is carried from window
to window, resized at a boundary and copied. Replays run in one numba loop
over dense ids; LRU order lives in array-linked lists (``prev``/``next``
indices, ``-1`` for none) so a hit, a miss and an eviction are O(1).

Per request (DESIGN.md, Node model):

1. KV. ``L = min(hist_end, max_seq_len)``; the cached prefix is valid only if
   the user's truncated history still starts where it did (no sliding of the
   ``max_seq_len`` window). Then ``c`` tokens are reused and ``n = L - c``
   computed. Afterwards the user holds ``L`` tokens, evicting LRU users; a user
   larger than the whole KV capacity is not cached.
2. EMB. Lookups are the ``n`` computed history tokens, then the candidates;
   each miss is inserted with LRU eviction.

The EMB LRU is log-structured because EMB lookups dominate (history tokens
plus hundreds of candidates per request): ``emb_last[item]`` holds the clock
of the item's latest access (-1: not resident) and every access appends
``(item, clock)`` to a queue. The least recently used row is the first queue
entry that is still current (``emb_last[item] == clock``). A hit is one
write and one append instead of a four-pointer move-to-front; the queue is
compacted when full (amortised O(1)), and eviction order is exactly LRU. KV
(one operation per request, not per token) keeps a doubly linked list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.arrays import TraceArrays
from helm_plan.cache import _kernels as K
from helm_plan.errors import ConfigError
from helm_plan.profiles import ModelProfile

_QUEUE_SLACK = 1024


@dataclass
class CacheState:
    """Mutable cache contents of one GPU: EMB rows and per-user KV prefixes."""

    emb_last: np.ndarray
    """Clock of each item's latest access, -1 if its row is not cached, int64."""
    emb_qi: np.ndarray
    """Access-log queue: item ids, int32."""
    emb_qt: np.ndarray
    """Access-log queue: access clocks, int64."""
    emb_meta: np.ndarray
    """[queue head, queue tail, rows used, capacity rows, clock], int64."""
    kv_prev: np.ndarray
    """LRU link towards MRU per user, int32."""
    kv_next: np.ndarray
    """LRU link towards LRU per user, int32."""
    kv_len: np.ndarray
    """Cached tokens per user, -1 if not resident, int64."""
    kv_start: np.ndarray
    """History offset where the cached prefix starts, int64."""
    kv_meta: np.ndarray
    """[head, tail, tokens used, capacity tokens], int64."""

    @classmethod
    def empty(cls, n_items: int, n_users: int, emb_rows: int, kv_tokens: int) -> CacheState:
        """Cold caches with the given capacities."""
        if emb_rows < 0 or kv_tokens < 0:
            raise ConfigError(
                f"capacities must be >= 0, got emb_rows={emb_rows}, kv_tokens={kv_tokens}"
            )
        q = _queue_size(emb_rows, n_items)
        return cls(
            emb_last=np.full(n_items, -1, np.int64),
            emb_qi=np.zeros(q, np.int32),
            emb_qt=np.zeros(q, np.int64),
            emb_meta=np.array([0, 0, 0, emb_rows, 0], np.int64),
            kv_prev=np.full(n_users, -1, np.int32),
            kv_next=np.full(n_users, -1, np.int32),
            kv_len=np.full(n_users, -1, np.int64),
            kv_start=np.zeros(n_users, np.int64),
            kv_meta=np.array([-1, -1, 0, kv_tokens], np.int64),
        )

    def copy(self) -> CacheState:
        """A deep copy (for what-if evaluation from the same warm state)."""
        return CacheState(**{k: v.copy() for k, v in self.__dict__.items()})

    @property
    def emb_capacity_rows(self) -> int:
        return int(self.emb_meta[K.CAP])

    @property
    def kv_capacity_tokens(self) -> int:
        return int(self.kv_meta[K.CAP])

    @property
    def emb_rows_used(self) -> int:
        return int(self.emb_meta[K.USED])

    @property
    def kv_tokens_used(self) -> int:
        return int(self.kv_meta[K.USED])

    @property
    def emb_resident(self) -> np.ndarray:
        """1 where the item's row is cached, uint8 (a fresh array)."""
        return (self.emb_last >= 0).astype(np.uint8)

    def emb_lru_order(self) -> np.ndarray:
        """Resident item ids from MRU to LRU (for tests and inspection)."""
        return K.emb_order(self.emb_last, self.emb_qi, self.emb_qt, self.emb_meta)

    def kv_lru_order(self) -> np.ndarray:
        """Resident user ids from MRU to LRU."""
        n = int((self.kv_len >= 0).sum())
        return K.walk(self.kv_next, int(self.kv_meta[K.HEAD]), n)

    def resize(self, emb_rows: int, kv_tokens: int) -> tuple[int, int]:
        """Set new capacities; shrinking evicts LRU entries. Returns (rows, users) evicted."""
        if emb_rows < 0 or kv_tokens < 0:
            raise ConfigError(
                f"capacities must be >= 0, got emb_rows={emb_rows}, kv_tokens={kv_tokens}"
            )
        self.emb_meta[K.CAP] = emb_rows
        self.kv_meta[K.CAP] = kv_tokens
        ev_rows = K.emb_shrink(self.emb_last, self.emb_qi, self.emb_qt, self.emb_meta)
        q = _queue_size(emb_rows, len(self.emb_last))
        if q > len(self.emb_qi):  # a larger cache needs a larger log to stay amortised O(1)
            K.emb_compact(self.emb_last, self.emb_qi, self.emb_qt, self.emb_meta)
            n = int(self.emb_meta[K.QT])
            qi, qt = np.zeros(q, np.int32), np.zeros(q, np.int64)
            qi[:n], qt[:n] = self.emb_qi[:n], self.emb_qt[:n]
            self.emb_qi, self.emb_qt = qi, qt
        ev_users = K.kv_shrink(self.kv_prev, self.kv_next, self.kv_len, self.kv_meta)
        return int(ev_rows), int(ev_users)


@dataclass(frozen=True)
class ReplayResult:
    """Per-request cache outcomes of one replayed span ``[start, stop)``."""

    n_computed: np.ndarray
    """History tokens computed (prefill), int64."""
    n_reused: np.ndarray
    """History tokens reused from the KV cache, int64."""
    ctx_len: np.ndarray
    """Context length L (history capped at max_seq_len), int64."""
    n_lookup: np.ndarray
    """EMB lookups: computed tokens plus candidates, int64."""
    n_miss: np.ndarray
    """EMB misses (rows copied host-to-device), int64."""
    prefetched_rows: int
    """Rows inserted by the refill prefetch during the span."""
    lookup_counts: np.ndarray | None
    """EMB lookups per item during the span, if requested."""


def capacities(ratio: float, pool_bytes: int, model: ModelProfile) -> tuple[int, int]:
    """(EMB rows, KV tokens) for EMB share ``ratio`` of a ``pool_bytes`` pool."""
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"ratio must be in [0, 1], got {ratio}")
    emb = int(np.floor(ratio * pool_bytes / model.row_bytes))
    kv = int(np.floor((1.0 - ratio) * pool_bytes / model.kv_bytes_per_token))
    return emb, kv


def new_state(
    arrays: TraceArrays, ratio: float, pool_bytes: int, model: ModelProfile
) -> CacheState:
    """Cold caches for ``arrays`` at EMB share ``ratio``."""
    emb, kv = capacities(ratio, pool_bytes, model)
    return CacheState.empty(arrays.n_items, arrays.n_users, emb, kv)


def _queue_size(emb_rows: int, n_items: int) -> int:
    # At most min(rows, items) entries are current, so a compaction frees over half the log.
    return 2 * min(emb_rows, n_items) + _QUEUE_SLACK


_NO_PF_ROWS = np.zeros(0, np.int32)
_NO_PF_T = np.zeros(0, np.float64)


def replay(
    arrays: TraceArrays,
    state: CacheState,
    start: int = 0,
    stop: int | None = None,
    *,
    max_seq_len: int,
    prefetch_rows: np.ndarray | None = None,
    prefetch_ready_s: np.ndarray | None = None,
    count_lookups: bool = False,
) -> ReplayResult:
    """Replay requests ``[start, stop)`` through ``state`` (mutated in place).

    ``prefetch_rows`` (hottest first) are inserted into free EMB space once the
    simulated clock passes ``prefetch_ready_s`` (refill modes ``eager`` and
    ``throttled``); they never evict.
    """
    stop = arrays.n_requests if stop is None else stop
    if not 0 <= start <= stop <= arrays.n_requests:
        raise ConfigError(
            f"span [{start}, {stop}) is outside the trace of {arrays.n_requests} requests"
        )
    if max_seq_len <= 0:
        raise ConfigError(f"max_seq_len must be positive, got {max_seq_len}")
    pf_rows = (
        _NO_PF_ROWS if prefetch_rows is None else np.ascontiguousarray(prefetch_rows, np.int32)
    )
    pf_t = (
        _NO_PF_T if prefetch_ready_s is None else np.ascontiguousarray(prefetch_ready_s, np.float64)
    )
    if len(pf_rows) != len(pf_t):
        raise ConfigError("prefetch_rows and prefetch_ready_s must have the same length")
    m = stop - start
    out = np.zeros((5, m), np.int64)
    counts = np.zeros(arrays.n_items if count_lookups else 0, np.int64)
    pf_done = K.replay(
        arrays.ts_s, arrays.user, arrays.hist_end, arrays.user_hist_offsets, arrays.hist_values,
        arrays.cand_offsets, arrays.cand_values, start, stop, max_seq_len,
        state.emb_last, state.emb_qi, state.emb_qt, state.emb_meta,
        state.kv_prev, state.kv_next, state.kv_len, state.kv_start, state.kv_meta,
        pf_rows, pf_t, counts, out,
    )  # fmt: skip
    return ReplayResult(
        n_computed=out[0],
        n_reused=out[1],
        ctx_len=out[2],
        n_lookup=out[3],
        n_miss=out[4],
        prefetched_rows=int(pf_done),
        lookup_counts=counts if count_lookups else None,
    )


def kv_pass(arrays: TraceArrays, kv_tokens: int, *, max_seq_len: int) -> ReplayResult:
    """Replay the KV cache alone (EMB capacity 0) from cold: per-request computed tokens."""
    st = CacheState.empty(arrays.n_items, arrays.n_users, 0, kv_tokens)
    return replay(arrays, st, max_seq_len=max_seq_len)


def lookup_stream(
    arrays: TraceArrays, n_computed: np.ndarray, start: int = 0, stop: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The EMB access stream of requests ``[start, stop)`` given their computed tokens.

    Returns (item ids int32, per-request offsets int64 of len stop-start+1).
    """
    stop = arrays.n_requests if stop is None else stop
    n_computed = np.asarray(n_computed, np.int64)
    if len(n_computed) != stop - start:
        raise ConfigError(f"n_computed has {len(n_computed)} entries for a span of {stop - start}")
    ncand = arrays.cand_offsets[start + 1 : stop + 1] - arrays.cand_offsets[start:stop]
    offs = np.zeros(stop - start + 1, np.int64)
    np.cumsum(n_computed + ncand, out=offs[1:])
    ids = np.empty(int(offs[-1]), np.int32)
    K.fill_stream(
        arrays.user, arrays.hist_end, arrays.user_hist_offsets, arrays.hist_values,
        arrays.cand_offsets, arrays.cand_values, start, n_computed, offs, ids,
    )  # fmt: skip
    return ids, offs
