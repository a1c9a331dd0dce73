"""Compiled kernels of the cache core (see :mod:`helm_plan.cache.core` for the model).

KV is a doubly linked LRU list over users (``prev``/``next``, -1 for none).
EMB is an LRU over dense (table, row) keys with a byte capacity: ``last[key]``
is the stamp of the key's latest access (-1: not resident), ordered by an access
log only while the cache evicts (:mod:`helm_plan.cache._emblog`).

Implicit candidates are drawn here, request by request, from the global
interaction stream up to the request (its own new items are interactions
that already happened; nothing later is read): candidate ``k`` of request
``i`` is a uniform pick among the last ``window`` tokens, with the position
from a counter-based RNG keyed by ``(seed, i, k)``, so any replay span draws
the same ids. Before the first token there is nothing to draw from, and such
a candidate looks nothing up.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan._hash import counter_hash
from helm_plan.cache._emblog import (  # noqa: F401  (the EMB LRU's names, re-exported)
    CLK,
    QE,
    QH,
    QT,
    STAMP_LIMIT,
    TL,
    emb_order,
    emb_shrink,
    make_room,
    renumber,
    touch,
)

# KV meta: [head (MRU), tail (LRU), tokens used, capacity tokens]
# EMB meta (helm_plan.cache._emblog): [snapshot head, next stamp, bytes used, capacity bytes,
# accesses, snapshot end, keys touched since the snapshot]
HEAD, TAIL, USED, CAP = 0, 1, 2, 3

# Rows of the per-request output of ``replay``.
OUT_COMPUTED, OUT_REUSED, OUT_CTX, OUT_CAND, OUT_LOOKUP_B, OUT_MISS_B, OUT_MISS = range(7)
N_OUT = 7


@nb.njit(cache=True, inline="always")
def draw_position(seed, i, k, tok_off, window):
    """Index in the token stream of implicit candidate ``k`` of request ``i``; -1 before any token."""
    hi = tok_off[i + 1]
    span = hi if hi < window else window
    if span == 0:
        return np.int64(-1)
    z = counter_hash(seed, i, k)
    # multiply-shift: the top 32 bits of a uniform 32-bit draw times span, exactly uniform
    # enough for span < 2^32 and cheaper than a float conversion
    pick = ((z >> np.uint64(32)) * np.uint64(span)) >> np.uint64(32)
    return hi - 1 - np.int64(pick)


def new_ring(window: int, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The token ring a replay draws implicit candidates from, and its fill mark.

    Its length is a power of two no shorter than ``min(window, n_tokens)``, so
    it holds every position a draw can reach (4 bytes a slot: 512 KiB at the
    default 100k-token window). The mark ``[0]`` is the stream position it is filled
    up to (exclusive); 0 with nothing filled. One ring per replay in flight:
    threads must not share one.
    """
    need = max(1, min(int(window), int(n_tokens)))
    return np.zeros(1 << (need - 1).bit_length(), np.int32), np.zeros(1, np.int64)


@nb.njit(cache=True, inline="always")
def _request_at(p, i, tok_off):
    """The request ``j <= i`` whose new tokens hold stream position ``p < tok_off[i + 1]``.

    Galloping back from ``i`` (positions sought lie close behind it), then bisecting
    for the last request starting at or before ``p``; requests that add nothing
    (flat runs of ``tok_off``) are skipped by that rule.
    """
    hi = i + 1  # tok_off[hi] > p throughout
    lo = i
    step = 1
    while tok_off[lo] > p:  # ends: tok_off[0] == 0 <= p
        hi = lo
        lo = i - step if i > step else 0
        step *= 2
    while hi - lo > 1:
        m = (lo + hi) >> 1
        if tok_off[m] <= p:
            lo = m
        else:
            hi = m
    return lo


@nb.njit(cache=True, inline="always")
def _hist_pos(p, j, tok_off, user, hist_end, uoff):
    # request j's new tokens are the last ones of its user's history after it
    return uoff[user[j]] + hist_end[j] - tok_off[j + 1] + p


@nb.njit(cache=True)
def ring_fill(i, tok_ring, tok_top, tok_off, user, hist_end, uoff, hist):
    """Bring ``tok_ring`` up to the stream as of request ``i`` (its own new tokens included).

    In a replay's request order this copies request ``i``'s new tokens (a slice of
    its user's history); at a span's first request, or after a jump, it copies the
    last ``len(tok_ring)`` positions request by request. Slot ``p & (len - 1)`` then
    holds position ``p`` for every ``p`` a draw of request ``i`` can reach.
    """
    hi = tok_off[i + 1]
    t = tok_top[0]
    if t == hi:
        return
    size = tok_ring.shape[0]
    lo = hi - size if hi > size else 0
    if t > hi or t < lo:  # a new span or a jump: the ring's contents are not the stream's
        t = lo
    j = _request_at(t, i, tok_off)
    mask = size - 1
    while t < hi:
        end = tok_off[j + 1]
        src = _hist_pos(t, j, tok_off, user, hist_end, uoff)
        for q in range(end - t):
            tok_ring[(t + q) & mask] = hist[src + q]
        t = end
        j += 1
    tok_top[0] = hi


@nb.njit(cache=True, inline="always")
def draw_candidate(seed, i, k, tok_off, tok_ring, window):
    """Dense item id of implicit candidate ``k`` of request ``i``; -1 before any token.

    ``tok_ring`` must be filled as of request ``i`` (:func:`ring_fill`).
    """
    p = draw_position(seed, i, k, tok_off, window)
    if p < 0:
        return np.int64(-1)
    return np.int64(tok_ring[p & (tok_ring.shape[0] - 1)])


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
def context(full, max_seq_len, chunk):
    """(context start s0, context length L) of a history of ``full`` tokens (chunked slide)."""
    if full <= max_seq_len:
        return 0, full
    s0 = ((full - max_seq_len + chunk - 1) // chunk) * chunk
    return s0, full - s0


@nb.njit(cache=True, inline="always")
def kv_access(prev, nxt, klen, kstart, meta, u, L, s0, admit):
    """User ``u`` arrives with context ``L`` starting at history offset ``s0``.

    Returns the reused prefix tokens; afterwards ``u`` holds ``L`` tokens at
    MRU (evicting LRU users) if ``admit`` and ``L`` fits the whole capacity,
    else nothing.
    """
    c = 0
    if klen[u] >= 0:
        if kstart[u] == s0:  # still a prefix: the context start has not moved
            c = klen[u]
        unlink(prev, nxt, meta, u)
        meta[USED] -= klen[u]
        klen[u] = -1
    if admit and L > 0 and meta[CAP] >= L:
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


@nb.njit(cache=True, inline="always")
def kv_admit(full, s0, max_seq_len):
    """False when the next appended token would move the context start (the KV can't be reused)."""
    return full < max_seq_len or s0 + max_seq_len - full > 0


@nb.njit(cache=True, inline="always")
def kv_request(i, user, hist_end, max_seq_len, chunk, k_prev, k_next, k_len, k_start, k_meta):
    """Request ``i`` at the KV cache: (user, history length, context L, reused prefix c)."""
    u = user[i]
    full = hist_end[i]
    s0, L = context(full, max_seq_len, chunk)
    c = kv_access(k_prev, k_next, k_len, k_start, k_meta, u, L, s0,
                  kv_admit(full, s0, max_seq_len))  # fmt: skip
    return u, full, L, c


@nb.njit(cache=True, inline="always")
def stream_head(i, w, edges, user, hist_end, tok_off, ncand, explicit, max_seq_len, chunk,
                hist_tab, cand_tab, k_prev, k_next, k_len, k_start, k_meta, look_n):  # fmt: skip
    """A request of an EMB stream generator through the KV cache alone.

    Moves the window ``w`` up to request ``i``, adds the request's lookups to
    ``look_n[w]`` (per table) and returns (window, user, history length,
    computed tokens n, candidates looked up m_c): before the first token there
    is nothing to draw implicit candidates from.
    """
    while edges[w + 1] <= i:
        w += 1
    u, full, L, c = kv_request(i, user, hist_end, max_seq_len, chunk,
                               k_prev, k_next, k_len, k_start, k_meta)  # fmt: skip
    n = L - c
    m_c = ncand[i] if explicit or tok_off[i + 1] > 0 else 0
    for t in range(hist_tab.shape[0]):
        look_n[w, t] += n * hist_tab[t] + m_c * cand_tab[t]
    return w, u, full, n, m_c


@nb.njit(cache=True)
def serve_request(
    i, user, hist_end, uoff, hist, tok_off, tok_ring, tok_top, coff, cvals, ncand, explicit,
    seed, window, max_seq_len, chunk, item_keys, hist_tab, cand_tab, key_bytes, table_bytes,
    e_last, e_qi, k_prev, k_next, k_len, k_start, k_meta,
    qh, qtl, used, cap, clk, qe, tl, counts, direct,
):  # fmt: skip
    """One request through one node's caches (the per-request body every replay shares).

    The EMB cursor (``qh, qtl, used, clk, qe, tl``, :mod:`helm_plan.cache._emblog`)
    travels in registers and is returned updated with the outcomes ``(n, c, L, M,
    lookup_bytes, miss_bytes, misses)``. ``counts`` (float32 per key, or empty) gains one per lookup.
    ``direct`` is the row bytes when the model has one identity table (keys are
    items), else 0.
    """
    count = counts.shape[0] > 0
    n_tab = item_keys.shape[1]
    u, full, L, c = kv_request(i, user, hist_end, max_seq_len, chunk,
                               k_prev, k_next, k_len, k_start, k_meta)  # fmt: skip
    n = L - c
    m_c = ncand[i]
    if not explicit and m_c > 0:
        ring_fill(i, tok_ring, tok_top, tok_off, user, hist_end, uoff, hist)
    base = uoff[u] + full
    look_b = 0
    miss_b = 0
    miss = 0
    # One loop over the n computed history tokens, then the candidates.
    for x in range(n + m_c):
        if x < n:
            item = hist[base - n + x]
        elif explicit:
            item = cvals[coff[i] + x - n]
            if item < 0:  # a routed node's copy of a draw made before any token
                continue
        else:
            item = draw_candidate(seed, i, x - n, tok_off, tok_ring, window)
            if item < 0:
                continue
        for t in range(n_tab):
            if (hist_tab[t] if x < n else cand_tab[t]) == 0:
                continue
            if direct:  # one identity table: the key is the item, every row the same size
                key = item
                kb = direct
            else:
                key = item_keys[item, t]
                kb = table_bytes[t]  # a key's bytes are its table's row bytes
            look_b += kb
            if count:
                counts[key] += 1.0
            old = e_last[key]
            if old >= qe:  # hit on a key touched since the snapshot (the common case): a new
                e_last[key] = qtl  # stamp, nothing else (written out here: calling ``touch``
                qtl += 1  # for every hit ran the whole loop 2-4x slower as numba compiled it)
                clk += 1
                continue
            if old >= 0:  # hit on a snapshot key: its first touch since the snapshot
                tl, qtl, clk = touch(e_last, e_qi, qe, tl, qtl, clk, key, old)
                continue
            miss += 1  # miss: copy in, evicting LRU entries until it fits
            miss_b += kb
            if kb <= cap:
                if used + kb > cap:
                    qh, qe, tl, qtl, used = make_room(e_last, e_qi, qh, qe, tl, qtl, used, cap,
                                                      kb, key_bytes)  # fmt: skip
                tl, qtl, clk = touch(e_last, e_qi, qe, tl, qtl, clk, key, -1)
                used += kb
    return qh, qtl, used, clk, qe, tl, n, c, L, m_c, look_b, miss_b, miss


@nb.njit(cache=True)
def land_prefetch(t, pf, pf_keys, pf_t, key_bytes, e_last, e_qi, qe, tl, qtl, used, cap, clk):
    """Insert the prefetched keys whose copy landed by ``t`` into free space (never evicting)."""
    done = 0
    while pf < pf_keys.shape[0] and pf_t[pf] <= t:
        r = pf_keys[pf]
        pf += 1
        if e_last[r] < 0 and used + key_bytes[r] <= cap:
            tl, qtl, clk = touch(e_last, e_qi, qe, tl, qtl, clk, r, -1)
            used += key_bytes[r]
            done += 1
    return pf, done, tl, qtl, used, clk


@nb.njit(cache=True, nogil=True)
def replay(
    ts, user, hist_end, uoff, hist, tok_off, tok_ring, tok_top, coff, cvals, ncand, explicit,
    seed, window, start, stop, max_seq_len, chunk,
    item_keys, hist_tab, cand_tab, key_bytes, table_bytes,
    e_last, e_qi, e_meta, k_prev, k_next, k_len, k_start, k_meta,
    pf_keys, pf_t, counts, direct, out,
):  # fmt: skip
    qh, qtl, used, cap = e_meta[QH], e_meta[QT], e_meta[USED], e_meta[CAP]
    clk, qe, tl = e_meta[CLK], e_meta[QE], e_meta[TL]
    # serve_request and land_prefetch see the types the cluster's run_window passes, so each
    # compiles once: the KV lists as any-layout views (run_window's are a node's column of
    # (users, nodes) arrays; ``[::1]`` types a contiguous one so, the same memory) and the
    # prefetch cursor as int64 (a literal 0 compiled land_prefetch a second time)
    k_prev, k_next, k_len, k_start = k_prev[::1], k_next[::1], k_len[::1], k_start[::1]
    pf = np.int64(0)
    pf_done = 0
    for i in range(start, stop):
        if qtl > STAMP_LIMIT:  # rare: restamp 0..R-1 before the stamps leave int32
            qe = qtl = renumber(e_last, e_qi, qh, qe, tl)
            qh = tl = 0
        pf, d, tl, qtl, used, clk = land_prefetch(
            ts[i], pf, pf_keys, pf_t, key_bytes, e_last, e_qi, qe, tl, qtl, used, cap, clk
        )
        pf_done += d
        qh, qtl, used, clk, qe, tl, n, c, L, m_c, look_b, miss_b, miss = serve_request(
            i, user, hist_end, uoff, hist, tok_off, tok_ring, tok_top, coff, cvals, ncand, explicit,
            seed, window, max_seq_len, chunk, item_keys, hist_tab, cand_tab, key_bytes,
            table_bytes, e_last, e_qi, k_prev, k_next, k_len, k_start, k_meta,
            qh, qtl, used, cap, clk, qe, tl, counts, direct,
        )  # fmt: skip
        j = i - start
        out[OUT_COMPUTED, j] = n
        out[OUT_REUSED, j] = c
        out[OUT_CTX, j] = L
        out[OUT_CAND, j] = m_c
        out[OUT_LOOKUP_B, j] = look_b
        out[OUT_MISS_B, j] = miss_b
        out[OUT_MISS, j] = miss
    e_meta[QH], e_meta[QT], e_meta[USED], e_meta[CLK] = qh, qtl, used, clk
    e_meta[QE], e_meta[TL] = qe, tl
    return pf_done


@nb.njit(cache=True)
def count_stream(n_computed, ncand, tok_off, explicit, idx, item_keys, hist_tab, cand_tab):
    """Per-request EMB lookups (keys) of requests ``idx`` (ascending) given their computed tokens."""
    n_h = 0
    n_c = 0
    for t in range(item_keys.shape[1]):
        n_h += hist_tab[t]
        n_c += cand_tab[t]
    out = np.empty(n_computed.shape[0], np.int64)
    for j in range(n_computed.shape[0]):
        i = idx[j]
        m = ncand[i] if explicit or tok_off[i + 1] > 0 else 0  # nothing to draw from yet
        out[j] = n_computed[j] * n_h + m * n_c
    return out


@nb.njit(cache=True)
def fill_stream(
    user, hist_end, uoff, hist, tok_off, tok_ring, tok_top, coff, cvals, ncand, explicit,
    seed, window, idx, n_computed, item_keys, hist_tab, cand_tab, offs, ids,
):  # fmt: skip
    """The EMB key stream of requests ``idx`` (ascending; a span, or one node's requests in a
    cluster: the ring of implicit draws jumps over the others): history tokens, then
    candidates, table by table."""
    n_tab = item_keys.shape[1]
    for j in range(n_computed.shape[0]):
        i = idx[j]
        base = uoff[user[i]] + hist_end[i]
        n = n_computed[j]
        w = offs[j]
        if not explicit and ncand[i] > 0:
            ring_fill(i, tok_ring, tok_top, tok_off, user, hist_end, uoff, hist)
        for x in range(n + ncand[i]):
            if x < n:
                item = hist[base - n + x]
            elif explicit:
                item = cvals[coff[i] + x - n]
                if item < 0:  # a routed node's copy of a draw made before any token
                    continue
            else:
                item = draw_candidate(seed, i, x - n, tok_off, tok_ring, window)
                if item < 0:
                    continue
            for t in range(n_tab):
                if (hist_tab[t] if x < n else cand_tab[t]) == 0:
                    continue
                ids[w] = item_keys[item, t]
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
