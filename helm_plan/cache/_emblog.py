"""The EMB cache's LRU order: access stamps, and a sorted snapshot to evict from.

Every access gives its key the next stamp (``last[key]``, int32; -1: not
resident), so the least recently used key is always the resident key with the
smallest stamp. The order is kept without touching anything but the stamp on a
hit:

- ``qi[0:QE)`` is a **snapshot**: resident keys sorted by stamp, each stamped
  with its position (``last[qi[p]] == p``). Every stamp handed out after it is
  ``>= QE``, so a snapshot entry whose key was accessed (or evicted) since is
  simply no longer current;
- ``qi[QE:QE+TL)`` lists the keys **touched** since the snapshot (their first
  access since, or their insertion), each once: an access appends its key when
  the key's old stamp is below ``QE``;
- eviction pops the first current snapshot entry at or after ``QH``. Every
  untouched resident key sits in the snapshot with a stamp below any touched
  key's, so that entry is the LRU key. When the snapshot holds no current entry,
  every resident key has been touched: the touched list, sorted by stamp (a radix
  sort), becomes the next snapshot, renumbered ``0..T-1``.

So a hit is one random write (the stamp, on the line just read) and, once per
snapshot, a sequential append; an eviction is amortised O(1) (each list entry is
sorted once and popped or skipped once). The earlier log appended every access
and compacted the log when full; on a 512-candidate trace whose hot set fits,
that log was half the kernel's time. The results are those of one exact LRU
(``tests/brute.py``).

Stamps grow by one per access; before they leave int32 they are renumbered
(:func:`renumber`, the same order). ``qi`` has room for twice the most keys that
fit the largest capacity the cache has had (``core.log_slots``): a snapshot and
a touched list each hold resident keys only.

The cursor (snapshot head, next stamp, bytes used, accesses, snapshot end,
touched count) travels in registers through the request loop rather than
through ``meta``: loads and stores through an array made the per-lookup path
several times slower.
"""

from __future__ import annotations

import numba as nb
import numpy as np

# EMB meta: [snapshot head, next stamp, bytes used, capacity bytes, accesses so far,
# snapshot end, keys touched since the snapshot]
QH, QT, USED, CAP, CLK, QE, TL = 0, 1, 2, 3, 4, 5, 6
N_META = 7
STAMP_LIMIT = 2**31 - 2**27
"""Stamps are renumbered (:func:`renumber`) at a request start past this (int32 headroom)."""
_SMALL_SORT = 4096
"""Below this many keys a comparison sort is as fast as the radix sort."""


def new_meta(capacity_bytes: int) -> np.ndarray:
    """The meta row of an empty cache."""
    return np.array([0, 0, 0, capacity_bytes, 0, 0, 0], np.int64)


@nb.njit(cache=True)
def _radix_sort(v, bits):
    """Sort non-negative int64 ``v`` by its bits ``32 .. 32 + bits`` (LSD, 11-bit digits).

    The digits are small so the counts stay in L1; each pass reads in order and writes to
    2,048 runs.
    """
    n = v.shape[0]
    tmp = np.empty(n, np.int64)
    shift = 32
    while shift < 32 + bits:
        cnt = np.zeros(2049, np.int64)
        for i in range(n):
            cnt[((v[i] >> shift) & 2047) + 1] += 1
        for b in range(2048):
            cnt[b + 1] += cnt[b]
        for i in range(n):
            d = (v[i] >> shift) & 2047
            tmp[cnt[d]] = v[i]
            cnt[d] += 1
        v, tmp = tmp, v
        shift += 11
    return v


@nb.njit(cache=True)
def _heap_sort(v):
    """Sort int64 ``v`` in place and return it: the comparison sort for short arrays (one
    small function: numba's ``np.sort`` compiles five for its quicksort, about a second of
    the first run after an install)."""
    end = v.shape[0]
    start = end // 2
    while end > 1:
        if start > 0:  # build the max-heap, from the last parent up
            start -= 1
        else:  # move the max behind the heap
            end -= 1
            v[0], v[end] = v[end], v[0]
        root = start  # sift v[root] down into v[:end]
        x = v[root]
        c = 2 * root + 1
        while c < end:
            if c + 1 < end and v[c + 1] > v[c]:
                c += 1
            if v[c] <= x:
                break
            v[root] = v[c]
            root = c
            c = 2 * root + 1
        v[root] = x
    return v


@nb.njit(cache=True)
def _sorted_touched(last, qi, qe, tl):
    """The touched keys still resident, least recently used first.

    Each key is packed with its stamp above it (stamp - qe, below 2^31, then the key), so
    one sort of int64 values orders them (stamps are distinct).
    """
    packed = np.empty(tl, np.int64)
    top = 0
    m = 0
    for j in range(qe, qe + tl):
        k = qi[j]
        s = last[k]
        if s >= qe:  # resident and touched (a touched key is not evicted before the next
            packed[m] = ((s - qe) << 32) | k  # snapshot, but a caller may have cleared it)
            top = max(top, s - qe)
            m += 1
    packed = packed[:m]
    if m < _SMALL_SORT:
        packed = _heap_sort(packed)
    else:
        bits = 1
        while (top >> bits) > 0:
            bits += 1
        packed = _radix_sort(packed, bits)
    return (packed & 0xFFFFFFFF).astype(np.int32)


@nb.njit(cache=True)
def lru_order(last, qi, qh, qe, tl):
    """Every resident key, least recently used first (the state is left as it is)."""
    touched = _sorted_touched(last, qi, qe, tl)
    out = np.empty(qe - qh + touched.shape[0], np.int64)
    m = 0
    for p in range(qh, qe):
        if last[qi[p]] == p:
            out[m] = qi[p]
            m += 1
    for k in touched:
        out[m] = k
        m += 1
    return out[:m]


@nb.njit(cache=True)
def _resnapshot(last, qi, qe, tl):
    """The touched list, sorted by stamp, becomes the snapshot; returns its length."""
    keys = _sorted_touched(last, qi, qe, tl)
    for p in range(keys.shape[0]):
        qi[p] = keys[p]
        last[keys[p]] = p
    return keys.shape[0]


@nb.njit(cache=True)
def renumber(last, qi, qh, qe, tl):
    """Restamp every resident key ``0..R-1`` in LRU order (one snapshot); returns R."""
    keys = lru_order(last, qi, qh, qe, tl)
    for p in range(keys.shape[0]):
        qi[p] = keys[p]
        last[keys[p]] = p
    return keys.shape[0]


@nb.njit(cache=True, inline="always")
def touch(last, qi, qe, tl, qtl, clk, it, old):
    """Make ``it`` (whose stamp was ``old``, -1 if new) the most recent key.

    Returns (touched count, next stamp, accesses).
    """
    if old < qe:  # its first access since the snapshot, or a new key: list it
        qi[qe + tl] = it
        tl += 1
    last[it] = qtl
    return tl, qtl + 1, clk + 1


@nb.njit(cache=True, inline="always")
def _evict_lru(last, qi, qh, qe, tl, qtl):
    """Evict the LRU key; returns (qh, qe, tl, qtl, the key), the key -1 when none is resident."""
    while qh < qe and last[qi[qh]] != qh:
        qh += 1
    if qh == qe:  # no untouched key left: the touched ones are the next snapshot
        qe = _resnapshot(last, qi, qe, tl)
        qh, tl, qtl = 0, 0, qe
        if qe == 0:
            return qh, qe, tl, qtl, -1
    k = qi[qh]
    last[k] = -1
    return qh + 1, qe, tl, qtl, k


@nb.njit(cache=True)
def make_room(last, qi, qh, qe, tl, qtl, used, cap, kb, key_bytes):
    """Evict LRU keys until ``kb`` more bytes fit ``cap``; returns (qh, qe, tl, qtl, used)."""
    while used + kb > cap:
        qh, qe, tl, qtl, k = _evict_lru(last, qi, qh, qe, tl, qtl)
        if k < 0:
            break
        used -= key_bytes[k]
    return qh, qe, tl, qtl, used


@nb.njit(cache=True)
def emb_shrink(last, qi, meta, key_bytes):
    """Evict LRU entries until the bytes used fit the capacity; returns the entries evicted."""
    qh, qe, tl, qtl, used = meta[QH], meta[QE], meta[TL], meta[QT], meta[USED]
    ev = 0
    while used > meta[CAP]:
        qh, qe, tl, qtl, k = _evict_lru(last, qi, qh, qe, tl, qtl)
        if k < 0:
            break
        used -= key_bytes[k]
        ev += 1
    meta[QH], meta[QE], meta[TL], meta[QT], meta[USED] = qh, qe, tl, qtl, used
    return ev


@nb.njit(cache=True)
def emb_order(last, qi, meta):
    """Resident keys from MRU to LRU (the state is left as it is)."""
    return lru_order(last, qi, meta[QH], meta[QE], meta[TL])[::-1].copy()
