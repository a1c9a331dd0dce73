"""Byte-weighted LRU stack distances over dense keys: one pass gives the EMB hit rate at every capacity.

**Why one pass suffices.** The EMB cache (:mod:`helm_plan.cache.core`) is one
LRU of ``C`` bytes over keys of different sizes: a hit moves the key to MRU;
a miss inserts it at MRU after evicting LRU entries until it fits; a key
larger than ``C`` is fetched but not cached. Let the *recency stack* list
every key seen so far, most recent first, and let ``b(k)`` be a key's bytes.

*Claim:* if no key is larger than ``C``, the cache holds exactly the longest
MRU prefix ``P`` of the stack whose total bytes are ``<= C``. By induction
over accesses (both start empty); let ``x`` be the key accessed:

- hit (``x`` in ``P``): the new stack is ``x``, ``P - x``, then the rest as
  before. ``x + (P - x)`` has the bytes of ``P``, and the next key still does
  not fit (``P`` was maximal); the LRU moves ``x`` up and evicts nothing.
- miss (``x`` not in ``P``): the LRU keeps ``x`` and the longest MRU prefix
  ``Q`` of ``P`` with ``b(x) + b(Q) <= C``. If ``Q != P`` the next key of
  ``P`` does not fit, so ``x + Q`` is the longest fitting prefix of the new
  stack ``x, P, ...``. If ``Q = P``, the key ``y`` after ``P`` in the old
  stack is not ``x`` (else ``b(P) + b(x) > C``), and ``b(P) + b(y) > C``
  already, so ``y`` does not fit after ``x`` either.

Sizes are positive, so ``x`` is in ``P`` iff the prefix ending at ``x`` fits:
``x`` hits at every ``C >= d(x)``, its *byte stack distance*
``d(x) = b(x) + bytes of the distinct keys accessed since x's previous access``
(first accesses miss everywhere). One histogram of ``d``, weighted by
``b(x)``, gives the hit bytes at every capacity; the hit rate is by bytes
looked up, ``1 - miss_bytes / lookup_bytes``, as the simulator reports it.

**Keys larger than C.** The kernel leaves the cache alone on such a key while
the stack gains it on top, so the prefix picture holds only for ``C >=`` the
largest key. Below it, keys larger than ``C`` never enter the cache, so for
``C`` in ``[s_j, s_{j+1})`` (``s`` = the distinct key sizes) the cache is the
LRU of the substream of keys of at most ``s_j`` bytes, in which every key
fits: the same argument applies to it. :func:`size_classes` splits a grid of
capacities by class and the curve builder runs one pass per class that holds
a capacity (usually just one: all capacities ``>=`` the largest key), so the
curves are exact at every capacity; below the smallest key nothing is cached.

**The pass.** ``d`` is a Fenwick-tree suffix sum of the bytes marked at each
key's latest access slot (O(log M) per access). The tree is *compacted*: it
spans ``M = 2 * keys + 16`` slots, and when they run out the live marks are
renumbered in order (O(M), amortised O(1)), so it stays cache-sized whatever
the stream length. Mixed sizes count bytes (an int64 tree over the slots,
binary search of the bin over the grid). A class whose keys all have one size
counts rows: a bit per slot and an int32 tree over blocks of 64 slots, so a
distance is a walk over ``M / 64`` blocks plus a popcount of the marks above
the slot in its own block (the same count as a tree over the slots, in
three fewer levels per walk and a tree 64x smaller; the controller's ghost
is such a pass), and the bin is a table lookup. :class:`StackPass` keeps the
state between chunks so a stream is consumed as it is generated
(:mod:`helm_plan.cache.embstream`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.errors import ConfigError

_EMPTY_I32 = np.zeros(0, np.int32)
_EMPTY_U64 = np.zeros(0, np.uint64)


def as_ids(ids: np.ndarray, n_ids: int | None) -> tuple[np.ndarray, int]:
    """Dense int32 ids and the id-space size, checked."""
    ids = np.ascontiguousarray(ids, np.int32)
    if len(ids) and int(ids.min()) < 0:
        raise ConfigError("stack distances need dense ids >= 0", hint="number keys 0..n-1")
    hi = int(ids.max()) + 1 if len(ids) else 0
    if n_ids is None:
        n_ids = hi
    elif n_ids < hi:
        raise ConfigError(f"n_ids={n_ids} but the stream holds id {hi - 1}", hint="pass n_ids")
    return ids, n_ids


def as_sizes(key_bytes: np.ndarray | None, n_ids: int) -> np.ndarray:
    """Bytes per key, int64 (all 1 when ``key_bytes`` is None: capacities in rows)."""
    if key_bytes is None:
        return np.ones(n_ids, np.int64)
    kb = np.ascontiguousarray(key_bytes, np.int64)
    if len(kb) < n_ids or (len(kb) and kb.min() <= 0):
        raise ConfigError(
            f"key_bytes needs a positive size for each of the {n_ids} keys",
            hint="pass one entry per dense key",
        )
    return kb


def stream_sizes(ids: np.ndarray, key_bytes: np.ndarray | None, kb: np.ndarray) -> np.ndarray:
    """Bytes of each access, int32, in stream order (the passes read them beside the keys)."""
    if key_bytes is None or (len(kb) and kb.min() == kb.max()):  # one size: no gather
        return np.full(len(ids), kb[0] if key_bytes is not None and len(kb) else 1, np.int32)
    # gather from int32 key sizes: ``kb[ids]`` would hold an int64 per access first
    return kb.astype(np.int32)[ids]


def check_grid(grid: np.ndarray) -> np.ndarray:
    """A sorted int64 grid of capacities >= 0."""
    g = np.ascontiguousarray(grid, np.int64)
    if len(g) and (np.any(np.diff(g) < 0) or g[0] < 0):
        raise ConfigError("capacities must be sorted and >= 0", hint="sort the grid")
    return g


def size_classes(key_bytes: np.ndarray, grid: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Split sorted capacities by key-size class: ``[(max key bytes, grid indices), ...]``.

    Capacities in ``[s_j, s_{j+1})`` see only keys of at most ``s_j`` bytes
    (module docstring); capacities below the smallest key are in no class.
    """
    sizes = np.unique(key_bytes)
    if len(sizes) == 0:
        return []
    cls = np.searchsorted(sizes, grid, side="right") - 1  # class of each capacity, -1: none
    return [(int(sizes[c]), np.flatnonzero(cls == c)) for c in np.unique(cls[cls >= 0])]


def class_census(key_bytes: np.ndarray, max_bytes: int) -> tuple[int, np.ndarray]:
    """Keys of at most ``max_bytes`` bytes and their distinct sizes (a :class:`StackPass`'s)."""
    in_class = key_bytes <= max_bytes
    return int(in_class.sum()), np.unique(key_bytes[in_class])


def window_of_requests(edges: np.ndarray | None, n_requests: int) -> np.ndarray:
    """Request bounds of windows (``arrays.window_edges``), or one window over everything."""
    if edges is None:
        return np.array([0, n_requests], np.int64)
    e = np.ascontiguousarray(edges, np.int64)
    if len(e) < 2 or e[0] != 0 or e[-1] != n_requests or np.any(np.diff(e) < 0):
        raise ConfigError(
            f"window edges must run from 0 to {n_requests} requests, non-decreasing",
            hint="use arrays.window_edges",
        )
    return e


class StackPass:
    """Exact byte-weighted stack-distance histogram of one size class, fed chunk by chunk.

    Counts accesses to keys of at most ``max_bytes`` bytes into
    ``acc[window, bin]`` (hit bytes of the capacities in ``grid``; the last
    column holds first accesses). Hit bytes at ``grid[k]`` are
    ``acc[:, :k+1].sum(axis=1)``.
    """

    def __init__(
        self,
        key_bytes: np.ndarray,
        max_bytes: int,
        grid: np.ndarray,
        n_windows: int,
        census: tuple[int, np.ndarray] | None = None,
    ):
        self.key_bytes = key_bytes
        self.max_bytes = int(max_bytes)
        # (keys in the class, their distinct sizes): a pass fed again and again (the ghost's,
        # every window) passes them in rather than scanning every key each time
        n_class, sizes = census if census is not None else class_census(key_bytes, max_bytes)
        self.weighted = len(sizes) > 1
        # One size: count rows (int32 tree, bin by table lookup); else bytes (int64, search).
        unit = 1 if self.weighted else int(sizes[0]) if len(sizes) else 1
        self.grid = np.ascontiguousarray(grid // unit, np.int64)
        m = 2 * n_class + 16
        if self.weighted:  # a tree over the slots, marked with bytes
            self.tree = np.zeros(m + 1, np.int64)
            self.bits = _EMPTY_U64
        else:  # a bit per slot and a tree over blocks of 64 slots (_exact_feed)
            self.tree = np.zeros(-(-m // 64) + 1, np.int32)
            self.bits = np.zeros(-(-m // 64), np.uint64)
        self.item_at = np.full(m, -1, np.int32)
        self.last = np.full(len(key_bytes), -1, np.int32)  # slots < m
        self.meta = np.zeros(3, np.int64)  # [live weight, next slot, current window]
        if self.weighted or len(self.grid) == 0:
            self.lut = _EMPTY_I32
        else:
            n_lut = min(int(self.grid[-1]), n_class) + 1  # a row distance never exceeds n_class
            self.lut = np.searchsorted(self.grid, np.arange(n_lut), side="left").astype(np.int32)
        self.acc = np.zeros((n_windows, len(self.grid) + 1), np.int64)

    def feed(
        self, ids: np.ndarray, sizes: np.ndarray, offs: np.ndarray, r0: int, edges: np.ndarray
    ) -> None:
        """Consume requests ``r0 .. r0 + len(offs) - 2``: keys ``ids[offs[j]:offs[j+1]]`` of ``sizes`` bytes."""
        _exact_feed(
            ids, sizes, offs, r0, edges, self.key_bytes, self.max_bytes, self.weighted,
            self.tree, self.bits, self.item_at, self.last, self.meta, self.lut, self.grid,
            self.acc, 0, _EMPTY_I32, 0, 0,
        )  # fmt: skip

    def hit_bytes(self) -> np.ndarray:
        """Hit bytes per window at each capacity of the grid, int64 [n_windows, len(grid)]."""
        return np.cumsum(self.acc[:, :-1], axis=1)


class WindowedPass(StackPass):
    """A :class:`StackPass` fed one window at a time that remembers the last ``history``
    windows before each: a key last accessed before them is a first access again (the
    controller's ghost, :class:`helm_plan.cache.ghost.Ghost`).

    The hits are those of a fresh pass fed the remembered windows and then this one
    (:func:`window_hits`; tested), for one window's work instead of ``history + 1``: a key
    accessed within the remembered windows has the same distance in both (every key marked
    above its slot was accessed after it, so within them too), and a key accessed before
    them is unmarked when it comes again; until then its mark sits below every slot a
    distance sums, so it changes none.
    """

    def __init__(self, key_bytes: np.ndarray, max_bytes: int, grid: np.ndarray, history: int,
                 census: tuple[int, np.ndarray] | None = None) -> None:  # fmt: skip
        super().__init__(key_bytes, max_bytes, grid, 1, census)
        self.history = int(history)
        self.seen = np.zeros(len(key_bytes), np.int32)  # window of each key's last access
        self.window = 0

    def next_window(self, ids: np.ndarray, sizes: np.ndarray | None, offs: np.ndarray,
                    rows: np.ndarray) -> np.ndarray:  # fmt: skip
        """Hit bytes of the next window's requests (keys ``ids[offs[j]:offs[j+1]]`` of
        ``sizes`` bytes; None: every key is ``key_bytes[0]`` bytes), summed over the request
        bounds ``rows``: int64 [len(rows) - 1, len(grid)]."""
        self.acc = np.zeros((len(rows) - 1, len(self.grid) + 1), np.int64)
        self.meta[2] = 0
        size_all = 0 if sizes is not None else int(self.key_bytes[0])
        _exact_feed(
            ids, _EMPTY_I32 if sizes is None else sizes, np.asarray(offs, np.int64), 0,
            np.asarray(rows, np.int64), self.key_bytes, self.max_bytes, self.weighted,
            self.tree, self.bits, self.item_at, self.last, self.meta, self.lut, self.grid,
            self.acc, size_all, self.seen, self.window, self.window - self.history,
        )  # fmt: skip
        self.window += 1
        return self.hit_bytes()


def binned_hits(
    ids: np.ndarray,
    grid: np.ndarray,
    *,
    key_bytes: np.ndarray | None = None,
    offsets: np.ndarray | None = None,
    edges: np.ndarray | None = None,
    n_ids: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact LRU hit bytes at each capacity of sorted ``grid`` (bytes), per window, over a bare stream.

    ``key_bytes`` (per dense id; None = 1 byte each, i.e. capacities in rows)
    sizes the keys; ``offsets`` (len requests + 1) groups accesses into
    requests and ``edges`` (request bounds, :func:`helm_plan.arrays.window_edges`)
    into windows; the LRU is warm across windows. Returns (hit bytes int64
    [n_windows, len(grid)], lookup bytes int64 [n_windows]).
    """
    ids, n_ids = as_ids(ids, n_ids)
    offs = np.array([0, len(ids)], np.int64) if offsets is None else np.asarray(offsets, np.int64)
    edges = window_of_requests(edges, len(offs) - 1)
    # each window a view of the stream (its offsets rebased): the windows' pass below
    windows = [(ids[offs[a] : offs[b]], offs[a : b + 1] - offs[a])
               for a, b in zip(edges[:-1], edges[1:], strict=True)]  # fmt: skip
    return window_hits(windows, grid, key_bytes=key_bytes, n_ids=n_ids)


def window_hits(
    windows: list[tuple[np.ndarray, np.ndarray]],
    grid: np.ndarray,
    *,
    key_bytes: np.ndarray | None,
    n_ids: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`binned_hits` of windows held apart: one ``(ids, offsets)`` per window, in order.

    The LRU is warm across them, and the figures are those of the windows'
    concatenation with their edges, without that concatenated copy. Sizes are
    gathered window by window, never one array for the whole stream.
    """
    parts = [(as_ids(ids, n_ids)[0], np.asarray(o, np.int64)) for ids, o in windows]
    kb = as_sizes(key_bytes, n_ids)
    grid = check_grid(grid)
    edges = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(o) - 1 for _, o in parts], out=edges[1:])
    plan = size_plan(kb[:n_ids], grid)
    passes = [StackPass(kb[:n_ids], max_b, grid[idx], len(parts), census)
              for max_b, idx, census in plan]  # fmt: skip
    look = []
    for w, (ids, o) in enumerate(parts):
        sz = stream_sizes(ids, key_bytes, kb)  # one window's sizes, for its bytes and each class
        look.append(sz[o[0] : o[-1]].sum(dtype=np.int64))
        for sp in passes:
            sp.feed(ids, sz, o, int(edges[w]), edges)
    hits = np.zeros((len(parts), len(grid)), np.int64)
    for (_, idx, _), sp in zip(plan, passes, strict=True):
        hits[:, idx] = sp.hit_bytes()
    return hits, np.array(look, np.int64)


def size_plan(
    key_bytes: np.ndarray, grid: np.ndarray
) -> list[tuple[int, np.ndarray, tuple[int, np.ndarray]]]:
    """:func:`size_classes` of ``grid`` with each class's :func:`class_census`."""
    return [(b, idx, class_census(key_bytes, b)) for b, idx in size_classes(key_bytes, grid)]


def window_sums(values: np.ndarray, offs: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Sum of per-access ``values`` per window of a bare stream, int64."""
    bounds = np.ascontiguousarray(np.asarray(offs, np.int64)[edges])
    out = np.zeros(len(bounds) - 1, np.int64)
    # compiled: a running cumulative sum would hold an int64 per access
    _window_sums(np.ascontiguousarray(values), bounds, out)
    return out


@nb.njit(cache=True)
def _window_sums(values, bounds, out):  # noqa: ANN001, ANN202
    for w in range(bounds.shape[0] - 1):
        t = 0
        for j in range(bounds[w], bounds[w + 1]):
            t += values[j]
        out[w] = t


def lru_hit_counts(ids: np.ndarray, n_ids: int | None = None) -> np.ndarray:
    """Exact hits of a unit-size LRU at every capacity 0..n_ids rows (one pass)."""
    ids, n_ids = as_ids(ids, n_ids)
    hits, _ = binned_hits(ids, np.arange(n_ids + 1), n_ids=n_ids)
    return hits[0]


def stack_distances(
    ids: np.ndarray, key_bytes: np.ndarray | None = None, n_ids: int | None = None
) -> np.ndarray:
    """Per-access byte stack distance (rows when ``key_bytes`` is None), 0 for a first access."""
    ids, n_ids = as_ids(ids, n_ids)
    kb = as_sizes(key_bytes, n_ids)
    out = np.zeros(len(ids), np.int64)
    _distances_kernel(ids, n_ids, kb, out)
    return out


# ---------------------------------------------------------------- compiled kernels


@nb.njit(cache=True, inline="always")
def fw_add(tree, m, i, v):
    k = i + 1
    while k <= m:
        tree[k] += v
        k += k & (-k)


@nb.njit(cache=True, inline="always")
def fw_prefix(tree, i):
    """Sum of slots 0..i inclusive."""
    s = tree[0]  # slot 0 is never used: a zero of the tree's dtype
    k = i + 1
    while k > 0:
        s += tree[k]
        k -= k & (-k)
    return s


@nb.njit(cache=True, inline="always")
def grid_bin(grid, d):
    """First index with grid[k] >= d (len(grid) if none): the capacities where d hits."""
    lo = 0
    hi = grid.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if grid[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True, inline="always")
def fw_build(tree, n):
    """Make ``tree[1..n]``, holding each slot's own value, its Fenwick tree in O(n)."""
    for i in range(1, n + 1):  # each node passes its sum on to its parent
        j = i + (i & (-i))
        if j <= n:
            tree[j] += tree[i]


@nb.njit(cache=True, inline="always")
def rebuild_tree(tree, item_at, k, m, kb):
    """Clear slots k..m-1 and rebuild the tree over the live slots 0..k-1 (marked with their
    bytes) in O(m)."""
    for p in range(k, m):
        item_at[p] = -1
    tree[:] = 0
    for i in range(k):
        tree[i + 1] = kb[item_at[i]]
    fw_build(tree, m)


@nb.njit(cache=True, inline="always")
def _renumber(item_at, last, pos):
    """Move the live marks of slots 0..pos-1 to slots 0..live-1, in order; returns live."""
    k = 0
    for p in range(pos):
        x = item_at[p]
        if x >= 0:
            item_at[k] = x
            last[x] = k
            k += 1
    return k


@nb.njit(cache=True)
def compact(tree, item_at, last, pos, m, kb):
    """Renumber live marks to slots 0..live-1 in order and rebuild the tree (weights = sizes;
    a one-size pass compacts with :func:`compact_rows`)."""
    k = _renumber(item_at, last, pos)
    rebuild_tree(tree, item_at, k, m, kb)
    return k


_ONE = np.uint64(1)
_M1, _M2 = np.uint64(0x5555555555555555), np.uint64(0x3333333333333333)
_M4, _H01 = np.uint64(0x0F0F0F0F0F0F0F0F), np.uint64(0x0101010101010101)


@nb.njit(cache=True, inline="always")
def _popcount(v):
    """Set bits of a uint64 (the SWAR count)."""
    v = v - ((v >> _ONE) & _M1)
    v = (v & _M2) + ((v >> np.uint64(2)) & _M2)
    v = (v + (v >> np.uint64(4))) & _M4
    return np.int64((v * _H01) >> np.uint64(56))


@nb.njit(cache=True, inline="always")
def _rows_above(tree, bits, total, p):
    """Marks in the slots above ``p`` (one size: a bit per slot, ``tree`` over blocks of 64):
    those of the later blocks, then those above ``p`` in its own block."""
    b = p >> 6
    above = bits[b] >> np.uint64(p & 63) >> _ONE  # two shifts: a shift by 64 is undefined
    return total - fw_prefix(tree, b) + _popcount(above)


@nb.njit(cache=True, inline="always")
def _rows_flip(tree, bits, p, v):
    """Mark (``v`` = 1) or unmark (-1) slot ``p`` (one size)."""
    bits[p >> 6] ^= _ONE << np.uint64(p & 63)
    fw_add(tree, bits.shape[0], p >> 6, v)


@nb.njit(cache=True)
def compact_rows(tree, bits, item_at, last, pos):
    """:func:`compact` of a one-size pass: slots 0..live-1 marked, the block tree rebuilt."""
    k = _renumber(item_at, last, pos)
    for p in range(k, item_at.shape[0]):
        item_at[p] = -1
    tree[:] = 0
    for b in range(bits.shape[0]):  # block b holds min(64, k - 64 b) marks, from slot 0 up
        n = k - 64 * b if k - 64 * b < 64 else 64
        if n <= 0:
            bits[b] = 0
        else:
            bits[b] = ~np.uint64(0) if n == 64 else (_ONE << np.uint64(n)) - _ONE
            tree[b + 1] = n
    fw_build(tree, bits.shape[0])
    return k


@nb.njit(cache=True, nogil=True)
def _exact_feed(
    ids, sizes, offs, r0, edges, kb, max_b, weighted, tree, bits, item_at, last, meta, lut,
    grid, acc, size_all, seen, cur, oldest,
):  # fmt: skip
    """Feed requests into the pass. Mixed sizes: ``tree`` is a Fenwick tree over the slots,
    marked with bytes. One size (rows): a bit per slot in ``bits`` and ``tree`` over blocks of
    64 slots, so a distance is a walk over ``M / 64`` blocks and one popcount instead of a
    walk over ``M`` slots (the same counts: the marks above a slot)."""
    m = item_at.shape[0]
    n_grid = grid.shape[0]
    n_lut = lut.shape[0]
    total = meta[0]
    pos = meta[1]
    w = meta[2]
    sized = sizes.shape[0] > 0  # else every access is ``size_all`` bytes
    forgets = seen.shape[0] > 0
    for j in range(offs.shape[0] - 1):
        r = r0 + j
        while edges[w + 1] <= r:
            w += 1
        for t in range(offs[j], offs[j + 1]):
            x = ids[t]
            b = sizes[t] if sized else size_all  # streamed beside the key: no load of kb[x]
            if b > max_b:  # never cached at this class's capacities (module docstring)
                continue
            wt = b if weighted else 1
            p = last[x]
            if forgets:
                if p >= 0 and seen[x] < oldest:  # last seen before the windows remembered
                    if weighted:
                        fw_add(tree, m, p, -wt)
                    else:
                        _rows_flip(tree, bits, p, -1)
                    item_at[p] = -1
                    total -= wt
                    p = -1
                seen[x] = cur
            if p < 0:
                acc[w, n_grid] += b
            else:
                if weighted:
                    d = total - fw_prefix(tree, p) + wt  # everything above x, plus x itself
                    k = grid_bin(grid, d)
                    fw_add(tree, m, p, -wt)
                else:
                    d = _rows_above(tree, bits, total, p) + 1
                    k = lut[d] if d < n_lut else n_grid  # beyond the largest: a miss everywhere
                    _rows_flip(tree, bits, p, -1)
                acc[w, k] += b
                item_at[p] = -1
                total -= wt
            if pos == m:
                if weighted:
                    pos = compact(tree, item_at, last, pos, m, kb)
                else:
                    pos = compact_rows(tree, bits, item_at, last, pos)
            if weighted:
                fw_add(tree, m, pos, wt)
            else:
                _rows_flip(tree, bits, pos, 1)
            item_at[pos] = x
            last[x] = pos
            pos += 1
            total += wt
    meta[0] = total
    meta[1] = pos
    meta[2] = w


@nb.njit(cache=True)
def _distances_kernel(ids, n_ids, kb, out):
    m = 2 * n_ids + 16
    tree = np.zeros(m + 1, np.int64)
    item_at = np.full(m, -1, np.int32)
    last = np.full(n_ids, -1, np.int32)
    total = 0
    pos = 0
    for t in range(ids.shape[0]):
        x = ids[t]
        b = kb[x]
        p = last[x]
        if p >= 0:
            out[t] = total - fw_prefix(tree, p) + b
            fw_add(tree, m, p, -b)
            item_at[p] = -1
            total -= b
        if pos == m:
            pos = compact(tree, item_at, last, pos, m, kb)
        fw_add(tree, m, pos, b)
        item_at[pos] = x
        last[x] = pos
        pos += 1
        total += b
