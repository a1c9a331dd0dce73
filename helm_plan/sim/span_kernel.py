"""A fast cold-start replay for the oracle's inner loop, exactly equal to ``core.replay``.

The oracle simulates every candidate ratio from cold caches over a short
span, so it never needs the linked-list state that :mod:`helm_plan.cache.core`
keeps for resizing and carrying caches across windows. This kernel uses the
same KV logic (per-user LRU with prefix reuse, per request) but a cheaper
exact EMB LRU, since EMB lookups (history tokens + candidates) dominate:

- ``last[item]`` holds the clock of the item's last access (-1: not resident);
- every access appends ``(item, clock)`` to a queue;
- eviction pops the queue front until an entry is still current
  (``last[item] == clock``): that item is the least recently used one.

A hit is one random write plus an append instead of a four-pointer
move-to-front. The queue is compacted when full (amortised O(1)). Eviction
order is exactly LRU, so misses equal ``core.replay``'s (tested).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.arrays import TraceArrays


def cold_replay(
    arrays: TraceArrays, emb_rows: int, kv_tokens: int, start: int, stop: int, max_seq_len: int
) -> np.ndarray:
    """Replay ``[start, stop)`` from cold caches; returns int64 (5, n): computed, reused, L, lookups, misses."""
    out = np.zeros((5, stop - start), np.int64)
    bound = int(arrays.cand_offsets[stop] - arrays.cand_offsets[start])
    bound += int(np.minimum(arrays.hist_end[start:stop], max_seq_len).sum())
    if bound >= 2**31 - 1:  # the int32 clock could wrap: use the reference core
        from helm_plan.cache import core

        st = core.CacheState.empty(arrays.n_items, arrays.n_users, emb_rows, kv_tokens)
        r = core.replay(arrays, st, start, stop, max_seq_len=max_seq_len)
        return np.stack([r.n_computed, r.n_reused, r.ctx_len, r.n_lookup, r.n_miss])
    q = 2 * min(max(emb_rows, 0), arrays.n_items) + 1024
    _cold(
        arrays.user, arrays.hist_end, arrays.user_hist_offsets, arrays.hist_values,
        arrays.cand_offsets, arrays.cand_values, start, stop, max_seq_len,
        arrays.n_items, arrays.n_users, emb_rows, kv_tokens, q, out,
    )  # fmt: skip
    return out


@nb.njit(cache=True)
def _compact(qi, qt, head, tail, last):
    """Keep the queue entries that are still current, in order; returns the new tail."""
    w = 0
    for k in range(head, tail):
        j = qi[k]
        if last[j] == qt[k]:
            qi[w] = j
            qt[w] = qt[k]
            w += 1
    return w


@nb.njit(cache=True)
def _cold(
    user, hist_end, uoff, hist, coff, cvals, start, stop, max_seq_len,
    n_items, n_users, emb_cap, kv_cap, qsize, out,
):  # fmt: skip
    last = np.full(n_items, -1, np.int32)
    qi = np.empty(qsize, np.int32)
    qt = np.empty(qsize, np.int32)
    head = 0
    tail = 0
    used = 0
    clk = 0
    # KV: per-user LRU list (prev/next), as in helm_plan.cache.core
    k_prev = np.full(n_users, -1, np.int32)
    k_next = np.full(n_users, -1, np.int32)
    k_len = np.full(n_users, -1, np.int64)
    k_start = np.zeros(n_users, np.int64)
    k_head = -1
    k_tail = -1
    k_used = 0
    for i in range(start, stop):
        j = i - start
        u = user[i]
        full = hist_end[i]
        L = full if full < max_seq_len else max_seq_len
        s0 = full - L
        c = 0
        if k_len[u] >= 0:
            if k_start[u] == s0:
                c = k_len[u]
            p = k_prev[u]
            nx = k_next[u]
            if p >= 0:
                k_next[p] = nx
            else:
                k_head = nx
            if nx >= 0:
                k_prev[nx] = p
            else:
                k_tail = p
            k_prev[u] = -1
            k_next[u] = -1
            k_used -= k_len[u]
            k_len[u] = -1
        n = L - c
        if L > 0 and kv_cap >= L:
            while k_used + L > kv_cap:
                t = k_tail
                p = k_prev[t]
                if p >= 0:
                    k_next[p] = -1
                else:
                    k_head = -1
                k_tail = p
                k_prev[t] = -1
                k_used -= k_len[t]
                k_len[t] = -1
            k_prev[u] = -1
            k_next[u] = k_head
            if k_head >= 0:
                k_prev[k_head] = u
            else:
                k_tail = u
            k_head = u
            k_len[u] = L
            k_start[u] = s0
            k_used += L
        miss = 0
        base = uoff[u] + full
        m = coff[i + 1] - coff[i]
        for x in range(n + m):
            it = hist[base - n + x] if x < n else cvals[coff[i] + x - n]
            clk += 1
            if last[it] >= 0:
                last[it] = clk
                if tail == qsize:
                    tail = _compact(qi, qt, head, tail, last)
                    head = 0
                qi[tail] = it
                qt[tail] = clk
                tail += 1
                continue
            miss += 1
            if emb_cap > 0:
                if used >= emb_cap:
                    while True:
                        e = qi[head]
                        te = qt[head]
                        head += 1
                        if last[e] == te:
                            last[e] = -1
                            used -= 1
                            break
                last[it] = clk
                used += 1
                if tail == qsize:
                    tail = _compact(qi, qt, head, tail, last)
                    head = 0
                qi[tail] = it
                qt[tail] = clk
                tail += 1
        out[0, j] = n
        out[1, j] = c
        out[2, j] = L
        out[3, j] = n + m
        out[4, j] = miss
