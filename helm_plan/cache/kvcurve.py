"""KV token-reuse curves: one pass of token-weighted LRU distances, plus an exact fallback.

The KV cache is a variable-size LRU over users (``core.replay``): on each
request the user's entry is dropped, the reuse is its ``c`` tokens if it
still starts where the new context starts (``_kernels.context``: the start
moves in chunks of ``kv_slide_chunk`` past ``max_seq_len``), and the user is
re-inserted with its context of ``L`` tokens, evicting LRU users, unless the
next token would move the start (``_kernels.kv_admit``) or ``L`` exceeds the
whole capacity. This module calls those same functions.

**One-pass distance.** Take request ``i`` of user ``u`` whose previous
request ``i'`` inserted ``L'`` tokens. While ``u`` is cached, every user
served after ``i'`` sits above it, so ``u`` is evicted at a later request
``j`` iff ``L' + F(j) > C``, where ``F(j)`` is the total current size of the
distinct users served in ``(i', j]`` (0 for one not admitted): eviction
empties everything below ``u`` first. Hence ``u`` still holds its tokens at
``i`` iff ``d_i = L' + max_{i' < j < i} F(j) <= C`` (``F`` taken as 0 when
``j`` ranges over nothing). Sizes shrink (the chunked slide shortens a
context, a user not admitted drops to 0), so ``F`` is not monotone and the
maximum matters. The pass keeps, per cached user, ``F`` and its running
maximum in a segment tree over access slots with lazy (add, max-prefix-add)
tags: a request adds ``-size`` to the slots below the user's old slot and
``+L`` to every slot below its new one, and reads its own slot's maximum.
This is **exact for every C >= the largest admitted context** (every user
that is admitted fits).

Below that, "a context larger than the capacity is not cached" removes a
user that a larger cache keeps, so no single distance exists;
:func:`kv_reuse_exact` replays the KV LRU at those capacities (the curve
builder does this), one compiled loop per capacity, parallel over capacities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from helm_plan.cache import _kernels as K
from helm_plan.cache.core import Workload
from helm_plan.cache.stack import grid_bin
from helm_plan.errors import ConfigError


@dataclass(frozen=True)
class KvDistances:
    """Per-request token-weighted LRU distances of the KV cache."""

    dist_tokens: np.ndarray
    """d_i: smallest capacity (tokens) at which the request still finds its KV, int64 (-1: none cached)."""
    reuse_tokens: np.ndarray
    """c_i: tokens reused when found (0 if the context start moved), int64."""
    ctx_len: np.ndarray
    """Context length L per request (chunked slide past max_seq_len), int64."""
    exact_from_tokens: int
    """Largest admitted context: the one-pass curve is exact from this capacity up."""

    def reused_at(self, kv_tokens: int) -> int:
        """One-pass reused tokens over the whole trace at ``kv_tokens`` (exact if >= exact_from_tokens)."""
        hit = (self.dist_tokens >= 0) & (self.dist_tokens <= kv_tokens)
        return int(self.reuse_tokens[hit].sum())


def kv_distances(wl: Workload) -> KvDistances:
    """One pass over the requests (segment tree of running maxima, module docstring)."""
    return KvFeed(wl).feed(np.arange(wl.arrays.n_requests, dtype=np.int64))


class KvFeed:
    """The one-pass distances of a subsequence of requests fed in order, window by window.

    A cluster node's KV cache sees only its own requests, so its distances are those of its
    own request sequence: :meth:`feed` carries the pass's state (the segment tree, each
    user's slot and context) from one call to the next. Fed every request of the trace in
    order it is :func:`kv_distances`.
    """

    def __init__(self, wl: Workload) -> None:
        a = wl.arrays
        self.wl = wl
        m = 2 * a.n_users + 16
        levels = 1
        while (1 << levels) < m:
            levels += 1
        size = 1 << levels
        self._ta = np.zeros(2 * size, np.int64)
        self._tm = np.zeros(2 * size, np.int64)
        self._user_at = np.full(size, -1, np.int32)
        self._last = np.full(a.n_users, -1, np.int64)
        self._length = np.zeros(a.n_users, np.int64)
        self._start = np.zeros(a.n_users, np.int64)
        self._st = np.array([0, 0, size, levels], np.int64)  # pos, largest admitted L, size, levels
        self._top = -1

    @property
    def exact_from_tokens(self) -> int:
        """Largest admitted context so far: the distances are exact from this capacity up."""
        return int(self._st[1])

    def feed(self, requests: np.ndarray) -> KvDistances:
        """Distances of ``requests`` (ascending trace indices, after every earlier feed)."""
        idx = np.ascontiguousarray(requests, np.int64)
        if len(idx) and (idx[0] <= self._top or np.any(np.diff(idx) <= 0)):
            raise ConfigError(
                "KV distances are fed requests in ascending order, each once",
                hint="feed each window's requests after the previous window's",
            )
        n = len(idx)
        dist = np.empty(n, np.int64)
        reuse = np.empty(n, np.int64)
        ctx = np.empty(n, np.int64)
        a, wl = self.wl.arrays, self.wl
        _kv_dist_kernel(a.user, a.hist_end, wl.max_seq_len, wl.kv_slide_chunk, idx,
                        self._ta, self._tm, self._user_at, self._last, self._length,
                        self._start, self._st, dist, reuse, ctx)  # fmt: skip
        if n:
            self._top = int(idx[-1])
        return KvDistances(dist, reuse, ctx, self.exact_from_tokens)


def binned_reuse(
    kd: KvDistances, grid_tokens: np.ndarray, edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One-pass reused tokens at each capacity of sorted ``grid_tokens``, per window.

    ``edges`` are the window bounds in requests. Returns (reused int64
    [n_windows, len(grid)], context tokens int64 [n_windows]).
    """
    grid = np.ascontiguousarray(grid_tokens, np.int64)
    n_win = len(edges) - 1
    acc = np.zeros((n_win, len(grid)), np.int64)
    ctx = np.zeros(n_win, np.int64)
    # compiled, one pass: the vectorised form held three per-request int64 temporaries
    _bin_reuse(kd.dist_tokens, kd.reuse_tokens, kd.ctx_len, grid,
               np.ascontiguousarray(edges, np.int64), acc, ctx)  # fmt: skip
    return np.cumsum(acc, axis=1), ctx


@nb.njit(cache=True)
def _bin_reuse(dist, reuse, ctx_len, grid, edges, acc, ctx):
    # request i's reuse counts at every capacity >= d_i: binned at the first such grid point
    ng = grid.shape[0]
    for w in range(edges.shape[0] - 1):
        for i in range(edges[w], edges[w + 1]):
            ctx[w] += ctx_len[i]
            d = dist[i]
            if d >= 0:
                b = grid_bin(grid, d)  # np.searchsorted's: its generic impl compiled ~0.3 s
                if b < ng:
                    acc[w, b] += reuse[i]


def kv_reuse_exact(
    wl: Workload, kv_tokens: np.ndarray | list[int], edges: np.ndarray | None = None
) -> np.ndarray:
    """Reused tokens per window from replaying the KV LRU at each capacity (exact).

    Same rules as ``core.kv_pass`` (cold start). Returns int64
    [len(kv_tokens), n_windows].
    """
    a = wl.arrays
    caps = np.ascontiguousarray(kv_tokens, np.int64)
    if len(caps) and caps.min() < 0:
        raise ConfigError("kv_tokens must be >= 0", hint="pass capacities in tokens")
    if edges is None:
        edges = np.array([0, a.n_requests], np.int64)
    n_win = len(edges) - 1
    win = np.repeat(np.arange(n_win, dtype=np.int32), np.diff(edges))
    out = np.zeros((len(caps), n_win), np.int64)
    _kv_multi_kernel(
        a.user, a.hist_end, wl.max_seq_len, wl.kv_slide_chunk, a.n_users, win, caps, out
    )
    return out


# ---------------------------------------------------------------- compiled kernels
# A tag (a, m) on a node means: the values below were all shifted by a, and their
# running maxima by m (the largest prefix sum of the shifts, >= max(a, 0)). A leaf's
# tag is its own (F, max F) since the slot was created.
# The tree helpers are separate compiled functions that LLVM inlines: as numba-level inlines
# (inline="always") _kv_dist_kernel typed a dozen copies of _apply, a quarter of its compile
# on a fresh install (1.4 s of CPU; now 0.95 s; kv_distances' run time within noise).


@nb.njit(cache=True)
def _apply(ta, tm, node, a, mx):
    v = ta[node] + mx
    if v > tm[node]:
        tm[node] = v
    ta[node] += a


@nb.njit(cache=True)
def _push(ta, tm, node):
    a = ta[node]
    mx = tm[node]
    if a != 0 or mx != 0:
        _apply(ta, tm, 2 * node, a, mx)
        _apply(ta, tm, 2 * node + 1, a, mx)
        ta[node] = 0
        tm[node] = 0


@nb.njit(cache=True)
def _prefix_add(ta, tm, size, r, v):
    """Add v to the slots 0..r-1."""
    mx = v if v > 0 else 0
    node = np.int64(1)  # not a literal: _push and _apply compile once
    lo = 0
    hi = size
    while True:
        if r >= hi:
            _apply(ta, tm, node, v, mx)
            return
        if r <= lo:
            return
        _push(ta, tm, node)
        mid = (lo + hi) >> 1
        if r >= mid:
            _apply(ta, tm, 2 * node, v, mx)
            node = 2 * node + 1
            lo = mid
        else:
            node = 2 * node
            hi = mid


@nb.njit(cache=True)
def _leaf(ta, tm, size, levels, p):
    """Push every tag above slot p down to it; returns its node."""
    node = np.int64(1)
    for b in range(levels - 1, -1, -1):
        _push(ta, tm, node)
        node = 2 * node + ((p >> b) & 1)
    return node


@nb.njit(cache=True)
def _compact(ta, tm, size, user_at, last, pos):
    """Renumber live slots to 0..live-1 in order, keeping each leaf's (F, max F)."""
    for node in range(1, size):
        _push(ta, tm, node)
    k = 0
    for p in range(pos):
        u = user_at[p]
        if u >= 0:
            ta[size + k] = ta[size + p]
            tm[size + k] = tm[size + p]
            user_at[k] = u
            last[u] = k
            k += 1
    for p in range(k, size):
        ta[size + p] = 0
        tm[size + p] = 0
        user_at[p] = -1
    return k


@nb.njit(cache=True)
def _kv_dist_kernel(user, hist_end, max_seq_len, chunk, idx, ta, tm, user_at, last, length,
                    start, st, dist, reuse, ctx):  # fmt: skip
    pos, lmax, size, levels = st[0], st[1], st[2], st[3]
    for j in range(idx.shape[0]):
        i = idx[j]
        u = user[i]
        full = hist_end[i]
        s0, L = K.context(full, max_seq_len, chunk)
        ctx[j] = L
        p = last[u]
        if p >= 0:
            leaf = _leaf(ta, tm, size, levels, p)
            dist[j] = length[u] + tm[leaf]
            reuse[j] = length[u] if start[u] == s0 else 0
            _prefix_add(ta, tm, size, p, -length[u])  # u no longer sits above the slots below
            user_at[p] = -1
            last[u] = -1
        else:
            dist[j] = -1
            reuse[j] = 0
        if K.kv_admit(full, s0, max_seq_len) and L > 0:
            if pos == size:
                pos = _compact(ta, tm, size, user_at, last, pos)
            _prefix_add(ta, tm, size, pos, L)  # u now sits above every slot below
            leaf = _leaf(ta, tm, size, levels, pos)
            ta[leaf] = 0
            tm[leaf] = 0
            user_at[pos] = u
            last[u] = pos
            length[u] = L
            start[u] = s0
            pos += 1
            if lmax < L:
                lmax = L
    st[0] = pos
    st[1] = lmax


@nb.njit(cache=True)
def _kv_one(user, hist_end, max_seq_len, chunk, n_users, win, cap, out_row):
    """The KV half of the core replay (EMB capacity 0) at one capacity."""
    prev = np.full(n_users, -1, np.int32)
    nxt = np.full(n_users, -1, np.int32)
    klen = np.full(n_users, -1, np.int64)
    kstart = np.zeros(n_users, np.int64)
    meta = np.array([-1, -1, 0, cap], np.int64)
    for i in range(user.shape[0]):
        full = hist_end[i]
        s0, L = K.context(full, max_seq_len, chunk)
        admit = K.kv_admit(full, s0, max_seq_len)
        out_row[win[i]] += K.kv_access(prev, nxt, klen, kstart, meta, user[i], L, s0, admit)


@nb.njit(cache=True, parallel=True)
def _kv_multi_kernel(user, hist_end, max_seq_len, chunk, n_users, win, caps, out):
    for j in nb.prange(caps.shape[0]):
        _kv_one(user, hist_end, max_seq_len, chunk, n_users, win, caps[j], out[j])
