"""Build a trace's dense arrays from record batches, in two passes, in O(tokens) memory.

The trace's history tokens dominate its size (about 100 per request in a GR
trace), so the build never holds a per-token temporary wider than the int32
outputs: pass 1 reads the per-request columns (which lay out every user's
history) and the set of item ids, and pass 2 maps each batch's tokens and
scatters them straight to their places in the preallocated ``hist_values``
(and ``cand_values``). Sorting 100M int64 tokens instead (``np.unique(return_inverse)``
and a stable argsort by user) peaked at about 60 bytes per token and took
minutes; a request-order copy of the tokens, once kept for the implicit
candidate draws, cost 4 bytes per token more: a replay keeps just the recent
part, read from the histories (:func:`helm_plan.cache._kernels.ring_fill`).

Dense ids are the ranks of the sorted distinct ids, exactly as ``np.unique``
numbers them, and the per-user layout is stable in request order, so the
arrays are identical to the sorting build's.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from helm_plan.errors import TraceError
from helm_plan.io import release_spilled, spill_array

#: Rows per batch of both passes (about 6 MiB of int64 ids at 100 tokens a row). Each batch's
#: ids, their dense copy and the reader's decoded pages are the load's transient: at 1 << 16
#: rows the 1.49M-request trace peaked at 1,148-1,186 MiB, at 1 << 13 at 877-881 (812 MiB
#: held after either), in the same load time (8-10 s); 1 << 11 saved 35 MiB more.
BATCH_ROWS = 1 << 13
#: A direct id -> dense lookup table is used while it costs at most this many bytes
#: (or 4 bytes per distinct item, whichever is larger); sparse (hashed) ids fall back
#: to a binary search of the sorted ids.
LUT_MAX_BYTES = 1 << 26
#: Ids below this are collected as bits (16 MiB at most); a larger or negative id moves
#: the set of distinct ids to hashing.
BITSET_MAX_IDS = 1 << 27
_BITSET_WORDS = BITSET_MAX_IDS // 64

Batches = Callable[[], Iterable[Any]]
"""A factory of record batches (``pa.RecordBatch`` or ``pa.Table``): called once per pass."""


def densify(
    batches: Batches,
    *,
    has_candidates: bool,
    has_latency: bool,
    id_batches: Batches | None = None,
    spill_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The fields of :class:`~helm_plan.arrays.TraceArrays` (less seeds) from ``batches``.

    Pass 1 reads every column of ``batches``; pass 2 reads only the id lists
    (``new_items``, ``candidates``), from ``id_batches`` when given (a file source
    that re-reads just those columns), else from ``batches`` again. With
    ``spill_dir``, ``hist_values`` lives in a file there (:func:`helm_plan.io.spill_array`).
    """
    f = request_columns(batches, has_candidates=has_candidates, has_latency=has_latency)
    release_memory()  # pass 1's batches, before the token arrays are allocated
    tok_off = f["tok_off"]
    to_dense = DenseMap(f["item_ids"])
    n_tok = int(tok_off[-1])
    hist_values = (
        np.empty(n_tok, np.int32) if spill_dir is None else spill_array(n_tok, np.int32, spill_dir)
    )
    cand_offsets = f["cand_offsets"]
    cand_values = np.empty(int(cand_offsets[-1]), np.int32)
    r = c = 0
    for b in (id_batches or batches)():
        col = one_chunk(b.column("new_items"))
        flat = pc.list_flatten(col)
        # pass 1's counts place every token: a source that reads back otherwise (a file
        # rewritten mid-load) must not scatter into the wrong histories
        if r + len(col) > len(tok_off) - 1 or not np.array_equal(
            _np(pc.list_value_length(col)), np.diff(tok_off[r : r + len(col) + 1])
        ):
            raise changed_between_passes("dense build")
        _place(f["user"], f["hist_end"], tok_off, f["user_hist_offsets"], r, len(col),
               to_dense(flat), hist_values)  # fmt: skip
        release_spilled()  # the scatter dirtied pages all over the file: this batch's only
        r += len(col)
        if has_candidates:
            flat = pc.list_flatten(one_chunk(b.column("candidates")))
            cand_values[c : c + len(flat)] = to_dense(flat)
            c += len(flat)
    if r != len(tok_off) - 1 or c != len(cand_values):
        raise changed_between_passes("dense build")
    release_memory()  # pass 2's batches: what the caller allocates next would build on them
    return {**f, "hist_values": hist_values, "cand_values": cand_values}


def changed_between_passes(load: str) -> TraceError:
    """The error of a two-pass ``load`` whose source read back otherwise the second time."""
    # a user condition, not a bug: the file was rewritten (or is still being written)
    return TraceError(
        f"the trace changed between the two passes of the {load}",
        hint="the file was rewritten while it was read; run again once it is complete",
    )


def request_columns(batches: Batches, *, has_candidates: bool, has_latency: bool) -> dict[str, Any]:
    """Pass 1 of :func:`densify`: every field but the token arrays, in one pass.

    ``hist_values`` and ``cand_values`` are left out (their
    offsets are here); ``hist_end`` is the user's running token count. Peak
    memory is the per-request columns and the distinct item ids.
    """
    ts, users, n_new, ncand, lat = [], [], [], [], []
    items, user_set = _DistinctIds(), _DistinctIds()
    for b in batches():
        ts.append(_np(b.column("ts_s")).astype(np.float64, copy=False))
        u = one_chunk(b.column("user_id"))
        users.append(_np(u).astype(np.int64, copy=False))
        user_set.add(u)
        ni = one_chunk(b.column("new_items"))
        n_new.append(_np(pc.list_value_length(ni)).astype(np.int32))
        items.add(pc.list_flatten(ni))
        ncand.append(_np(b.column("n_candidates")).astype(np.int64))
        if has_candidates:
            items.add(pc.list_flatten(one_chunk(b.column("candidates"))))
        if has_latency:
            lat.append(_np(b.column("latency_ms")).astype(np.float64, copy=False))
    # each column's parts go as soon as it is joined, and the users are ranked through the
    # set of distinct ids (no sort of the per-request ids): at 10M requests the sort and the
    # parts held beside their joins were the load's peak
    ts_s = cat_parts(ts, np.float64, free=True)
    n = len(ts_s)
    user_ids = user_set.sorted()
    user = np.empty(n, np.int32)
    to_user, at = DenseMap(user_ids), 0
    for part in users:
        user[at : at + len(part)] = to_user(part)
        at += len(part)
    users.clear()
    new = cat_parts(n_new, np.int32, free=True)
    n_cand = cat_parts(ncand, np.int64, free=True)
    tok_off = np.zeros(n + 1, np.int64)
    np.cumsum(new, out=tok_off[1:])
    if has_candidates:
        cand_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(n_cand, out=cand_offsets[1:])
    else:
        cand_offsets = np.zeros(1, np.int64)
    item_ids = items.sorted()
    n_users = len(user_ids)
    hist_end, per_user = running_tokens(user, new, n_users)
    user_hist_offsets = np.zeros(n_users + 1, np.int64)
    np.cumsum(per_user, out=user_hist_offsets[1:])
    return {
        "ts_s": ts_s,
        "user": user,
        "n_new": new,
        "hist_end": hist_end,
        "user_hist_offsets": user_hist_offsets,
        "tok_off": tok_off,
        "n_cand": n_cand,
        "explicit_candidates": has_candidates,
        "cand_offsets": cand_offsets,
        "n_users": n_users,
        "n_items": len(item_ids),
        "user_ids": user_ids,
        "item_ids": item_ids,
        "latency_ms": cat_parts(lat, np.float64, free=True) if has_latency else None,
    }


def release_memory() -> None:
    """Hand freed memory back to the OS: Arrow's pool, then the C heap (glibc's ``malloc_trim``).

    A load's pass frees thousands of batch-sized buffers that both allocators keep
    for reuse; the next pass's peak then builds on them. Called between passes and
    stages (with :class:`_DistinctIds`' bitset), it took the SHARDS curves of a
    1.49M-request trace from a 705 to a 538 MiB peak (``bench_analyze.py --shards-only``).
    """
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    # glibc only (musl and macOS have no malloc_trim); looked up once, on first use
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def table_batches(table: pa.Table, rows: int = BATCH_ROWS) -> Batches:
    """A batch factory over an in-memory table (zero-copy slices)."""

    def gen() -> Iterator[pa.RecordBatch]:
        return iter(table.to_batches(max_chunksize=rows))

    return gen


class _DistinctIds:
    """The sorted distinct ids of a stream of int arrays.

    Ids in ``[0, BITSET_MAX_IDS)`` (dense or mildly sparse ids) set bits
    of a bitset grown by doubling: one compiled pass per batch and one bit per id, so
    the set costs at most 16 MiB and no transient. The first id outside that range
    (hashed ids) moves the set to Arrow's hash ``unique``, merged in amortised batches
    with one sort at the end: numpy 2's ``np.unique`` of 10^7 ids costs seconds per
    merge. The hash merges held about 100 MiB of tables and copies at 1M distinct
    items, the largest transient of a SHARDS load's first pass.
    """

    def __init__(self) -> None:
        self._bits: np.ndarray | None = np.zeros(0, np.uint64)
        self._acc = np.zeros(0, np.int64)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0

    def add(self, values: pa.Array) -> None:
        if not len(values):
            return
        if self._bits is not None:
            v = _np(values)
            lo, hi = int(v.min()), int(v.max())
            if lo >= 0 and hi < BITSET_MAX_IDS:
                words = (hi >> 6) + 1
                if words > len(self._bits):  # double, so regrowth costs O(final size)
                    grown = np.zeros(min(max(words, 2 * len(self._bits)), _BITSET_WORDS), np.uint64)
                    grown[: len(self._bits)] = self._bits
                    self._bits = grown
                _set_bits(self._bits, v)
                return
            # hashed ids: the bitset's ids become the hash path's first part
            self._pending.append(_bit_ids(self._bits))
            self._pending_n += len(self._pending[-1])
            self._bits = None
        u = _np(pc.unique(values)).astype(np.int64, copy=False)
        self._pending.append(u)
        self._pending_n += len(u)
        # merge once the pending ids outgrow the merged set: total work stays linear
        if self._pending_n > max(len(self._acc), 1 << 20):
            self._merge()

    def _merge(self) -> None:
        both = np.concatenate([self._acc, *self._pending])
        self._acc = _np(pc.unique(pa.array(both))).astype(np.int64, copy=False)
        self._pending, self._pending_n = [], 0

    def sorted(self) -> np.ndarray:
        if self._bits is not None:
            return _bit_ids(self._bits)
        self._merge()
        return np.sort(self._acc)


@nb.njit(cache=True)
def _set_bits(bits: np.ndarray, ids: np.ndarray) -> None:
    for x in ids:
        bits[x >> 6] |= np.uint64(1) << np.uint64(x & 63)


def _bit_ids(bits: np.ndarray) -> np.ndarray:
    """The set bits' indices, ascending."""
    out = np.empty(int(np.bitwise_count(bits).sum()), np.int64)
    _fill_bit_ids(bits, out)
    return out


@nb.njit(cache=True)
def _fill_bit_ids(bits: np.ndarray, out: np.ndarray) -> None:
    # word by word, low bit first
    k = 0
    for i in range(bits.shape[0]):
        w = bits[i]
        b = 0
        while w:
            if w & np.uint64(1):
                out[k] = i * 64 + b
                k += 1
            w >>= np.uint64(1)
            b += 1


class DenseMap:
    """Maps original ids (all present in ``item_ids``) to their rank, as int32."""

    def __init__(self, item_ids: np.ndarray) -> None:
        self._ids = item_ids
        self._lut = None
        top = int(item_ids[-1]) + 1 if len(item_ids) else 0
        if top * 4 <= max(LUT_MAX_BYTES, 4 * len(item_ids)):
            self._lut = np.empty(top, np.int32)
            self._lut[item_ids] = np.arange(len(item_ids), dtype=np.int32)

    def __call__(self, values: pa.Array | np.ndarray) -> np.ndarray:
        v = (values if isinstance(values, np.ndarray) else _np(values)).astype(np.int64, copy=False)
        if self._lut is not None:
            return self._lut[v]
        return np.searchsorted(self._ids, v).astype(np.int32)


@nb.njit(cache=True)
def running_tokens(user: np.ndarray, n_new: np.ndarray, n_users: int):  # noqa: ANN202
    """``hist_end`` without the tokens (each user's history length after each request), and
    each user's total, which lays the histories out (the dense build and ``plan.dense``)."""
    seen = np.zeros(n_users, np.int64)
    out = np.empty(len(user), np.int64)
    for i in range(len(user)):
        seen[user[i]] += n_new[i]
        out[i] = seen[user[i]]
    return out, seen


@nb.njit(cache=True)
def first_requests(user: np.ndarray, n_users: int) -> np.ndarray:
    """True at each user's first request (``np.unique(user, return_index=True)`` without the
    sort of every request)."""
    seen = np.zeros(n_users, np.bool_)
    out = np.zeros(len(user), np.bool_)
    for i in range(len(user)):
        if not seen[user[i]]:
            seen[user[i]] = True
            out[i] = True
    return out


@nb.njit(cache=True)
def _place(user, hist_end, tok_off, user_hist_offsets, r0, rows, tokens, hist_values):  # noqa: ANN001
    # Requests r0.. of one batch: request i's new tokens are the last ones of its user's
    # history after it, so they land at the user's offset + hist_end[i] - n_new[i]
    # (a counting sort by user, stable in request order, done batch by batch).
    t0 = tok_off[r0]
    for i in range(r0, r0 + rows):
        a, b = tok_off[i], tok_off[i + 1]
        dst = user_hist_offsets[user[i]] + hist_end[i] - (b - a)
        for k in range(a, b):
            hist_values[dst + k - a] = tokens[k - t0]


def one_chunk(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one Arrow array."""
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _np(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return col.to_numpy(zero_copy_only=False) if isinstance(col, pa.Array) else col.to_numpy()


def cat_parts(parts: list[np.ndarray], dtype: type, *, free: bool = False) -> np.ndarray:
    """Per-batch arrays as one array of ``dtype`` (empty when there are none); ``free`` empties
    ``parts`` (the caller's list) once they are joined."""
    out = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
    if free:
        parts.clear()
    return out
