"""A trace held for one SHARDS pass: the per-request columns, and only the tokens it can sample.

SHARDS keeps a key iff ``hash(key) < T`` (:mod:`helm_plan.cache.shards`), and
the EMB pass of a sampled curve emits only those keys
(:mod:`helm_plan.cache.embstream`). A history token whose item reaches no
sampled key is never looked at by the pass, yet the full dense build holds
every token (4 bytes each: about 0.5 GiB per 130M tokens; twice that when it
also kept them in request order), so a 1 % curve used as much memory as the
exact one. :func:`load` streams the trace twice and keeps what the pass can
read:

1. the per-request columns and the distinct items
   (:func:`helm_plan._densify.request_columns`), so the EMB keys are numbered
   exactly as the full build numbers them;
2. per batch of tokens (in request order):
   - history tokens with a sampled key in a history table, per user with
     their position in the user's history;
   - explicit candidates with a sampled key in a candidate table, per request;
   - for implicit candidates, one bit per stream token (set when its item has
     a sampled candidate key) and the set tokens' items in stream order, so a
     draw (:func:`helm_plan.cache._kernels.draw_position`) that lands on a set
     bit finds its item by the word's rank plus a popcount;
   - each key's first lookup (its request), which SHARDS_adj needs exactly.

**Why first lookups need no KV replay.** A token is computed, at the latest,
by the request that adds it, if it is inside that request's context (position
>= the context start ``s0``): a KV cache never holds a token before it exists.
If it is outside (``s0`` passed it), it is outside every later context too,
since ``s0`` only grows with the history. Later recomputations come after the
first. So a key's first lookup is the first request that adds one of its items
inside the context, lists it, or draws it, whatever the KV capacity. Pass 2
replays those events (drawing from a ring of the last ``window`` tokens), and
the tests check the sampled pass against the pass over the full arrays, bit
for bit.

Memory is the per-request columns (about 50 bytes a request), the keys, one
bit per token when candidates are drawn, and the sample, instead of 4 bytes
per token.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from helm_plan import arrays as A
from helm_plan._densify import (
    DenseMap,
    cat_parts,
    changed_between_passes,
    one_chunk,
    release_memory,
    request_columns,
    table_batches,
)
from helm_plan.cache import _kernels as K
from helm_plan.cache.core import Workload
from helm_plan.cache.shards import SHARDS_MODULUS, key_hash, seed_mix, threshold
from helm_plan.config import require_range
from helm_plan.errors import ConfigError
from helm_plan.profiles import ModelProfile

BATCH_ROWS = 1 << 13
"""Rows per batch of the token pass: its Arrow buffers are the load's largest transient."""


@dataclass(frozen=True, eq=False)
class TokenSample:
    """The tokens a SHARDS pass at threshold ``threshold`` can emit, and every key's first lookup."""

    threshold: int
    """T the tokens were kept under: a pass may use any T' <= T with the same seed."""
    seed: int
    """Seed of the SHARDS key hash."""
    hist_offsets: np.ndarray
    """Start of each user's kept history tokens (n_users + 1), int64."""
    hist_positions: np.ndarray
    """Position of each kept history token in its user's history, ascending per user (int32
    while histories fit, else int64)."""
    hist_items: np.ndarray
    """Dense item of each kept history token, int32."""
    cand_offsets: np.ndarray
    """Start of each request's kept explicit candidates (n + 1), int64; [0] when drawn."""
    cand_values: np.ndarray
    """Dense items of the kept explicit candidates, in request order, int32."""
    draw_bits: np.ndarray
    """One bit per stream token, set when its item has a sampled candidate key, uint64."""
    draw_rank: np.ndarray
    """Set bits before each word of ``draw_bits``: a set bit's index in ``draw_items`` (int32
    while the stream's tokens fit, else int64)."""
    draw_items: np.ndarray
    """Dense item of each set bit, in stream order, int32."""
    first_request: np.ndarray
    """Request of each key's first lookup, -1 for none (n_keys; int32 while the requests fit,
    else int64)."""

    def first_bytes(
        self, keys_table: np.ndarray, table_bytes: np.ndarray, edges: np.ndarray
    ) -> np.ndarray:
        """Bytes of keys first looked up per (window, table), int64 [n_windows, n_tables]."""
        n_win, n_tables = len(edges) - 1, len(table_bytes)
        hit = np.flatnonzero(self.first_request >= 0)
        w = np.searchsorted(edges, self.first_request[hit], side="right") - 1
        t = keys_table[hit].astype(np.int64)
        counts = np.bincount(w * n_tables + t, minlength=n_win * n_tables)
        return counts.reshape(n_win, n_tables) * table_bytes[None, :]


@dataclass(frozen=True, eq=False)
class SampledWorkload:
    """A trace loaded for one SHARDS EMB pass (:func:`load`)."""

    workload: Workload
    """Per-request columns and keys; its token arrays are empty, so it cannot be replayed."""
    sample: TokenSample
    """The tokens the pass can emit."""


def load(
    trace: str | os.PathLike[str] | pa.Table,
    model: ModelProfile,
    *,
    sample_rate: float,
    seed: int = 0,
    candidate_seed: int = 0,
    candidate_window_tokens: int = 100_000,
    batch_rows: int = BATCH_ROWS,
) -> SampledWorkload:
    """Stream ``trace`` into the columns and tokens a SHARDS pass at ``sample_rate`` reads.

    ``seed`` is the SHARDS hash's; ``candidate_seed`` and
    ``candidate_window_tokens`` are the implicit draws' (as in
    :func:`helm_plan.arrays.from_file`).
    """
    require_range("sample_rate", sample_rate, 1.0 / SHARDS_MODULUS, 1.0)
    A.check_window(candidate_window_tokens)
    if isinstance(trace, pa.Table):
        names, checked, id_lists = trace.column_names, table_batches(trace, batch_rows), None
    else:
        names, checked, id_lists = A.file_batches(trace, batch_rows)
    explicit = "candidates" in names
    f = request_columns(checked, has_candidates=explicit, has_latency="latency_ms" in names)
    release_memory()  # pass 1's batches: pass 2's peak would build on them
    empty = np.zeros(0, np.int32)
    arrays = A.TraceArrays(
        **f, hist_values=empty, cand_values=empty,
        candidate_seed=int(candidate_seed), candidate_window_tokens=int(candidate_window_tokens),
    )  # fmt: skip
    wl = Workload.of(arrays, model)
    sample = _scan(arrays, wl, id_lists or checked, threshold(sample_rate), int(seed))
    release_memory()  # the implicit draws' and candidates' parts, freed as _scan returned
    return SampledWorkload(wl, sample)


def _scan(a: A.TraceArrays, wl: Workload, batches: A.Batches, thr: int, seed: int) -> TokenSample:
    """Pass 2: keep the sampled tokens and candidates, and find every key's first lookup."""
    k = wl.keys
    mix = seed_mix(seed)
    hist_keep, cand_keep = _item_flags(k.item_keys, k.hist_tables, k.cand_tables, mix, thr)
    to_dense = DenseMap(a.item_ids)
    n_tok = int(a.tok_off[-1])
    explicit = a.explicit_candidates
    ring = np.zeros(max(1, min(a.candidate_window_tokens, n_tok)), np.int32)
    first = np.full(k.n_keys, -1, position_dtype(a.n_requests))
    seen = np.zeros((k.n_keys + 63) // 64, np.uint64)
    bits = np.zeros(0 if explicit else (n_tok + 63) // 64, np.uint64)
    pos_t = position_dtype(int(a.hist_end.max(initial=0)))
    h_user, h_pos, h_item, d_item, c_item = [], [], [], [], []
    c_count = np.zeros(a.n_requests if explicit else 0, np.int64)  # written for listed ones only
    i0 = 0
    empty = np.zeros(0, np.int32)
    for b in batches():
        toks = to_dense(pc.list_flatten(one_chunk(b.column("new_items"))))
        cands = to_dense(pc.list_flatten(one_chunk(b.column("candidates")))) if explicit else empty
        n_b = b.num_rows
        hu = np.empty(len(toks), np.int32)
        hp = np.empty(len(toks), pos_t)
        hi = np.empty(len(toks), np.int32)
        dit = np.empty(0 if explicit else len(toks), np.int32)
        ci = np.empty(len(cands), np.int32)
        got = np.zeros(3, np.int64)
        _scan_batch(
            i0, i0 + n_b, toks, cands, a.user, a.hist_end, a.n_new, a.tok_off, a.cand_offsets,
            a.n_cand, explicit, a.candidate_seed, a.candidate_window_tokens, wl.max_seq_len,
            wl.kv_slide_chunk, k.item_keys, k.hist_tables, k.cand_tables, hist_keep, cand_keep,
            ring, first, seen, bits, hu, hp, hi, dit, ci, c_count, got,
        )  # fmt: skip
        nh, nd, nc = (int(x) for x in got)
        # copies of the kept part only: a batch's buffers are sized by its tokens
        h_user.append(hu[:nh].copy())
        h_pos.append(hp[:nh].copy())
        h_item.append(hi[:nh].copy())
        d_item.append(dit[:nd].copy())
        c_item.append(ci[:nc].copy())
        i0 += n_b
    if i0 != a.n_requests:
        raise changed_between_passes("sampled load")
    release_memory()  # the batches' buffers, before the parts are joined
    hist_offsets = np.zeros(a.n_users + 1, np.int64)
    users = cat_parts(h_user, np.int32)
    del h_user
    np.cumsum(np.bincount(users, minlength=a.n_users), out=hist_offsets[1:])
    pos = cat_parts(h_pos, pos_t)
    del h_pos
    items = cat_parts(h_item, np.int32)
    del h_item
    by_pos, by_item = np.empty_like(pos), np.empty_like(items)
    _by_user(users, pos, items, hist_offsets, by_pos, by_item)
    del users, pos, items
    release_memory()
    cand_offsets = np.zeros(a.n_requests + 1 if explicit else 1, np.int64)
    if explicit:
        np.cumsum(c_count, out=cand_offsets[1:])
    rank = np.zeros(len(bits), position_dtype(n_tok))
    np.cumsum(np.bitwise_count(bits[:-1]), out=rank[1:])
    return TokenSample(
        threshold=thr, seed=seed, hist_offsets=hist_offsets, hist_positions=by_pos,
        hist_items=by_item, cand_offsets=cand_offsets, cand_values=cat_parts(c_item, np.int32),
        draw_bits=bits, draw_rank=rank, draw_items=cat_parts(d_item, np.int32), first_request=first,
    )  # fmt: skip


def position_dtype(count: int) -> type:
    """int32 for indices below ``count`` while they fit, else int64 (half the bytes)."""
    return np.int32 if count <= np.iinfo(np.int32).max + 1 else np.int64


def check_pass(sample: TokenSample, thr: int, seed: int) -> None:
    """Refuse a SHARDS pass that could emit keys the sample did not keep."""
    if seed != sample.seed or thr > sample.threshold:
        raise ConfigError(
            f"this trace was loaded for SHARDS seed {sample.seed} at rate "
            f"{sample.threshold / SHARDS_MODULUS:g}, not seed {seed} at rate "
            f"{thr / SHARDS_MODULUS:g}",
            hint="load the trace again with the pass's sample rate and seed",
        )


# ---------------------------------------------------------------- compiled kernels


@nb.njit(cache=True)
def _item_flags(item_keys, hist_tab, cand_tab, mix, thr):
    """Per item: 1 if one of its history (resp. candidate) table keys is sampled."""
    n, n_tab = item_keys.shape
    h = np.zeros(n, np.uint8)
    c = np.zeros(n, np.uint8)
    for i in range(n):
        for t in range(n_tab):
            if key_hash(item_keys[i, t], mix) < thr:
                if hist_tab[t]:
                    h[i] = 1
                if cand_tab[t]:
                    c[i] = 1
    return h, c


@nb.njit(cache=True, inline="always")
def _touch(first, seen, item_keys, tabs, item, i):
    # a bit per key answers "seen?" from cache; ``first`` is written once per key
    for t in range(item_keys.shape[1]):
        if tabs[t]:
            key = item_keys[item, t]
            bit = np.uint64(1) << np.uint64(key & 63)
            if seen[key >> 6] & bit == 0:
                seen[key >> 6] |= bit
                first[key] = i


@nb.njit(cache=True, nogil=True)
def _scan_batch(
    i0, i1, toks, cands, user, hist_end, n_new, tok_off, coff, ncand, explicit, cseed, window,
    max_seq_len, chunk, item_keys, hist_tab, cand_tab, hist_keep, cand_keep,
    ring, first, seen, bits, hu, hp, hi, dit, ci, c_count, got,
):  # fmt: skip
    """Requests ``[i0, i1)`` of pass 2 (module docstring); ``toks``/``cands`` are theirs."""
    t_base = tok_off[i0]
    c_base = coff[i0] if explicit else 0
    ring_n = ring.shape[0]
    nh = nd = nc = 0
    for i in range(i0, i1):
        full = hist_end[i]
        s0, _ = K.context(full, max_seq_len, chunk)
        p0 = full - n_new[i]
        for q in range(n_new[i]):
            j = tok_off[i] + q
            item = toks[j - t_base]
            ring[j % ring_n] = item
            if p0 + q >= s0:  # computed when it arrives: its first and only possible first use
                _touch(first, seen, item_keys, hist_tab, item, i)
            if hist_keep[item]:
                hu[nh] = user[i]
                hp[nh] = p0 + q
                hi[nh] = item
                nh += 1
            if not explicit and cand_keep[item]:
                bits[j >> 6] |= np.uint64(1) << np.uint64(j & 63)
                dit[nd] = item
                nd += 1
        if explicit:
            for x in range(ncand[i]):
                item = cands[coff[i] - c_base + x]
                _touch(first, seen, item_keys, cand_tab, item, i)
                if cand_keep[item]:
                    ci[nc] = item
                    nc += 1
                    c_count[i] += 1
        elif tok_off[i + 1] > 0:  # as the generators: nothing to draw from before any token
            for x in range(ncand[i]):
                p = K.draw_position(cseed, i, x, tok_off, window)
                _touch(first, seen, item_keys, cand_tab, ring[p % ring_n], i)
    got[0] = nh
    got[1] = nd
    got[2] = nc


@nb.njit(cache=True, nogil=True)
def generate(
    user, hist_end, tok_off, ncand, explicit, cseed, window, max_seq_len, chunk,
    item_keys, hist_tab, cand_tab, tab_bytes, k_prev, k_next, k_len, k_start, k_meta,
    h_off, h_pos, h_item, s_coff, s_cval, d_bits, d_rank, d_item,
    thr, mix, edges, state, bound, ids, sizes, offs, look_n,
):  # fmt: skip
    """``embstream._generate`` over a sample: the same keys below ``thr``, in the same order.

    First lookups are the sample's (``first_request``), so nothing is counted here
    but lookups per window and table.
    """
    n_req = user.shape[0]
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
        # the user's kept tokens at positions [full - n, full), in order
        lo = h_off[u] + np.searchsorted(h_pos[h_off[u] : h_off[u + 1]], full - n)
        for x in range(lo, h_off[u + 1]):
            if h_pos[x] >= full:
                break
            o = _emit(item_keys, hist_tab, tab_bytes, h_item[x], thr, mix, ids, sizes, o)
        if explicit:
            for x in range(s_coff[i], s_coff[i + 1]):
                o = _emit(item_keys, cand_tab, tab_bytes, s_cval[x], thr, mix, ids, sizes, o)
        else:
            for x in range(m_c):
                p = K.draw_position(cseed, i, x, tok_off, window)
                word = d_bits[p >> 6]
                bit = np.uint64(1) << np.uint64(p & 63)
                if word & bit:  # its index among the set bits: the word's rank + bits below
                    item = d_item[d_rank[p >> 6] + _popcount(word & (bit - np.uint64(1)))]
                    o = _emit(item_keys, cand_tab, tab_bytes, item, thr, mix, ids, sizes, o)
        j += 1
        offs[j] = o
        i += 1
    if j == 0:  # no request fitted (one was left, checked above): the caller would loop forever
        raise ValueError("key buffer smaller than one request's lookups")
    state[0] = i
    state[1] = w
    return r0, j, o


@nb.njit(cache=True)
def _by_user(users, pos, items, offsets, out_pos, out_items):
    # a counting sort by user, stable: each user's tokens stay in stream (= position) order
    cursor = offsets[:-1].copy()
    for x in range(users.shape[0]):
        u = users[x]
        out_pos[cursor[u]] = pos[x]
        out_items[cursor[u]] = items[x]
        cursor[u] += 1


@nb.njit(cache=True, inline="always")
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@nb.njit(cache=True, inline="always")
def _emit(item_keys, tabs, tab_bytes, item, thr, mix, ids, sizes, o):
    for t in range(item_keys.shape[1]):
        if tabs[t] == 0:
            continue
        key = item_keys[item, t]
        if key_hash(key, mix) >= thr:
            continue
        if o >= ids.shape[0]:  # request_bound too small: refuse rather than write past
            raise IndexError("key buffer smaller than one request's lookups")
        ids[o] = key
        sizes[o] = tab_bytes[t]
        o += 1
    return o
