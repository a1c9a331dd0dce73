"""Compiled kernels of the cache core (see :mod:`helm_plan.cache.core` for the model).

KV is a doubly linked LRU list over users (``prev``/``next``, -1 for none).
EMB is a log-structured LRU: ``last[item]`` is the clock of the item's latest
access (-1: not resident) and the queue ``(qi, qt)`` logs every access; the
LRU row is the first queue entry still current (``last[qi] == qt``).
"""

from __future__ import annotations

import numba as nb
import numpy as np

# KV meta: [head (MRU), tail (LRU), tokens used, capacity tokens]
# EMB meta: [queue head, queue tail, rows used, capacity rows, clock]
HEAD, TAIL, USED, CAP = 0, 1, 2, 3
QH, QT, CLK = 0, 1, 4


@nb.njit(cache=True, inline="always")
def unlink(prev, nxt, meta, i):
    p = prev[i]
    q = nxt[i]
    if p >= 0:
        nxt[p] = q
    else:
        meta[HEAD] = q
    if q >= 0:
        prev[q] = p
    else:
        meta[TAIL] = p
    prev[i] = -1
    nxt[i] = -1


@nb.njit(cache=True, inline="always")
def push_head(prev, nxt, meta, i):
    h = meta[HEAD]
    prev[i] = -1
    nxt[i] = h
    if h >= 0:
        prev[h] = i
    else:
        meta[TAIL] = i
    meta[HEAD] = i


# The EMB helpers pass the log cursor (queue head/tail, rows used, clock) as
# locals rather than through ``emb_meta``: kept in registers, they make the
# per-lookup path several times faster than loads and stores through an array.


@nb.njit(cache=True)
def _log_compact(last, qi, qt, qh, qtl):
    """Drop stale log entries, keeping the current ones in order; returns the new tail."""
    w = 0
    for k in range(qh, qtl):
        j = qi[k]
        if last[j] == qt[k]:
            qi[w] = j
            qt[w] = qt[k]
            w += 1
    return w


@nb.njit(cache=True, inline="always")
def _log_append(last, qi, qt, qh, qtl, clk, it):
    if qtl == qi.shape[0]:
        qtl = _log_compact(last, qi, qt, qh, qtl)
        qh = 0
    clk += 1
    qi[qtl] = it
    qt[qtl] = clk
    last[it] = clk
    return qh, qtl + 1, clk


@nb.njit(cache=True, inline="always")
def _log_evict_lru(last, qi, qt, qh):
    while last[qi[qh]] != qt[qh]:
        qh += 1
    last[qi[qh]] = -1
    return qh + 1


@nb.njit(cache=True)
def emb_compact(last, qi, qt, meta):
    meta[QT] = _log_compact(last, qi, qt, meta[QH], meta[QT])
    meta[QH] = 0


@nb.njit(cache=True)
def emb_shrink(last, qi, qt, meta):
    ev = 0
    while meta[USED] > meta[CAP]:
        meta[QH] = _log_evict_lru(last, qi, qt, meta[QH])
        meta[USED] -= 1
        ev += 1
    return ev


@nb.njit(cache=True)
def emb_order(last, qi, qt, meta):
    out = np.empty(meta[USED], np.int64)
    k = 0
    for p in range(meta[QT] - 1, meta[QH] - 1, -1):
        if last[qi[p]] == qt[p]:
            out[k] = qi[p]
            k += 1
    return out[:k]


@nb.njit(cache=True)
def kv_shrink(prev, nxt, kv_len, meta):
    ev = 0
    while meta[USED] > meta[CAP]:
        t = meta[TAIL]
        unlink(prev, nxt, meta, t)
        meta[USED] -= kv_len[t]
        kv_len[t] = -1
        ev += 1
    return ev


@nb.njit(cache=True, inline="always")
def kv_access(prev, nxt, klen, kstart, meta, u, L, s0):
    """User ``u`` arrives with context ``L`` starting at history offset ``s0``.

    Returns the reused prefix tokens; afterwards ``u`` holds ``L`` tokens at
    MRU (evicting LRU users), or nothing if ``L`` exceeds the whole capacity.
    """
    c = 0
    if klen[u] >= 0:
        if kstart[u] == s0:  # still a prefix: the max_seq_len window has not slid
            c = klen[u]
        unlink(prev, nxt, meta, u)
        meta[USED] -= klen[u]
        klen[u] = -1
    if L > 0 and meta[CAP] >= L:
        while meta[USED] + L > meta[CAP]:
            t = meta[TAIL]
            unlink(prev, nxt, meta, t)
            meta[USED] -= klen[t]
            klen[t] = -1
        push_head(prev, nxt, meta, u)
        klen[u] = L
        kstart[u] = s0
        meta[USED] += L
    return c


@nb.njit(cache=True)
def replay(
    ts, user, hist_end, uoff, hist, coff, cvals, start, stop, max_seq_len,
    e_last, e_qi, e_qt, e_meta, k_prev, k_next, k_len, k_start, k_meta,
    pf_rows, pf_t, counts, out,
):  # fmt: skip
    count = counts.shape[0] > 0
    qh, qtl, used, cap, clk = e_meta[QH], e_meta[QT], e_meta[USED], e_meta[CAP], e_meta[CLK]
    pf = 0
    pf_done = 0
    npf = pf_rows.shape[0]
    for i in range(start, stop):
        # Refill: rows whose background copy has landed fill free space only.
        while pf < npf and pf_t[pf] <= ts[i]:
            r = pf_rows[pf]
            pf += 1
            if e_last[r] < 0 and used < cap:
                qh, qtl, clk = _log_append(e_last, e_qi, e_qt, qh, qtl, clk, r)
                used += 1
                pf_done += 1
        j = i - start
        u = user[i]
        full = hist_end[i]
        L = full if full < max_seq_len else max_seq_len
        s0 = full - L
        c = kv_access(k_prev, k_next, k_len, k_start, k_meta, u, L, s0)
        n = L - c
        miss = 0
        base = uoff[u] + full
        if cap == 0 and used == 0 and not count:
            # Fast path (same result): an empty zero-capacity EMB cache misses every lookup.
            miss = n + coff[i + 1] - coff[i]
        else:
            # One loop over the n computed history tokens, then the candidates.
            m_c = coff[i + 1] - coff[i]
            for x in range(n + m_c):
                it = hist[base - n + x] if x < n else cvals[coff[i] + x - n]
                if count:
                    counts[it] += 1
                if e_last[it] >= 0:  # hit: move to MRU by appending to the log
                    qh, qtl, clk = _log_append(e_last, e_qi, e_qt, qh, qtl, clk, it)
                    continue
                miss += 1  # miss: insert, evicting the LRU row when full
                if cap > 0:
                    if used >= cap:
                        qh = _log_evict_lru(e_last, e_qi, e_qt, qh)
                        used -= 1
                    qh, qtl, clk = _log_append(e_last, e_qi, e_qt, qh, qtl, clk, it)
                    used += 1
        out[0, j] = n
        out[1, j] = c
        out[2, j] = L
        out[3, j] = n + coff[i + 1] - coff[i]
        out[4, j] = miss
    e_meta[QH], e_meta[QT], e_meta[USED], e_meta[CLK] = qh, qtl, used, clk
    return pf_done


@nb.njit(cache=True)
def fill_stream(user, hist_end, uoff, hist, coff, cvals, start, n_computed, offs, ids):
    for j in range(n_computed.shape[0]):
        i = start + j
        base = uoff[user[i]] + hist_end[i]
        w = offs[j]
        for p in range(base - n_computed[j], base):
            ids[w] = hist[p]
            w += 1
        for p in range(coff[i], coff[i + 1]):
            ids[w] = cvals[p]
            w += 1


@nb.njit(cache=True)
def walk(nxt, head, n):
    out = np.empty(n, np.int64)
    cur = head
    k = 0
    while cur >= 0 and k < n:
        out[k] = cur
        cur = nxt[cur]
        k += 1
    return out[:k]
