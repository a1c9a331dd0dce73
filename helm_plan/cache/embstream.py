"""The EMB lookup stream behind a curve, generated chunk by chunk and consumed as it is made.

A compiled generator walks the requests with the KV cache alone at a fixed
capacity (the rules of ``core.replay``, through the same ``_kernels``
functions: ``context``, ``kv_admit``, ``kv_access``, ``draw_candidate``) and
writes each request's EMB keys (its computed history tokens, then its
candidates, table by table, as ``core.lookup_stream`` orders them) into a
bounded buffer; when the buffer is full, the consumers (stack-distance
passes, a stream writer) take the chunk and the generator resumes. Nothing
proportional to the stream is ever held.

Under SHARDS the generator emits only the sampled keys (hash below the
starting threshold), so the consumers, the buffer and the work after
generation all scale with the sample; the exact counts SHARDS needs (bytes
looked up, first-access bytes) are tallied by the generator per window and
table, first accesses with one bit per key. When a sink (``--stream-out``)
needs the whole stream, the generator emits everything and the SHARDS pass
filters the sample itself: still one pass, and no second KV replay.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from helm_plan import io
from helm_plan.cache import _kernels as K
from helm_plan.cache.core import CacheState, Workload, capacities, require_tokens, token_ring
from helm_plan.cache.keys import table_rows
from helm_plan.cache.sampled import SampledWorkload, check_pass, generate
from helm_plan.cache.shards import SHARDS_MODULUS, ShardsPass, key_hash, seed_mix, threshold
from helm_plan.cache.stack import StackPass, check_grid, size_classes, window_of_requests
from helm_plan.errors import ConfigError
from helm_plan.pool import Pool
from helm_plan.profiles import ModelProfile

Sink = Callable[[int, np.ndarray, np.ndarray, np.ndarray], None]
"""Called with (first request, per-request offsets, keys, key bytes) per chunk of the full stream."""

CHUNK_KEYS = 1 << 20
"""Keys per chunk of a full stream (4 MiB of int32)."""
CHUNK_KEYS_SAMPLED = 1 << 16
"""Keys per chunk of a sampled stream."""
CHUNK_REQUESTS = 1 << 15
"""Requests per chunk at most."""


@dataclass(frozen=True)
class Sampling:
    """SHARDS settings of an EMB pass."""

    rate: float = 1.0
    """Starting sampling rate R."""
    size: int | None = None
    """Fixed-size SHARDS: at most this many distinct sampled keys."""
    seed: int = 0
    """Seed of the key hash."""
    adjust: bool = True
    """Apply SHARDS_adj."""


@dataclass(frozen=True)
class EmbHits:
    """EMB hit bytes of one lookup stream at every capacity, per window."""

    hit_bytes: np.ndarray
    """Hit bytes, float64 [n_windows, len(grid)] (exact integers unless sampled)."""
    lookup_bytes: np.ndarray
    """Bytes looked up per window, int64."""
    lookups: np.ndarray
    """Keys looked up per window, int64."""
    exact: bool
    """False for SHARDS estimates."""


def _kv_only(wl: Workload, kv_tokens: int) -> CacheState:
    # The KV half of a cold CacheState; no key arrays (EMB capacity 0 is never replayed here).
    return CacheState.empty(np.zeros(0, np.int64), wl.arrays.n_users, 0, int(kv_tokens))


def request_bound(wl: Workload) -> int:
    """Most keys one request can look up (its whole context plus every candidate)."""
    k, a = wl.keys, wl.arrays
    n_c = int(a.n_cand.max()) if a.n_requests else 0
    return wl.max_seq_len * int(k.hist_tables.sum()) + n_c * int(k.cand_tables.sum())


def emb_hits(
    data: Workload | SampledWorkload,
    kv_tokens: int,
    grid_bytes: np.ndarray,
    edges: np.ndarray | None,
    *,
    sampling: Sampling | None = None,
    sink: Sink | None = None,
    chunk_keys: int | None = None,
) -> EmbHits:
    """EMB hit bytes at each capacity of sorted ``grid_bytes`` with KV fixed at ``kv_tokens``.

    Exact (one byte-weighted stack pass per key-size class holding a
    capacity, :mod:`helm_plan.cache.stack`) or SHARDS with ``sampling``.
    ``edges`` are the window bounds in requests (None: one window). ``sink`` receives every
    chunk of the full stream, in order. A :class:`SampledWorkload` (the tokens a SHARDS pass
    can read, :mod:`helm_plan.cache.sampled`) gives the same result as its full trace, for a
    ``sampling`` at or below its rate and with its seed, and no sink.
    """
    sw = data if isinstance(data, SampledWorkload) else None
    wl = data.workload if isinstance(data, SampledWorkload) else data
    if sw is None:
        require_tokens(wl)
    a, keys = wl.arrays, wl.keys
    grid = check_grid(grid_bytes)
    edges = window_of_requests(edges, a.n_requests)
    n_win, n_tab = len(edges) - 1, keys.item_keys.shape[1]
    tab_bytes = np.zeros(n_tab, np.int64)
    for t in range(n_tab):  # a table's row bytes, from any of its keys
        col = keys.item_keys[:, t]
        tab_bytes[t] = keys.key_bytes[col[0]] if len(col) else 1
    used = (keys.hist_tables | keys.cand_tables).astype(bool)
    classes = size_classes(tab_bytes[used], grid)
    kb = keys.key_bytes
    sampled = sampling is not None and (sampling.rate < 1.0 or sampling.size is not None)
    if sampled:
        assert sampling is not None
        passes: list[StackPass | ShardsPass] = [
            ShardsPass(kb, mb, grid[idx], n_win, sample_rate=sampling.rate,
                       sample_size=sampling.size, seed=sampling.seed)
            for mb, idx in classes
        ]  # fmt: skip
        mix = seed_mix(sampling.seed)
        # Emit only keys that can be sampled (T only falls), unless a sink wants them all.
        thr = SHARDS_MODULUS if sink is not None else threshold(sampling.rate)
        seen = np.zeros((keys.n_keys + 63) // 64 if sw is None else 0, np.uint64)
    else:
        passes = [StackPass(kb, mb, grid[idx], n_win) for mb, idx in classes]
        mix, thr, seen = np.uint64(0), SHARDS_MODULUS, np.zeros(0, np.uint64)
    bound = request_bound(wl)
    # smaller chunks of spilled tokens too: each chunk's mapped pages are dropped after it
    small = thr < SHARDS_MODULUS or io.is_spilled(a.hist_values)
    size = chunk_keys or (CHUNK_KEYS_SAMPLED if small else CHUNK_KEYS)
    ids = np.empty(max(size, bound, 1), np.int32)
    sizes = np.empty(len(ids), np.int32)  # bytes beside each key: passes read them in order
    offs = np.zeros(CHUNK_REQUESTS + 1, np.int64)
    look_n = np.zeros((n_win, n_tab), np.int64)
    cold_b = np.zeros((n_win, n_tab), np.int64)
    kv = _kv_only(wl, kv_tokens)
    state = np.zeros(2, np.int64)  # [next request, its window]
    kv_args = (kv.kv_prev, kv.kv_next, kv.kv_len, kv.kv_start, kv.kv_meta)
    if sw is None:
        tok_ring = token_ring(a)  # the chunks run in order: the ring carries across them

        def step() -> tuple[int, int, int]:
            return _generate(
                a.user, a.hist_end, a.user_hist_offsets, a.hist_values, a.tok_off, *tok_ring,
                a.cand_offsets, a.cand_values, a.n_cand, a.explicit_candidates,
                a.candidate_seed, a.candidate_window_tokens, wl.max_seq_len, wl.kv_slide_chunk,
                keys.item_keys, keys.hist_tables, keys.cand_tables, tab_bytes, *kv_args,
                thr, mix, seen, edges, state, bound, ids, sizes, offs, look_n, cold_b,
            )  # fmt: skip
    else:
        if not sampled or sink is not None:
            raise ConfigError(
                "a SHARDS load holds only the sampled tokens",
                hint="load the trace in full for an exact pass or a stream sink",
            )
        assert sampling is not None
        smp = sw.sample
        check_pass(smp, thr, sampling.seed)
        cold_b = smp.first_bytes(keys.key_table, tab_bytes, edges)

        def step() -> tuple[int, int, int]:
            return generate(
                a.user, a.hist_end, a.tok_off, a.n_cand, a.explicit_candidates, a.candidate_seed,
                a.candidate_window_tokens, wl.max_seq_len, wl.kv_slide_chunk,
                keys.item_keys, keys.hist_tables, keys.cand_tables, tab_bytes, *kv_args,
                smp.hist_offsets, smp.hist_positions, smp.hist_items, smp.cand_offsets,
                smp.cand_values, smp.draw_bits, smp.draw_rank, smp.draw_items,
                thr, mix, edges, state, bound, ids, sizes, offs, look_n,
            )  # fmt: skip

    while state[0] < a.n_requests:
        r0, n_req, n_ids = step()
        io.release_spilled()  # a chunk's pages of spilled tokens (its keys are in ids)
        o, c, z = offs[: n_req + 1], ids[:n_ids], sizes[:n_ids]
        if sink is not None:
            sink(int(r0), o.copy(), c.copy(), z.copy())
        for p in passes:
            p.feed(c, z, o, int(r0), edges)
    look_b = look_n * tab_bytes
    hits = np.zeros((n_win, len(grid)), np.float64)
    for p, (mb, idx) in zip(passes, classes, strict=True):
        if isinstance(p, ShardsPass):
            assert sampling is not None
            in_cls = tab_bytes <= mb
            lk = look_b[:, in_cls].sum(axis=1)
            hits[:, idx] = p.hit_bytes(lk, lk - cold_b[:, in_cls].sum(axis=1), sampling.adjust)
        else:
            hits[:, idx] = p.hit_bytes()
    return EmbHits(hits, look_b.sum(axis=1), look_n.sum(axis=1), not sampled)


# ---------------------------------------------------------------- the exported stream


def stream_schema(row_type: pa.DataType = pa.int64()) -> pa.Schema:
    """Columns of an exported EMB stream: one row per key looked up, in lookup order.

    ``row`` is int32 when every row id of the trace fits (half the bytes to
    encode and write), else int64.
    """
    return pa.schema(
        [("request", pa.int64()), ("table", pa.int16()), ("row", row_type), ("bytes", pa.int32())]
    )


class _Columns:
    """Turns chunks of dense keys into :func:`stream_schema` columns."""

    def __init__(self, wl: Workload, model: ModelProfile):
        k = wl.keys
        rows = table_rows(wl.arrays.item_ids, model)
        self.key_row = np.zeros(k.n_keys, np.int64)
        for t, tab in enumerate(model.tables):
            # identity rows are the trace's own item ids; hash rows are the hashed row
            self.key_row[k.item_keys[:, t]] = (
                wl.arrays.item_ids if tab.key == "identity" else rows[:, t]
            )
        i32 = np.iinfo(np.int32)
        if len(self.key_row) == 0 or i32.min <= self.key_row.min() <= self.key_row.max() <= i32.max:
            self.key_row = self.key_row.astype(np.int32)
        self.schema = stream_schema(pa.from_numpy_dtype(self.key_row.dtype))
        self.key_table = k.key_table.astype(np.int16)

    def table(self, r0: int, offs: np.ndarray, ids: np.ndarray, sizes: np.ndarray) -> pa.Table:
        req = np.empty(len(ids), np.int64)
        tab = np.empty(len(ids), np.int16)
        row = np.empty(len(ids), self.key_row.dtype)
        _fill_columns(r0, offs, ids, self.key_table, self.key_row, req, tab, row)
        return pa.table([req, tab, row, sizes], schema=self.schema)


def stream_metadata(wl: Workload, model: ModelProfile, kv_tokens: int) -> dict[str, object]:
    """What a reader needs to replay an exported stream: tables and the fixed KV capacity."""
    return {
        "tables": [{"name": t.name, "row_bytes": t.row_bytes, "key": t.key} for t in model.tables],
        "kv_tokens": int(kv_tokens),
        "kv_slide_chunk": wl.kv_slide_chunk,
        "max_seq_len": wl.max_seq_len,
    }


def emb_stream(wl: Workload, model: ModelProfile, pool: Pool, ratio: float) -> pa.Table:
    """The whole EMB stream behind the ``emb`` curve at ``ratio``, in memory (small traces, tests).

    Replaying ``(table, row)`` keys of ``bytes`` through any byte-capacity LRU
    gives the curve's hit rate by bytes.
    """
    cols = _Columns(wl, model)
    parts: list[pa.Table] = []
    kv_tokens = capacities(ratio, int(pool.pool_bytes), model)[1]
    emb_hits(wl, kv_tokens, np.zeros(0, np.int64), None,
             sink=lambda *chunk: parts.append(cols.table(*chunk)))  # fmt: skip
    return pa.concat_tables(parts) if parts else cols.schema.empty_table()


class StreamWriter:
    """A sink for :func:`emb_hits` that writes the stream to parquet while the pass runs.

    A background thread encodes and writes each chunk (numba kernels and
    pyarrow both release the GIL, so the two overlap); at most ``depth``
    chunks wait in between, so memory stays bounded. The file appears
    atomically when the ``with`` block exits cleanly.
    """

    def __init__(
        self, path: str | Path, wl: Workload, model: ModelProfile, metadata: dict[str, str],
        *, depth: int = 4,
    ):  # fmt: skip
        self.path = Path(path)
        self._cols = _Columns(wl, model)
        self._meta = {k.encode(): v.encode() for k, v in metadata.items()}
        self._q: queue.Queue[tuple[np.ndarray, ...] | None] = queue.Queue(depth)
        self._error: BaseException | None = None
        self._stack = contextlib.ExitStack()
        self._thread = threading.Thread(target=self._run, name="stream-out", daemon=True)

    def __enter__(self) -> StreamWriter:
        tmp = self._stack.enter_context(io.atomic_path(self.path, suffix=".parquet.tmp"))
        # Dictionary pages only where values repeat; the sorted request column delta-packs to
        # almost nothing. Uncompressed: lz4/zstd halve the file but cost more than the curve pass.
        self._writer = pq.ParquetWriter(
            tmp, self._cols.schema.with_metadata(self._meta), compression="none",
            use_dictionary=["table", "bytes"], write_statistics=["request"],
            column_encoding={"request": "DELTA_BINARY_PACKED", "row": "PLAIN"},
        )  # fmt: skip
        self._stack.callback(self._writer.close)
        self._thread.start()
        return self

    def __call__(self, r0: int, offs: np.ndarray, ids: np.ndarray, sizes: np.ndarray) -> None:
        if self._error is not None:
            raise self._error
        self._q.put((r0, offs, ids, sizes))

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            if self._error is None:  # after a failure, only drain so the producer never blocks
                try:
                    self._writer.write_table(self._cols.table(*item))
                except BaseException as e:  # noqa: BLE001 -- re-raised in the main thread
                    self._error = e

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._q.put(None)
        self._thread.join()
        if ev is None and self._error is not None:
            ev = self._error
            et, tb = type(ev), ev.__traceback__
        if ev is not None:
            self._stack.__exit__(et, ev, tb)  # removes the temporary file
            raise ev
        self._stack.close()


def write_stream_meta(provenance: dict[str, str], extra: dict[str, object]) -> dict[str, str]:
    """File metadata of an exported stream."""
    return {
        "helm_plan.provenance": json.dumps(provenance, sort_keys=True),
        "helm_plan.stream": json.dumps(extra, sort_keys=True),
    }


# ---------------------------------------------------------------- compiled kernels


@nb.njit(cache=True, nogil=True)
def _fill_columns(r0, offs, ids, key_table, key_row, req, tab, row):
    """One pass over a chunk for the writer thread (numpy's repeat and gathers hold the GIL)."""
    for j in range(offs.shape[0] - 1):
        for t in range(offs[j], offs[j + 1]):
            x = ids[t]
            req[t] = r0 + j
            tab[t] = key_table[x]
            row[t] = key_row[x]


@nb.njit(cache=True, nogil=True)
def _generate(
    user, hist_end, uoff, hist, tok_off, tok_ring, tok_top, coff, cvals, ncand, explicit, seed, window,
    max_seq_len, chunk, item_keys, hist_tab, cand_tab, tab_bytes,
    k_prev, k_next, k_len, k_start, k_meta,
    thr, mix, seen, edges, state, bound, ids, sizes, offs, look_n, cold_b,
):  # fmt: skip
    """Fill ``ids``/``offs`` with the keys of requests ``state[0]..``; returns (r0, requests, keys)."""
    n_req = user.shape[0]
    n_tab = item_keys.shape[1]
    count_cold = seen.shape[0] > 0
    filt = thr < SHARDS_MODULUS
    cap_req = offs.shape[0] - 1
    cap_ids = ids.shape[0]
    i = state[0]
    if i >= n_req:  # a caller that does not stop at the end would loop forever
        raise ValueError("no requests left to generate")
    w = state[1]
    r0 = i
    o = 0
    j = 0
    offs[0] = 0
    while i < n_req and j < cap_req and o + bound <= cap_ids:
        w, u, full, n, m_c = K.stream_head(
            i, w, edges, user, hist_end, tok_off, ncand, explicit, max_seq_len, chunk,
            hist_tab, cand_tab, k_prev, k_next, k_len, k_start, k_meta, look_n,
        )  # fmt: skip
        if not explicit and m_c > 0:
            K.ring_fill(i, tok_ring, tok_top, tok_off, user, hist_end, uoff, hist)
        base = uoff[u] + full
        for x in range(n + m_c):
            if x < n:
                item = hist[base - n + x]
            elif explicit:
                item = cvals[coff[i] + x - n]
                if item < 0:  # a routed node's copy of a draw made before any token
                    continue
            else:
                item = K.draw_candidate(seed, i, x - n, tok_off, tok_ring, window)
            for t in range(n_tab):
                if (hist_tab[t] if x < n else cand_tab[t]) == 0:
                    continue
                key = item_keys[item, t]
                if count_cold:
                    word = key >> 6
                    if word >= seen.shape[0]:  # a mis-sized bitset is an error, not an overrun
                        raise IndexError("first-access bitset smaller than the key space")
                    bit = np.uint64(1) << np.uint64(key & 63)
                    if seen[word] & bit == 0:
                        seen[word] |= bit
                        cold_b[w, t] += tab_bytes[t]
                if filt and key_hash(key, mix) >= thr:
                    continue
                if o >= cap_ids:  # request_bound too small: refuse rather than write past
                    raise IndexError("key buffer smaller than one request's lookups")
                ids[o] = key
                sizes[o] = tab_bytes[t]
                o += 1
        j += 1
        offs[j] = o
        i += 1
    if j == 0:  # no request fitted (one was left, checked above): the caller would loop forever
        raise ValueError("key buffer smaller than one request's lookups")
    state[0] = i
    state[1] = w
    return r0, j, o
