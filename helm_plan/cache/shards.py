"""SHARDS: byte-weighted stack distances from a spatial sample of keys (Waldspurger et al., FAST'15).

A key is sampled iff ``hash(key) mod P < T`` (rate ``R = T/P``,
``P = 2**24``). The sampled keys' accesses run through the byte-weighted
pass of :mod:`helm_plan.cache.stack`; a sampled access's distance is
``b(x) + (sampled bytes above x) / R`` (the bytes between two accesses are
estimated from the sample, the key's own size is known), and it stands for
``b(x) / R`` bytes looked up. Size classes (keys larger than a capacity are
never cached) are handled as in the exact pass.

*Fixed-size* SHARDS bounds the distinct sampled keys at ``s_max`` with a
max-heap of hashes: when it overflows, ``T`` drops to the largest hash, whose
keys leave the sample. *SHARDS_adj* adds the shortfall between the actual
reuse bytes (looked-up bytes minus first accesses, counted exactly by the
caller) and the represented ones to the smallest distance bin.

Memory scales with the sample: the sampled keys live in an open-addressing
hash table (key -> slot) and a Fenwick tree of ``2 * sampled + 16`` slots;
nothing is indexed by the full key space. The hash is computed per access
(murmur3's 64-bit finaliser), so no per-key array is stored either.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.cache.stack import (
    as_ids,
    as_sizes,
    binned_hits,
    check_grid,
    fw_add,
    fw_prefix,
    grid_bin,
    rebuild_tree,
    size_classes,
    stream_sizes,
    window_of_requests,
    window_sums,
)
from helm_plan.config import require_positive, require_range

SHARDS_MODULUS = 1 << 24
"""P: the hash space of SHARDS thresholds."""


def threshold(sample_rate: float) -> int:
    """T for a sampling rate R (at least 1)."""
    return max(1, int(round(sample_rate * SHARDS_MODULUS)))


def seed_mix(seed: int) -> np.uint64:
    """The per-seed constant xored into every key before hashing."""
    return np.uint64((seed & 0xFFFFFFFFFFFFFFFF) * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF)


def key_hashes(n_ids: int, seed: int) -> np.ndarray:
    """SHARDS hash of keys 0..n_ids-1 in [0, P), int64 (for tests and inspection)."""
    out = np.empty(n_ids, np.int64)
    _hashes(seed_mix(seed), out)
    return out


class ShardsPass:
    """SHARDS estimate of one size class's hit bytes, fed chunk by chunk like ``StackPass``."""

    def __init__(
        self,
        key_bytes: np.ndarray,
        max_bytes: int,
        grid: np.ndarray,
        n_windows: int,
        *,
        sample_rate: float,
        sample_size: int | None,
        seed: int,
    ):
        require_range("sample_rate", sample_rate, 1.0 / SHARDS_MODULUS, 1.0)
        if sample_size is not None:
            require_positive("sample_size", sample_size)
        self.key_bytes = key_bytes
        self.max_bytes = int(max_bytes)
        self.grid = np.ascontiguousarray(grid, np.float64)
        self.mix = seed_mix(seed)
        t0 = threshold(sample_rate)
        self.s_max = int(sample_size or 0)
        # Slots for the most sampled keys that can be live at once: all keys under T0, or s_max.
        live = self.s_max or int(_count_sampled(key_bytes, self.max_bytes, self.mix, t0))
        m = 2 * live + 16
        self.tree = np.zeros(m + 1, np.int64)
        self.item_at = np.full(m, -1, np.int32)
        cap = 1 << max(4, int(2 * live + 2).bit_length())  # load factor <= 1/2
        self.tkey = np.full(cap, -1, np.int32)
        self.tval = np.zeros(cap, np.int32)
        self.heap_h = np.zeros(self.s_max + 1, np.int64)
        self.heap_x = np.zeros(self.s_max + 1, np.int32)
        # [live sampled bytes, next slot, window, threshold, heap size]
        self.meta = np.array([0, 0, 0, t0, 0], np.int64)
        self.acc = np.zeros((n_windows, len(self.grid) + 1), np.float64)
        self.weight = np.zeros(n_windows, np.float64)  # represented reuse bytes

    @property
    def threshold(self) -> int:
        """Current T (lower than the start under fixed-size SHARDS)."""
        return int(self.meta[3])

    def feed(
        self, ids: np.ndarray, sizes: np.ndarray, offs: np.ndarray, r0: int, edges: np.ndarray
    ) -> None:
        """Consume requests ``r0..`` (any superset of the sampled accesses may be passed)."""
        _shards_feed(
            ids, sizes, offs, r0, edges, self.key_bytes, self.max_bytes, self.mix, self.s_max,
            self.tree, self.item_at, self.tkey, self.tval, self.heap_h, self.heap_x,
            self.meta, self.grid, self.acc, self.weight,
        )  # fmt: skip

    def hit_bytes(self, lookup: np.ndarray, reuse: np.ndarray, adjust: bool) -> np.ndarray:
        """Estimated hit bytes per window and capacity, float64, in ``[0, lookup]``.

        ``lookup`` and ``reuse`` are this class's exact looked-up and
        non-first-access bytes per window.
        """
        acc = self.acc.copy()
        if adjust and acc.shape[1] > 1:
            acc[:, 0] += reuse - self.weight
        hits = np.cumsum(acc[:, :-1], axis=1)
        if not adjust:  # plain SHARDS: normalise by the represented (sampled) bytes
            total = self.weight + acc[:, -1]
            # a window with nothing represented has no hit (and must not divide: no warning)
            scale = np.zeros(len(total))
            np.divide(lookup, total, out=scale, where=total > 0)
            hits *= scale[:, None]
        return np.clip(hits, 0.0, np.asarray(lookup, np.float64)[:, None])


def shards_binned_hits(
    ids: np.ndarray,
    grid: np.ndarray,
    *,
    sample_rate: float,
    sample_size: int | None = None,
    seed: int = 0,
    adjust: bool = True,
    key_bytes: np.ndarray | None = None,
    offsets: np.ndarray | None = None,
    edges: np.ndarray | None = None,
    n_ids: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """SHARDS estimate of :func:`helm_plan.cache.stack.binned_hits` over a bare stream.

    Returns (hit bytes float64 [n_windows, len(grid)], lookup bytes int64 [n_windows]).
    """
    require_range("sample_rate", sample_rate, 1.0 / SHARDS_MODULUS, 1.0)
    ids, n_ids = as_ids(ids, n_ids)
    kb = as_sizes(key_bytes, n_ids)[:n_ids]
    grid = check_grid(grid)
    offs = np.array([0, len(ids)], np.int64) if offsets is None else np.asarray(offsets, np.int64)
    edges = window_of_requests(edges, len(offs) - 1)
    n_win = len(edges) - 1
    sizes = stream_sizes(ids, key_bytes, kb)
    first = _first_access(ids, n_ids)
    hits = np.zeros((n_win, len(grid)), np.float64)
    for max_b, idx in size_classes(kb, grid):
        sp = ShardsPass(kb, max_b, grid[idx], n_win, sample_rate=sample_rate,
                        sample_size=sample_size, seed=seed)  # fmt: skip
        sp.feed(ids, sizes, offs, 0, edges)
        small = np.where(sizes <= max_b, sizes, 0)  # this class's bytes per access
        look = window_sums(small, offs, edges)
        cold = window_sums(np.where(first, small, 0), offs, edges)
        hits[:, idx] = sp.hit_bytes(look, look - cold, adjust)
    return hits, window_sums(sizes, offs, edges)


def shards_mae(
    ids: np.ndarray,
    grid: np.ndarray,
    *,
    sample_rate: float,
    sample_size: int | None = None,
    seed: int = 0,
    adjust: bool = True,
    key_bytes: np.ndarray | None = None,
) -> float:
    """Mean absolute error of the SHARDS hit-rate curve against the exact one on ``grid``."""
    ids, n_ids = as_ids(ids, None)
    if len(ids) == 0:
        return 0.0
    exact, n = binned_hits(ids, grid, key_bytes=key_bytes, n_ids=n_ids)
    est, _ = shards_binned_hits(
        ids, grid, sample_rate=sample_rate, sample_size=sample_size, seed=seed,
        adjust=adjust, key_bytes=key_bytes, n_ids=n_ids,
    )  # fmt: skip
    return float(np.mean(np.abs(est[0] - exact[0]) / n[0]))


# ---------------------------------------------------------------- compiled kernels


@nb.njit(cache=True, inline="always")
def key_hash(x, mix):
    """murmur3's 64-bit finaliser of key xor seed, reduced to [0, P)."""
    h = np.uint64(x) ^ mix
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return np.int64(h & np.uint64(SHARDS_MODULUS - 1))


@nb.njit(cache=True)
def _hashes(mix, out):
    for x in range(out.shape[0]):
        out[x] = key_hash(x, mix)


@nb.njit(cache=True)
def _first_access(ids, n_ids):
    seen = np.zeros(n_ids, np.bool_)
    out = np.zeros(ids.shape[0], np.bool_)
    for t in range(ids.shape[0]):
        if not seen[ids[t]]:
            seen[ids[t]] = True
            out[t] = True
    return out


@nb.njit(cache=True)
def _count_sampled(kb, max_b, mix, t0):
    n = 0
    for x in range(kb.shape[0]):
        if kb[x] <= max_b and key_hash(x, mix) < t0:
            n += 1
    return n


@nb.njit(cache=True, inline="always")
def _home(x, mask):
    # Fibonacci hashing of the key for the table slot (SHARDS hashes of sampled keys are
    # all below T, so they would crowd the low slots).
    return np.int64((np.uint64(x) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask


@nb.njit(cache=True, inline="always")
def _find(tkey, x):
    """Table index holding key x, or the empty index where it would go (negative: -1 - index)."""
    mask = tkey.shape[0] - 1
    i = _home(x, mask)
    while True:
        k = tkey[i]
        if k == x:
            return i
        if k < 0:
            return -1 - i
        i = (i + 1) & mask


@nb.njit(cache=True, inline="always")
def _delete(tkey, tval, i):
    """Remove entry i by backward shift (linear probing keeps no tombstones)."""
    mask = tkey.shape[0] - 1
    j = i
    while True:
        j = (j + 1) & mask
        k = tkey[j]
        if k < 0:
            break
        h = _home(k, mask)
        # entry j may move to i unless its home lies cyclically in (i, j]
        if (i <= j and i < h <= j) or (i > j and (h > i or h <= j)):
            continue
        tkey[i] = k
        tval[i] = tval[j]
        i = j
    tkey[i] = -1


@nb.njit(cache=True, inline="always")
def _heap_push(hh, hx, n, h, x):
    i = n
    hh[i] = h
    hx[i] = x
    while i > 0:
        par = (i - 1) >> 1
        if hh[par] >= hh[i]:
            break
        hh[par], hh[i] = hh[i], hh[par]
        hx[par], hx[i] = hx[i], hx[par]
        i = par
    return n + 1


@nb.njit(cache=True, inline="always")
def _heap_pop(hh, hx, n):
    """Remove the max; returns the new size (the max is left at index n-1)."""
    n -= 1
    hh[0], hh[n] = hh[n], hh[0]
    hx[0], hx[n] = hx[n], hx[0]
    i = 0
    while True:
        a = 2 * i + 1
        b = a + 1
        big = i
        if a < n and hh[a] > hh[big]:
            big = a
        if b < n and hh[b] > hh[big]:
            big = b
        if big == i:
            break
        hh[big], hh[i] = hh[i], hh[big]
        hx[big], hx[i] = hx[i], hx[big]
        i = big
    return n


@nb.njit(cache=True)
def _compact(tree, item_at, tkey, tval, pos, m, kb):
    """Renumber live sampled keys to slots 0..live-1 in order; the table follows."""
    k = 0
    for p in range(pos):
        x = item_at[p]
        if x >= 0:
            item_at[k] = x
            tval[_find(tkey, x)] = k
            k += 1
    rebuild_tree(tree, item_at, k, m, kb)
    return k


@nb.njit(cache=True, nogil=True)
def _shards_feed(
    ids, sizes, offs, r0, edges, kb, max_b, mix, s_max, tree, item_at, tkey, tval, hh, hx,
    meta, grid, acc, weight,
):  # fmt: skip
    m = item_at.shape[0]
    n_grid = grid.shape[0]
    total = meta[0]
    pos = meta[1]
    w = meta[2]
    thr = meta[3]
    hn = meta[4]
    for j in range(offs.shape[0] - 1):
        r = r0 + j
        while edges[w + 1] <= r:
            w += 1
        for t in range(offs[j], offs[j + 1]):
            x = ids[t]
            b = sizes[t]
            if b > max_b:
                continue
            h = key_hash(x, mix)
            if h >= thr:
                continue
            i = _find(tkey, x)
            if i < 0 and s_max > 0:  # a new sampled key: fixed-size SHARDS may lower T
                hn = _heap_push(hh, hx, hn, h, x)
                if hn > s_max:
                    thr = hh[0]
                    while hn > 0 and hh[0] >= thr:
                        hn = _heap_pop(hh, hx, hn)
                        y = hx[hn]
                        iy = _find(tkey, y)
                        if iy >= 0:
                            q = tval[iy]
                            fw_add(tree, m, q, -kb[y])
                            total -= kb[y]
                            item_at[q] = -1
                            _delete(tkey, tval, iy)
                    if h >= thr:
                        continue
                    i = _find(tkey, x)  # deletions moved entries
            scale = SHARDS_MODULUS / thr
            if i < 0:
                acc[w, n_grid] += b * scale
            else:
                p = tval[i]
                weight[w] += b * scale
                d = (total - fw_prefix(tree, p)) * scale + b
                acc[w, grid_bin(grid, d)] += b * scale
                fw_add(tree, m, p, -b)
                item_at[p] = -1
                total -= b
            if pos == m:  # renumbering changes table values, never where keys sit
                pos = _compact(tree, item_at, tkey, tval, pos, m, kb)
            if i < 0:
                i = -1 - i
                tkey[i] = x
            tval[i] = pos
            fw_add(tree, m, pos, b)
            item_at[pos] = x
            pos += 1
            total += b
    meta[0] = total
    meta[1] = pos
    meta[2] = w
    meta[3] = thr
    meta[4] = hn
