"""The compiled cache core: an EMB LRU over (table, row) keys and a per-user KV LRU with prefix reuse.

This is the engine every later stage calls (curves, node simulator, oracle,
cluster). State is explicit (:class:`CacheState`): it is carried from window
to window, resized at a boundary and copied. Replays run in one numba loop
over dense ids (:mod:`helm_plan.cache._kernels`).

Per request (DESIGN.md, Node model), with ``H`` the user's history length:

1. KV. The context is ``[s0, H)``: ``s0 = 0`` while ``H <= max_seq_len``,
   then ``s0 = ceil((H − max_seq_len)/chunk)·chunk`` (the start moves in
   chunks of ``kv_slide_chunk`` tokens), ``L = H − s0``. A cached prefix is
   reused only if it starts at ``s0``; then ``c`` tokens are reused and
   ``n = L − c`` computed. Afterwards the user holds ``L`` tokens (evicting
   LRU users), unless ``L`` exceeds the whole capacity or the next appended
   token would move the start (such KV can never serve a request that adds
   items, so it is not admitted).
2. EMB. Each of the ``n`` computed history tokens looks up one key per table
   with ``per_history_token``; each candidate one per table with
   ``per_candidate`` (:mod:`helm_plan.cache.keys`). A miss copies the key in,
   evicting LRU keys until its bytes fit; a key larger than the whole
   capacity is fetched but not cached.

Implicit candidates (a trace without a ``candidates`` column) are drawn in
the kernel from the interaction stream up to each request (no look-ahead).

The EMB LRU is built for lookups, which dominate (history tokens plus hundreds
of candidates per request): every access gives the key the next stamp
(``emb_last[key]``, int32; -1: not resident), and the order of the stamps is the
LRU order (:mod:`helm_plan.cache._emblog`). Evictions pop a snapshot of the
resident keys sorted by stamp (``emb_qi``), skipping keys accessed since; when
none is left, the keys accessed since the snapshot, sorted, become the next. A
hit writes the stamp (and, once per snapshot, appends the key to that list), so
a cache whose hot set fits costs about half as much per lookup as the access log
it replaced, and the eviction order is exactly LRU. Stamps instead of access
clocks keep ``emb_last`` int32 and need no second per-entry array (a 32-node
cluster of 1.2M keys: 0.44 GiB of snapshots and residency instead of 1.2 GiB).
KV (one operation per request) keeps a doubly
linked list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from helm_plan.arrays import TraceArrays
from helm_plan.cache import _kernels as K
from helm_plan.cache._emblog import new_meta
from helm_plan.cache.keys import EmbKeys, emb_keys
from helm_plan.errors import ConfigError
from helm_plan.exec import counters
from helm_plan.io import is_spilled, release_spilled, spans
from helm_plan.profiles import ModelProfile

_QUEUE_SLACK = 1024
REPLAYED = counters.counter("replay", "requests")
"""Requests replayed through the caches (every replay goes through :func:`replay`),
under ``"requests"``: divided by a trace's length, how many times it was replayed. Pool
workers' replays are added back into the driver's count (:mod:`helm_plan.exec.counters`).
For tests and benchmarks that count the work a pipeline does; nothing reads it otherwise."""


@dataclass(frozen=True, eq=False)
class Workload:
    """A trace as the cache core replays it under one model: arrays, EMB keys, context rules."""

    arrays: TraceArrays
    """Dense trace arrays."""
    keys: EmbKeys
    """EMB keys of the trace's items under the model's tables."""
    max_seq_len: int
    """Longest context, tokens."""
    kv_slide_chunk: int
    """Tokens the context start moves by past max_seq_len."""

    @classmethod
    def of(cls, arrays: TraceArrays, model: ModelProfile) -> Workload:
        """The workload of ``arrays`` under ``model``."""
        if not 1 <= model.kv_slide_chunk <= model.max_seq_len:
            raise ConfigError(
                f"kv_slide_chunk must be in [1, max_seq_len={model.max_seq_len}], "
                f"got {model.kv_slide_chunk}",
                hint="fix the model profile",
            )
        return cls(
            arrays, emb_keys(arrays.item_ids, model), model.max_seq_len, model.kv_slide_chunk
        )

    @property
    def n_keys(self) -> int:
        return self.keys.n_keys

    @property
    def direct_bytes(self) -> int:
        """Row bytes when keys are the items themselves (one identity table), else 0."""
        return self.keys.direct_bytes


@dataclass
class CacheState:
    """Mutable cache contents of one GPU: EMB keys and per-user KV prefixes."""

    emb_last: np.ndarray
    """Stamp of each key's latest access (its LRU rank), -1 if it is not cached, int32."""
    emb_qi: np.ndarray
    """The eviction snapshot (keys by stamp), then the keys touched since, int32."""
    emb_meta: np.ndarray
    """[snapshot head, next stamp, bytes used, capacity bytes, accesses so far, snapshot end,
    keys touched since], int64 (:mod:`helm_plan.cache._emblog`)."""
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
    key_bytes: np.ndarray = field(repr=False)
    """Bytes of each key (shared, never modified)."""

    @classmethod
    def empty(
        cls, key_bytes: np.ndarray, n_users: int, emb_bytes: int, kv_tokens: int
    ) -> CacheState:
        """Cold caches with the given capacities."""
        _check_caps(emb_bytes, kv_tokens)
        kb = np.ascontiguousarray(key_bytes, np.int64)
        q = log_slots(emb_bytes, kb)
        return cls(
            emb_last=np.full(len(kb), -1, np.int32),
            emb_qi=np.zeros(q, np.int32),
            emb_meta=new_meta(emb_bytes),
            kv_prev=np.full(n_users, -1, np.int32),
            kv_next=np.full(n_users, -1, np.int32),
            kv_len=np.full(n_users, -1, np.int64),
            kv_start=np.zeros(n_users, np.int64),
            kv_meta=np.array([-1, -1, 0, kv_tokens], np.int64),
            key_bytes=kb,
        )

    def copy(self) -> CacheState:
        """A deep copy (for what-if evaluation from the same warm state)."""
        d = {k: v.copy() for k, v in self.__dict__.items() if k != "key_bytes"}
        return CacheState(**d, key_bytes=self.key_bytes)

    @property
    def emb_capacity_bytes(self) -> int:
        return int(self.emb_meta[K.CAP])

    @property
    def kv_capacity_tokens(self) -> int:
        return int(self.kv_meta[K.CAP])

    @property
    def emb_bytes_used(self) -> int:
        return int(self.emb_meta[K.USED])

    @property
    def kv_tokens_used(self) -> int:
        return int(self.kv_meta[K.USED])

    @property
    def emb_resident(self) -> np.ndarray:
        """True where the key is cached (a fresh array)."""
        return self.emb_last >= 0

    def emb_lru_order(self) -> np.ndarray:
        """Resident keys from MRU to LRU (for tests and inspection)."""
        return K.emb_order(self.emb_last, self.emb_qi, self.emb_meta)

    def kv_lru_order(self) -> np.ndarray:
        """Resident user ids from MRU to LRU."""
        n = int((self.kv_len >= 0).sum())
        return K.walk(self.kv_next, int(self.kv_meta[K.HEAD]), n)

    def resize(self, emb_bytes: int, kv_tokens: int) -> tuple[int, int]:
        """Set new capacities; shrinking evicts LRU entries. Returns (keys, users) evicted."""
        _check_caps(emb_bytes, kv_tokens)
        self.emb_meta[K.CAP] = emb_bytes
        self.kv_meta[K.CAP] = kv_tokens
        ev_keys = K.emb_shrink(self.emb_last, self.emb_qi, self.emb_meta, self.key_bytes)
        q = log_slots(emb_bytes, self.key_bytes)
        if q > len(self.emb_qi):  # room for the snapshot and touched keys of a larger cache
            n = int(self.emb_meta[K.QE] + self.emb_meta[K.TL])
            qi = np.zeros(q, np.int32)
            qi[:n] = self.emb_qi[:n]
            self.emb_qi = qi
        ev_users = K.kv_shrink(self.kv_prev, self.kv_next, self.kv_len, self.kv_meta)
        return int(ev_keys), int(ev_users)


def _check_caps(emb_bytes: int, kv_tokens: int) -> None:
    if emb_bytes < 0 or kv_tokens < 0:
        raise ConfigError(
            f"capacities must be >= 0, got emb_bytes={emb_bytes}, kv_tokens={kv_tokens}",
            hint="pass an EMB share in [0, 1] and a positive pool",
        )


@dataclass(frozen=True)
class ReplayResult:
    """Per-request cache outcomes of one replayed span ``[start, stop)`` (int64 arrays)."""

    n_computed: np.ndarray
    """History tokens computed (prefill)."""
    n_reused: np.ndarray
    """History tokens reused from the KV cache."""
    ctx_len: np.ndarray
    """Context length L."""
    n_cand: np.ndarray
    """Candidates scored."""
    lookup_bytes: np.ndarray
    """EMB bytes looked up (computed tokens and candidates, all tables)."""
    miss_bytes: np.ndarray
    """EMB bytes copied host-to-device."""
    n_miss: np.ndarray
    """EMB keys missed."""
    prefetched: int
    """Keys inserted by the refill prefetch during the span."""


def capacities(ratio: float, pool_bytes: int, model: ModelProfile) -> tuple[int, int]:
    """(EMB bytes, KV tokens) for EMB share ``ratio`` of a ``pool_bytes`` pool."""
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"ratio must be in [0, 1], got {ratio}", hint="pass r in [0, 1]")
    emb = int(np.floor(ratio * pool_bytes))
    kv = int(np.floor((1.0 - ratio) * pool_bytes / model.kv_bytes_per_token))
    return emb, kv


def new_state(wl: Workload, ratio: float, pool_bytes: int, model: ModelProfile) -> CacheState:
    """Cold caches for ``wl`` at EMB share ``ratio``."""
    emb, kv = capacities(ratio, pool_bytes, model)
    return CacheState.empty(wl.keys.key_bytes, wl.arrays.n_users, emb, kv)


def log_slots(emb_bytes: int, key_bytes: np.ndarray) -> int:
    """EMB order slots for an ``emb_bytes`` cache: twice the most keys that can be resident."""
    # At most min(keys, bytes / smallest key) keys are resident: a snapshot and the list of
    # keys touched since hold resident keys only.
    if len(key_bytes) == 0:
        return _QUEUE_SLACK
    most = min(len(key_bytes), emb_bytes // max(int(key_bytes.min()), 1))
    return _bounded_log(2 * int(most) + _QUEUE_SLACK)


def _bounded_log(q: int) -> int:
    """``q``, refused when log positions would not fit ``emb_last``'s int32."""
    if q >= 2**31:
        raise ConfigError(
            f"the EMB access log needs {q:,} slots, more than int32 positions address",
            hint="use fewer distinct EMB keys (a coarser key model) or a smaller pool",
        )
    return q


_NO_PF_KEYS = np.zeros(0, np.int32)
_NO_PF_T = np.zeros(0, np.float64)
_NO_COUNTS = np.zeros(0, np.float32)


def require_tokens(wl: Workload) -> None:
    """Refuse a columns-only workload (a SHARDS load's): it has no tokens to replay."""
    if not wl.arrays.holds_tokens:
        raise ConfigError(
            "this workload holds only per-request columns (a SHARDS load): nothing to replay",
            hint="load the trace in full (helm_plan.sim.load_context) to replay it",
        )


def token_ring(a: TraceArrays) -> tuple[np.ndarray, np.ndarray]:
    """A fresh ring of recent tokens for one replay's implicit draws (:func:`K.new_ring`).

    One slot when the trace lists its candidates (nothing is drawn).
    """
    window = 0 if a.explicit_candidates else a.candidate_window_tokens
    return K.new_ring(window, int(a.tok_off[-1]))


def replay(
    wl: Workload,
    state: CacheState,
    start: int = 0,
    stop: int | None = None,
    *,
    prefetch_keys: np.ndarray | None = None,
    prefetch_ready_s: np.ndarray | None = None,
    counts: np.ndarray | None = None,
    ring: tuple[np.ndarray, np.ndarray] | None = None,
) -> ReplayResult:
    """Replay requests ``[start, stop)`` through ``state`` (mutated in place).

    ``prefetch_keys`` (hottest first) are inserted into free EMB bytes once
    the clock passes ``prefetch_ready_s`` (refill modes ``eager`` and
    ``throttled``); they never evict. ``counts`` (float32 per key), if given,
    gains one per EMB lookup (the refill's hotness signal). ``ring``
    (:func:`token_ring`) is the implicit draws' ring to go on from (mutated): a
    caller replaying consecutive spans saves each span's refill of it.
    """
    a = wl.arrays
    require_tokens(wl)
    stop = a.n_requests if stop is None else stop
    if not 0 <= start <= stop <= a.n_requests:
        raise ConfigError(
            f"span [{start}, {stop}) is outside the trace of {a.n_requests} requests",
            hint="pass request indices within the trace",
        )
    pf_k = _NO_PF_KEYS if prefetch_keys is None else np.ascontiguousarray(prefetch_keys, np.int32)
    pf_t = (
        _NO_PF_T if prefetch_ready_s is None else np.ascontiguousarray(prefetch_ready_s, np.float64)
    )
    if len(pf_k) != len(pf_t):
        raise ConfigError(
            "prefetch_keys and prefetch_ready_s must have the same length",
            hint="pass one ready time per prefetched key",
        )
    cnt = _NO_COUNTS if counts is None else counts
    if counts is not None and (counts.dtype != np.float32 or len(counts) != wl.n_keys):
        raise ConfigError(
            f"counts must be float32 with one entry per key ({wl.n_keys})",
            hint="pass np.zeros(workload.n_keys, np.float32)",
        )
    out = np.zeros((K.N_OUT, stop - start), np.int64)
    counters.add({"replay": {"requests": stop - start}})  # locked: forks replay on threads
    k = wl.keys
    ring = token_ring(a) if ring is None else ring  # the spans below carry it on
    pf_done = cur = 0
    for s0, s1 in spans(start, stop, _span_size(a, start, stop)):
        o = out if (s0, s1) == (start, stop) else np.zeros((K.N_OUT, s1 - s0), np.int64)
        pf_done += K.replay(
            a.ts_s, a.user, a.hist_end, a.user_hist_offsets, a.hist_values, a.tok_off, *ring,
            a.cand_offsets, a.cand_values, a.n_cand, a.explicit_candidates,
            a.candidate_seed, a.candidate_window_tokens, s0, s1,
            wl.max_seq_len, wl.kv_slide_chunk, k.item_keys, k.hist_tables, k.cand_tables,
            k.key_bytes, k.table_bytes,
            state.emb_last, state.emb_qi, state.emb_meta,
            state.kv_prev, state.kv_next, state.kv_len, state.kv_start, state.kv_meta,
            pf_k[cur:], pf_t[cur:], cnt, wl.direct_bytes, o,
        )  # fmt: skip
        if o is not out:
            out[:, s0 - start : s1 - start] = o
            # the kernel lands keys in order while they are ready by a request's time: the
            # next span goes on from the first key not ready by this span's last request
            late = np.flatnonzero(pf_t[cur:] > a.ts_s[s1 - 1])
            cur = cur + int(late[0]) if len(late) else len(pf_t)
    return ReplayResult(
        n_computed=out[K.OUT_COMPUTED],
        n_reused=out[K.OUT_REUSED],
        ctx_len=out[K.OUT_CTX],
        n_cand=out[K.OUT_CAND],
        lookup_bytes=out[K.OUT_LOOKUP_B],
        miss_bytes=out[K.OUT_MISS_B],
        n_miss=out[K.OUT_MISS],
        prefetched=int(pf_done),
    )


SPILL_SPAN = 128
"""Requests per kernel call of a replay over spilled tokens, its mapped pages dropped after
each: the kernel maps the cached pages around every page it faults in (Linux's fault-around,
64 KiB), so a request whose context spans three pages maps about 200 KiB of the token file
(128 requests: about 25 MB)."""


def _span_size(a: TraceArrays, start: int, stop: int) -> int:
    """Requests per kernel call: all of ``[start, stop)``, or SPILL_SPAN when the tokens are
    spilled."""
    return SPILL_SPAN if is_spilled(a.hist_values) else stop - start


def kv_pass(wl: Workload, kv_tokens: int) -> ReplayResult:
    """Replay the KV cache alone (EMB capacity 0) from cold: per-request computed tokens."""
    st = CacheState.empty(wl.keys.key_bytes, wl.arrays.n_users, 0, kv_tokens)
    return replay(wl, st)


def lookup_stream(
    wl: Workload,
    n_computed: np.ndarray,
    start: int = 0,
    stop: int | None = None,
    requests: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The EMB key stream of requests ``[start, stop)`` given their computed tokens, or of the
    trace indices ``requests`` (ascending; e.g. one cluster node's requests) when given.

    Returns (keys int32, per-request offsets int64 of len(requests) + 1).
    """
    a, k = wl.arrays, wl.keys
    if requests is None:
        stop = a.n_requests if stop is None else stop
        idx = np.arange(start, stop, dtype=np.int64)
    else:
        idx = np.ascontiguousarray(requests, np.int64)
        if len(idx) and (idx[0] < 0 or idx[-1] >= a.n_requests or np.any(np.diff(idx) <= 0)):
            raise ConfigError(
                "requests must be ascending trace indices within the trace",
                hint="pass the sorted indices of the requests a node served",
            )
    n_computed = np.ascontiguousarray(n_computed, np.int64)
    if len(n_computed) != len(idx):
        raise ConfigError(
            f"n_computed has {len(n_computed)} entries for a span of {len(idx)}",
            hint="pass one computed-token count per request of the span",
        )
    per = K.count_stream(n_computed, a.n_cand, a.tok_off, a.explicit_candidates, idx,
                         k.item_keys, k.hist_tables, k.cand_tables)  # fmt: skip
    offs = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(per, out=offs[1:])
    ids = np.empty(int(offs[-1]), np.int32)
    K.fill_stream(
        a.user, a.hist_end, a.user_hist_offsets, a.hist_values, a.tok_off, *token_ring(a),
        a.cand_offsets, a.cand_values, a.n_cand, a.explicit_candidates,
        a.candidate_seed, a.candidate_window_tokens, idx, n_computed,
        k.item_keys, k.hist_tables, k.cand_tables, offs, ids,
    )  # fmt: skip
    release_spilled()
    return ids, offs
