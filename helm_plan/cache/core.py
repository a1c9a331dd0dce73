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
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from helm_plan.arrays import TraceArrays
from helm_plan.errors import ConfigError
from helm_plan.profiles import ModelProfile

# meta layout for both lists: [head (MRU), tail (LRU), used, capacity]
_HEAD, _TAIL, _USED, _CAP = 0, 1, 2, 3


@dataclass
class CacheState:
    """Mutable cache contents of one GPU: EMB rows and per-user KV prefixes."""

    emb_prev: np.ndarray
    """LRU link towards MRU per item, int32 (-1 none)."""
    emb_next: np.ndarray
    """LRU link towards LRU per item, int32 (-1 none)."""
    emb_resident: np.ndarray
    """1 if the item's row is cached, uint8."""
    emb_meta: np.ndarray
    """[head, tail, rows used, capacity rows], int64."""
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
        return cls(
            emb_prev=np.full(n_items, -1, np.int32),
            emb_next=np.full(n_items, -1, np.int32),
            emb_resident=np.zeros(n_items, np.uint8),
            emb_meta=np.array([-1, -1, 0, emb_rows], np.int64),
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
        return int(self.emb_meta[_CAP])

    @property
    def kv_capacity_tokens(self) -> int:
        return int(self.kv_meta[_CAP])

    @property
    def emb_rows_used(self) -> int:
        return int(self.emb_meta[_USED])

    @property
    def kv_tokens_used(self) -> int:
        return int(self.kv_meta[_USED])

    def emb_lru_order(self) -> np.ndarray:
        """Resident item ids from MRU to LRU (for tests and inspection)."""
        return _walk(self.emb_next, int(self.emb_meta[_HEAD]), int(self.emb_meta[_USED]))

    def kv_lru_order(self) -> np.ndarray:
        """Resident user ids from MRU to LRU."""
        n = int((self.kv_len >= 0).sum())
        return _walk(self.kv_next, int(self.kv_meta[_HEAD]), n)

    def resize(self, emb_rows: int, kv_tokens: int) -> tuple[int, int]:
        """Set new capacities; shrinking evicts LRU entries. Returns (rows, users) evicted."""
        if emb_rows < 0 or kv_tokens < 0:
            raise ConfigError(
                f"capacities must be >= 0, got emb_rows={emb_rows}, kv_tokens={kv_tokens}"
            )
        self.emb_meta[_CAP] = emb_rows
        self.kv_meta[_CAP] = kv_tokens
        ev_rows = _emb_shrink(self.emb_prev, self.emb_next, self.emb_resident, self.emb_meta)
        ev_users = _kv_shrink(self.kv_prev, self.kv_next, self.kv_len, self.kv_meta)
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

    @property
    def emb_hit_rate(self) -> float:
        lk = int(self.n_lookup.sum())
        return 1.0 - int(self.n_miss.sum()) / lk if lk else 0.0

    @property
    def kv_reuse_rate(self) -> float:
        tot = int(self.ctx_len.sum())
        return int(self.n_reused.sum()) / tot if tot else 0.0


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
    pf_done = _replay(
        arrays.ts_s, arrays.user, arrays.hist_end, arrays.user_hist_offsets, arrays.hist_values,
        arrays.cand_offsets, arrays.cand_values, start, stop, max_seq_len,
        state.emb_prev, state.emb_next, state.emb_resident, state.emb_meta,
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
    _fill_stream(
        arrays.user, arrays.hist_end, arrays.user_hist_offsets, arrays.hist_values,
        arrays.cand_offsets, arrays.cand_values, start, n_computed, offs, ids,
    )  # fmt: skip
    return ids, offs


# ---------------------------------------------------------------- compiled core


@nb.njit(cache=True, inline="always")
def _unlink(prev, nxt, meta, i):
    p = prev[i]
    q = nxt[i]
    if p >= 0:
        nxt[p] = q
    else:
        meta[_HEAD] = q
    if q >= 0:
        prev[q] = p
    else:
        meta[_TAIL] = p
    prev[i] = -1
    nxt[i] = -1


@nb.njit(cache=True, inline="always")
def _push_head(prev, nxt, meta, i):
    h = meta[_HEAD]
    prev[i] = -1
    nxt[i] = h
    if h >= 0:
        prev[h] = i
    else:
        meta[_TAIL] = i
    meta[_HEAD] = i


@nb.njit(cache=True)
def _emb_shrink(prev, nxt, res, meta):
    ev = 0
    while meta[_USED] > meta[_CAP]:
        t = meta[_TAIL]
        _unlink(prev, nxt, meta, t)
        res[t] = 0
        meta[_USED] -= 1
        ev += 1
    return ev


@nb.njit(cache=True)
def _kv_shrink(prev, nxt, kv_len, meta):
    ev = 0
    while meta[_USED] > meta[_CAP]:
        t = meta[_TAIL]
        _unlink(prev, nxt, meta, t)
        meta[_USED] -= kv_len[t]
        kv_len[t] = -1
        ev += 1
    return ev


@nb.njit(cache=True, inline="always")
def _emb_access(prev, nxt, res, meta, it):
    """Touch row ``it``; returns 1 on a miss."""
    if res[it]:
        if meta[_HEAD] != it:
            _unlink(prev, nxt, meta, it)
            _push_head(prev, nxt, meta, it)
        return 0
    if meta[_CAP] > 0:
        if meta[_USED] >= meta[_CAP]:
            t = meta[_TAIL]
            _unlink(prev, nxt, meta, t)
            res[t] = 0
            meta[_USED] -= 1
        _push_head(prev, nxt, meta, it)
        res[it] = 1
        meta[_USED] += 1
    return 1


@nb.njit(cache=True)
def _replay(
    ts, user, hist_end, uoff, hist, coff, cvals, start, stop, max_seq_len,
    e_prev, e_next, e_res, e_meta, k_prev, k_next, k_len, k_start, k_meta,
    pf_rows, pf_t, counts, out,
):  # fmt: skip
    count = counts.shape[0] > 0
    pf = 0
    pf_done = 0
    npf = pf_rows.shape[0]
    for i in range(start, stop):
        # Refill: rows whose background copy has landed fill free space only.
        while pf < npf and pf_t[pf] <= ts[i]:
            r = pf_rows[pf]
            pf += 1
            if e_res[r] == 0 and e_meta[_USED] < e_meta[_CAP]:
                _push_head(e_prev, e_next, e_meta, r)
                e_res[r] = 1
                e_meta[_USED] += 1
                pf_done += 1
        j = i - start
        u = user[i]
        full = hist_end[i]
        L = full if full < max_seq_len else max_seq_len
        s0 = full - L
        c = 0
        if k_len[u] >= 0:
            if k_start[u] == s0:
                c = k_len[u]
            _unlink(k_prev, k_next, k_meta, u)
            k_meta[_USED] -= k_len[u]
            k_len[u] = -1
        n = L - c
        if L > 0 and k_meta[_CAP] >= L:
            while k_meta[_USED] + L > k_meta[_CAP]:
                t = k_meta[_TAIL]
                _unlink(k_prev, k_next, k_meta, t)
                k_meta[_USED] -= k_len[t]
                k_len[t] = -1
            _push_head(k_prev, k_next, k_meta, u)
            k_len[u] = L
            k_start[u] = s0
            k_meta[_USED] += L
        miss = 0
        base = uoff[u] + full
        if e_meta[_CAP] == 0 and e_meta[_USED] == 0 and not count:
            # Fast path (same result): an empty zero-capacity EMB cache misses every lookup.
            miss = n + coff[i + 1] - coff[i]
        else:
            for p in range(base - n, base):
                it = hist[p]
                miss += _emb_access(e_prev, e_next, e_res, e_meta, it)
                if count:
                    counts[it] += 1
            for p in range(coff[i], coff[i + 1]):
                it = cvals[p]
                miss += _emb_access(e_prev, e_next, e_res, e_meta, it)
                if count:
                    counts[it] += 1
        out[0, j] = n
        out[1, j] = c
        out[2, j] = L
        out[3, j] = n + coff[i + 1] - coff[i]
        out[4, j] = miss
    return pf_done


@nb.njit(cache=True)
def _fill_stream(user, hist_end, uoff, hist, coff, cvals, start, n_computed, offs, ids):
    for j in range(n_computed.shape[0]):
        i = start + j
        base = uoff[user[i]] + hist_end[i]
        w = offs[j]
        for p in range(base - n_computed[j], base):
            ids[w] = hist[p]
            w += 1
        for p in range(coff[i], coff[i + 1]):
            ids[w] = cvals[p]
            w += 1


@nb.njit(cache=True)
def _walk(nxt, head, n):
    out = np.empty(n, np.int64)
    cur = head
    k = 0
    while cur >= 0 and k < n:
        out[k] = cur
        cur = nxt[cur]
        k += 1
    return out[:k]
