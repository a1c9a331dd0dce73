"""LRU stack distances over dense item ids: exact (Fenwick) and SHARDS-sampled.

An access's *stack distance* is its 1-based depth in the LRU stack: one plus
the number of distinct ids touched since the id's previous access (first
accesses are cold, depth infinity). A unit-size LRU of ``k`` rows hits exactly
the accesses with distance <= k (LRU is a stack algorithm), so one pass gives
the hit count at every capacity.

The distance is a Fenwick-tree range count of the "last access" marks
(O(log M) per access). The tree is *compacted*: it spans ``M = 2 * live + 16``
time slots, and when they run out the live marks are renumbered in order
(O(M), amortised O(1) per access), so the tree stays cache-sized whatever the
stream length.

SHARDS (Waldspurger et al., FAST'15) samples ids spatially: an id is kept iff
``hash(id) mod P < T`` (rate ``R = T/P``, ``P = 2**24``); sampled distances are
scaled by ``1/R`` and each sampled access stands for ``1/R`` accesses.
*Fixed-size* SHARDS bounds the distinct sampled ids at ``s_max`` with a
max-heap of hashes: when it overflows, ``T`` drops to the largest hash, whose
ids leave the sample. *SHARDS_adj* adds the shortfall between the actual and
the represented access count to the smallest distance, which corrects the bias
from hot ids being in or out of the sample.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError

SHARDS_MODULUS = 1 << 24
"""P: the hash space of SHARDS thresholds."""


def _as_ids(ids: np.ndarray, n_ids: int | None) -> tuple[np.ndarray, int]:
    ids = np.ascontiguousarray(ids, np.int32)
    if len(ids) and int(ids.min()) < 0:
        raise ConfigError("stack distances need dense ids >= 0")
    hi = int(ids.max()) + 1 if len(ids) else 0
    if n_ids is None:
        n_ids = hi
    elif n_ids < hi:
        raise ConfigError(f"n_ids={n_ids} but the stream holds id {hi - 1}")
    return ids, n_ids


def _one_window(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array([0, n], np.int64), np.zeros(1, np.int32)


def binned_hits(
    ids: np.ndarray,
    grid_rows: np.ndarray,
    *,
    offsets: np.ndarray | None = None,
    request_window: np.ndarray | None = None,
    n_windows: int = 1,
    n_ids: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact LRU hits at each capacity of ``grid_rows`` (sorted), per window.

    ``offsets`` (len requests + 1) groups accesses into requests and
    ``request_window`` maps each request to its window; the stack is warm
    across windows. Returns (hits int64 [n_windows, len(grid)], accesses
    int64 [n_windows]).
    """
    ids, n_ids = _as_ids(ids, n_ids)
    grid = np.ascontiguousarray(grid_rows, np.int64)
    if len(grid) and (np.any(np.diff(grid) < 0) or grid[0] < 0):
        raise ConfigError("grid_rows must be sorted and >= 0")
    if offsets is None:
        offsets, request_window = _one_window(len(ids))
        n_windows = 1
    offs = np.ascontiguousarray(offsets, np.int64)
    win = np.ascontiguousarray(request_window, np.int32)
    bin_of = np.searchsorted(grid, np.arange(n_ids + 1), side="left").astype(np.int32)
    # int32 counters halve the histogram's cache footprint when no count can overflow
    acc = np.zeros((n_windows, len(grid) + 1), np.int32 if len(ids) < 2**31 else np.int64)
    _exact_kernel(ids, offs, win, n_ids, bin_of, len(grid), acc)
    acc = acc.astype(np.int64)
    hits = np.cumsum(acc[:, : len(grid)], axis=1)
    return hits, acc.sum(axis=1)


def lru_hit_counts(ids: np.ndarray, n_ids: int | None = None) -> np.ndarray:
    """Exact hits of a unit-size LRU at every capacity 0..n_ids rows (one pass)."""
    ids, n_ids = _as_ids(ids, n_ids)
    hits, _ = binned_hits(ids, np.arange(n_ids + 1), n_ids=n_ids)
    return hits[0]


def stack_distances(ids: np.ndarray, n_ids: int | None = None) -> np.ndarray:
    """Per-access LRU stack distance (1-based), 0 for a first (cold) access."""
    ids, n_ids = _as_ids(ids, n_ids)
    out = np.zeros(len(ids), np.int64)
    _distances_kernel(ids, n_ids, out)
    return out


def shards_binned_hits(
    ids: np.ndarray,
    grid_rows: np.ndarray,
    *,
    sample_rate: float,
    sample_size: int | None = None,
    seed: int = 0,
    adjust: bool = True,
    offsets: np.ndarray | None = None,
    request_window: np.ndarray | None = None,
    n_windows: int = 1,
    n_ids: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """SHARDS estimate of :func:`binned_hits`: (hits float64, accesses int64).

    ``sample_rate`` is the (starting) rate R; ``sample_size`` turns on
    fixed-size SHARDS with at most that many distinct sampled ids. ``adjust``
    applies SHARDS_adj per window. Hits are in access units (clipped to
    [0, accesses]).
    """
    require_range("sample_rate", sample_rate, 1.0 / SHARDS_MODULUS, 1.0)
    if sample_size is not None:
        require_positive("sample_size", sample_size)
    ids, n_ids = _as_ids(ids, n_ids)
    grid = np.ascontiguousarray(grid_rows, np.float64)
    if offsets is None:
        offsets, request_window = _one_window(len(ids))
        n_windows = 1
    offs = np.ascontiguousarray(offsets, np.int64)
    win = np.ascontiguousarray(request_window, np.int32)
    t0 = max(1, int(round(sample_rate * SHARDS_MODULUS)))
    hashes = item_hashes(n_ids, seed)
    live_cap = int(sample_size) if sample_size is not None else int((hashes < t0).sum())
    acc = np.zeros((n_windows, len(grid) + 1), np.float64)
    weight = np.zeros(n_windows, np.float64)
    cold = np.zeros(n_windows, np.int64)
    _shards_kernel(
        ids, offs, win, hashes, t0, int(sample_size or 0), live_cap, grid, acc, weight, cold
    )  # fmt: skip
    n_acc = np.rint(np.bincount(win, weights=np.diff(offs), minlength=n_windows)).astype(np.int64)
    reuses = n_acc - cold  # exact: accesses that are not first accesses
    if adjust:
        first = int(np.searchsorted(grid, 1.0, side="left"))
        if first < len(grid):
            acc[:, first] += reuses - weight
    hits = np.cumsum(acc[:, : len(grid)], axis=1)
    if not adjust:  # plain SHARDS: normalise by the represented (sampled) weight
        total = weight + acc[:, len(grid)]
        with np.errstate(invalid="ignore", divide="ignore"):
            hits *= np.where(total > 0, n_acc / np.maximum(total, 1e-300), 0.0)[:, None]
    return np.clip(hits, 0.0, n_acc[:, None].astype(np.float64)), n_acc


def shards_mae(
    ids: np.ndarray,
    grid_rows: np.ndarray,
    *,
    sample_rate: float,
    sample_size: int | None = None,
    seed: int = 0,
    adjust: bool = True,
) -> float:
    """Mean absolute error of the SHARDS hit-rate curve against the exact one on ``grid_rows``."""
    ids, n_ids = _as_ids(ids, None)
    if len(ids) == 0:
        return 0.0
    exact, n = binned_hits(ids, grid_rows, n_ids=n_ids)
    est, _ = shards_binned_hits(
        ids, grid_rows, sample_rate=sample_rate, sample_size=sample_size, seed=seed,
        adjust=adjust, n_ids=n_ids,
    )  # fmt: skip
    return float(np.mean(np.abs(est[0] - exact[0]) / n[0]))


def item_hashes(n_ids: int, seed: int) -> np.ndarray:
    """SHARDS hash of ids 0..n_ids-1 in [0, P): murmur3's 64-bit finaliser of id xor seed."""
    out = np.empty(n_ids, np.int64)
    _hash_kernel(np.uint64(seed & 0xFFFFFFFFFFFFFFFF), out)
    return out


# ---------------------------------------------------------------- compiled kernels


@nb.njit(cache=True)
def _hash_kernel(seed, out):
    s = seed * np.uint64(0x9E3779B97F4A7C15)
    for i in range(out.shape[0]):
        h = np.uint64(i) ^ s
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB9FE1A85EC53)
        h ^= h >> np.uint64(33)
        out[i] = np.int64(h & np.uint64(SHARDS_MODULUS - 1))


@nb.njit(cache=True, inline="always")
def _fw_add(tree, m, i, v):
    k = i + 1
    while k <= m:
        tree[k] += v
        k += k & (-k)


@nb.njit(cache=True, inline="always")
def _fw_prefix(tree, i):
    """Sum of slots 0..i inclusive."""
    s = 0
    k = i + 1
    while k > 0:
        s += tree[k]
        k -= k & (-k)
    return s


@nb.njit(cache=True)
def _compact(tree, item_at, last, pos, m):
    """Renumber live marks to slots 0..live-1 in order and rebuild the tree."""
    k = 0
    for p in range(pos):
        x = item_at[p]
        if x >= 0:
            item_at[k] = x
            last[x] = k
            k += 1
    for p in range(k, m):
        item_at[p] = -1
    tree[:] = 0
    for i in range(1, m + 1):
        if i <= k:
            tree[i] += 1
        j = i + (i & (-i))
        if j <= m:
            tree[j] += tree[i]
    return k


@nb.njit(cache=True)
def _exact_kernel(ids, offs, win, n_ids, bin_of, n_grid, acc):
    m = 2 * n_ids + 16
    tree = np.zeros(m + 1, np.int32)
    item_at = np.full(m, -1, np.int32)
    last = np.full(n_ids, -1, np.int32)  # slots < m = 2 * live + 16
    live = 0
    pos = 0
    for r in range(offs.shape[0] - 1):
        w = win[r]
        for t in range(offs[r], offs[r + 1]):
            x = ids[t]
            p = last[x]
            if p < 0:
                acc[w, n_grid] += 1
                live += 1
            else:
                d = live - _fw_prefix(tree, p) + 1
                acc[w, bin_of[d]] += 1
                _fw_add(tree, m, p, -1)
                item_at[p] = -1
            if pos == m:
                pos = _compact(tree, item_at, last, pos, m)
            _fw_add(tree, m, pos, 1)
            item_at[pos] = x
            last[x] = pos
            pos += 1


@nb.njit(cache=True)
def _distances_kernel(ids, n_ids, out):
    m = 2 * n_ids + 16
    tree = np.zeros(m + 1, np.int32)
    item_at = np.full(m, -1, np.int32)
    last = np.full(n_ids, -1, np.int32)  # slots < m = 2 * live + 16
    live = 0
    pos = 0
    for t in range(ids.shape[0]):
        x = ids[t]
        p = last[x]
        if p < 0:
            live += 1
        else:
            out[t] = live - _fw_prefix(tree, p) + 1
            _fw_add(tree, m, p, -1)
            item_at[p] = -1
        if pos == m:
            pos = _compact(tree, item_at, last, pos, m)
        _fw_add(tree, m, pos, 1)
        item_at[pos] = x
        last[x] = pos
        pos += 1


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
def _grid_bin(grid, d):
    lo = 0
    hi = grid.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if grid[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True)
def _shards_kernel(ids, offs, win, hashes, t0, s_max, live_cap, grid, acc, weight, cold):
    n_ids = hashes.shape[0]
    seen = np.zeros(n_ids, np.uint8)
    n_grid = grid.shape[0]
    m = 2 * live_cap + 16
    tree = np.zeros(m + 1, np.int32)
    item_at = np.full(m, -1, np.int32)
    last = np.full(n_ids, -1, np.int32)  # slots < m = 2 * live + 16
    heap_cap = s_max + 1 if s_max > 0 else 1
    hh = np.empty(heap_cap, np.int64)
    hx = np.empty(heap_cap, np.int32)
    hn = 0
    thr = t0
    live = 0
    pos = 0
    modulus = float(SHARDS_MODULUS)
    for r in range(offs.shape[0] - 1):
        w = win[r]
        for t in range(offs[r], offs[r + 1]):
            x = ids[t]
            if seen[x] == 0:
                seen[x] = 1
                cold[w] += 1
            h = hashes[x]
            if h >= thr:
                continue
            p = last[x]
            if p < 0 and s_max > 0:
                hn = _heap_push(hh, hx, hn, h, x)
                if hn > s_max:
                    thr = hh[0]
                    while hn > 0 and hh[0] >= thr:
                        hn = _heap_pop(hh, hx, hn)
                        y = hx[hn]
                        q = last[y]
                        if q >= 0:
                            _fw_add(tree, m, q, -1)
                            item_at[q] = -1
                            last[y] = -1
                            live -= 1
                    if h >= thr:
                        continue
            scale = modulus / thr
            if p < 0:
                acc[w, n_grid] += scale
                live += 1
            else:
                weight[w] += scale
                d = (live - _fw_prefix(tree, p)) * scale + 1.0
                acc[w, _grid_bin(grid, d)] += scale
                _fw_add(tree, m, p, -1)
                item_at[p] = -1
            if pos == m:
                pos = _compact(tree, item_at, last, pos, m)
            _fw_add(tree, m, pos, 1)
            item_at[pos] = x
            last[x] = pos
            pos += 1
