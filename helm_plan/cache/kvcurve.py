"""KV token-reuse curves: byte-weighted stack distances over users, plus an exact fallback.

The KV cache is a variable-size LRU over users (DESIGN.md, Node model): a
user's entry is its context length ``L`` tokens; on each request the old
entry is dropped, the reuse is its ``c`` tokens if it is still a prefix of the
current history (the ``max_seq_len`` window did not slide), and the user is
re-inserted with ``L`` tokens, evicting LRU users, unless ``L`` exceeds the
whole capacity.

**One-pass distance.** For request ``i`` of user ``u`` whose previous request
was ``i'``, let ``D_i`` be the sum of the *current* sizes (context length at
their latest access) of the distinct users served in ``(i', i)``, and
``d_i = D_i + L_{i'}``. The reuse at capacity ``C`` tokens is ``c_i`` if
``d_i <= C`` and 0 otherwise, where ``c_i = L_{i'}`` when the prefix is still
valid. Users' sizes never shrink, so the footprint above ``u`` only grows
and ``u`` survives until ``i`` iff it fits at ``i - 1``: this is **exact for
every C >= the largest context length in the trace** (no user is ever too
large to cache).

Below that, the "a user larger than the whole capacity is not cached" rule
breaks the stack property: such a user *leaves* the cache, which can let an
older user survive at a small capacity and not at a larger one, so no single
distance per request exists. :func:`kv_reuse_exact` therefore replays the KV
LRU itself at the capacities below the largest context (the curve builder
does this), in one compiled loop per capacity, parallel over capacities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from helm_plan.arrays import TraceArrays
from helm_plan.cache._kernels import kv_access
from helm_plan.errors import ConfigError


@dataclass(frozen=True)
class KvDistances:
    """Per-request byte-weighted (token-weighted) LRU stack distances of the KV cache."""

    dist_tokens: np.ndarray
    """d_i: capacity in tokens from which the request reuses its prefix, int64 (-1: user's first request)."""
    reuse_tokens: np.ndarray
    """c_i: tokens reused on a hit (0 if the prefix slid or the previous context was empty), int64."""
    ctx_len: np.ndarray
    """Context length L per request (history capped at max_seq_len), int64."""

    @property
    def exact_from_tokens(self) -> int:
        """Smallest capacity (tokens) from which the one-pass curve is exact."""
        return int(self.ctx_len.max()) if len(self.ctx_len) else 0

    def reused_at(self, kv_tokens: int) -> int:
        """One-pass reused tokens over the whole trace at ``kv_tokens`` (exact if >= exact_from_tokens)."""
        hit = (self.dist_tokens >= 0) & (self.dist_tokens <= kv_tokens)
        return int(self.reuse_tokens[hit].sum())


def kv_distances(arrays: TraceArrays, *, max_seq_len: int) -> KvDistances:
    """One pass over the requests with a Fenwick tree weighted by users' current sizes."""
    if max_seq_len <= 0:
        raise ConfigError(f"max_seq_len must be positive, got {max_seq_len}")
    n = arrays.n_requests
    dist = np.empty(n, np.int64)
    reuse = np.empty(n, np.int64)
    ctx = np.empty(n, np.int64)
    _kv_dist_kernel(arrays.user, arrays.hist_end, max_seq_len, arrays.n_users, dist, reuse, ctx)
    return KvDistances(dist, reuse, ctx)


def binned_reuse(
    kd: KvDistances, grid_tokens: np.ndarray, request_window: np.ndarray, n_windows: int
) -> tuple[np.ndarray, np.ndarray]:
    """One-pass reused tokens at each capacity of sorted ``grid_tokens``, per window.

    Returns (reused int64 [n_windows, len(grid)], context tokens int64 [n_windows]).
    """
    grid = np.asarray(grid_tokens, np.int64)
    win = np.asarray(request_window, np.int64)
    ng = len(grid)
    b = np.where(kd.dist_tokens >= 0, np.searchsorted(grid, kd.dist_tokens, side="left"), ng)
    acc = np.bincount(win * (ng + 1) + b, weights=kd.reuse_tokens, minlength=n_windows * (ng + 1))
    acc = np.rint(acc).astype(np.int64).reshape(n_windows, ng + 1)
    ctx = np.bincount(win, weights=kd.ctx_len, minlength=n_windows)
    return np.cumsum(acc[:, :ng], axis=1), np.rint(ctx).astype(np.int64)


def kv_reuse_exact(
    arrays: TraceArrays,
    kv_tokens: np.ndarray | list[int],
    *,
    max_seq_len: int,
    request_window: np.ndarray | None = None,
    n_windows: int = 1,
) -> np.ndarray:
    """Reused tokens per window from replaying the KV LRU at each capacity (exact).

    Same rules as ``core.replay`` with EMB capacity 0, cold start. Returns
    int64 [len(kv_tokens), n_windows].
    """
    if max_seq_len <= 0:
        raise ConfigError(f"max_seq_len must be positive, got {max_seq_len}")
    caps = np.ascontiguousarray(kv_tokens, np.int64)
    if len(caps) and caps.min() < 0:
        raise ConfigError("kv_tokens must be >= 0")
    if request_window is None:
        request_window = np.zeros(arrays.n_requests, np.int32)
        n_windows = 1
    win = np.ascontiguousarray(request_window, np.int32)
    out = np.zeros((len(caps), n_windows), np.int64)
    _kv_multi_kernel(arrays.user, arrays.hist_end, max_seq_len, arrays.n_users, win, caps, out)
    return out


# ---------------------------------------------------------------- compiled kernels


@nb.njit(cache=True)
def _kv_dist_kernel(user, hist_end, max_seq_len, n_users, dist, reuse, ctx):
    n = user.shape[0]
    tree = np.zeros(n + 1, np.int64)
    last = np.full(n_users, -1, np.int64)
    size = np.zeros(n_users, np.int64)
    start = np.zeros(n_users, np.int64)
    total = 0
    for i in range(n):
        u = user[i]
        full = hist_end[i]
        L = full if full < max_seq_len else max_seq_len
        s0 = full - L
        ctx[i] = L
        p = last[u]
        if p >= 0:
            s = 0
            k = p + 1
            while k > 0:
                s += tree[k]
                k -= k & (-k)
            dist[i] = total - s + size[u]
            reuse[i] = size[u] if start[u] == s0 else 0
            k = p + 1
            while k <= n:
                tree[k] -= size[u]
                k += k & (-k)
            total -= size[u]
        else:
            dist[i] = -1
            reuse[i] = 0
        k = i + 1
        while k <= n:
            tree[k] += L
            k += k & (-k)
        total += L
        last[u] = i
        size[u] = L
        start[u] = s0


@nb.njit(cache=True)
def _kv_one(user, hist_end, max_seq_len, n_users, win, cap, out_row):
    """The KV half of the core replay (EMB capacity 0) at one capacity."""
    prev = np.full(n_users, -1, np.int32)
    nxt = np.full(n_users, -1, np.int32)
    klen = np.full(n_users, -1, np.int64)
    kstart = np.zeros(n_users, np.int64)
    meta = np.array([-1, -1, 0, cap], np.int64)
    for i in range(user.shape[0]):
        full = hist_end[i]
        L = full if full < max_seq_len else max_seq_len
        out_row[win[i]] += kv_access(prev, nxt, klen, kstart, meta, user[i], L, full - L)


@nb.njit(cache=True, parallel=True)
def _kv_multi_kernel(user, hist_end, max_seq_len, n_users, win, caps, out):
    for j in nb.prange(caps.shape[0]):
        _kv_one(user, hist_end, max_seq_len, n_users, win, caps[j], out[j])
