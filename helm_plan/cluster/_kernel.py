"""The cluster's request loop: one compiled pass over a window's arrivals on all N nodes.

Per request, in arrival order: bring every node up to the arrival time
(batches that closed before it are formed, batches that finished by it are
completed and leave the router's counters), route, land the node's
prefetched rows, serve the request through that node's caches with the
shared per-request body (:func:`helm_plan.cache._kernels.serve_request`),
and append it to the node's FIFO.

Batching is an event loop per node (:mod:`helm_plan.sim.batching` defines
the rules). The batch forming at a node's queue head closes at
``max(free stream, min(head arrival + timeout, arrival of the batch_max-th))``
(``max(free stream, head arrival)`` when continuous or ``batch_max = 1``) and
takes the queued requests that arrived by then, up to ``batch_max``. A batch
is formed lazily, once an arrival comes after its close time: only then is
it certain that no later arrival can join it, and every arrival that could
has been routed. With one node this forms exactly the batches of
``sim.batching._serve`` on the same arrivals. At the end of a window every
queue is flushed (no batch spans a window boundary).

Per node, the FIFO is a linked list through ``nxt`` (request indices, so it
survives window boundaries); formed but unfinished batches hang per stream in
``sl_head``/``sl_tail`` chains linked through ``bnx`` (a stream's batches
finish in formation order), so completion is exact with any number of
streams. ``out`` holds the per-request cache outcomes in
:data:`helm_plan.cache._kernels` row order.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.cache._kernels import CAP as E_CAP
from helm_plan.cache._kernels import (
    CLK,
    OUT_CAND,
    OUT_COMPUTED,
    OUT_CTX,
    OUT_LOOKUP_B,
    OUT_MISS,
    OUT_MISS_B,
    OUT_REUSED,
    QE,
    QH,
    QT,
    STAMP_LIMIT,
    TL,
    USED,
    context,
    land_prefetch,
    renumber,
    serve_request,
)
from helm_plan.cluster.routers.base import (
    CNT,
    DBLK,
    DTOK,
    EST,
    Request,
    est_service,
    to_ns,
)
from helm_plan.latency.kernel import attention_pairs, batch_time_s


@nb.njit(cache=True)
def head_close(n, ts, free, q_head, q_len, q_kth, bmax, timeout, greedy):
    """Close time of the batch forming at node ``n``'s queue head (inf when the queue is empty)."""
    h = q_head[n]
    if h < 0:
        return np.inf
    fmin = free[n, 0]
    for k in range(1, free.shape[1]):
        if free[n, k] < fmin:
            fmin = free[n, k]
    c = ts[h]
    if not greedy and bmax > 1:
        c = ts[h] + timeout
        if q_len[n] >= bmax and ts[q_kth[n]] < c:
            c = ts[q_kth[n]]
    if fmin > c:
        c = fmin
    return c


@nb.njit(cache=True)
def form_batch(n, ts, out, shr, c, bmax, timeout, greedy, free, q_head, q_len, q_kth,
               sl_head, sl_tail, next_close, next_done, nxt, bnx, start, finish, service, bsize,
               n_batch, bno):  # fmt: skip
    """Form node ``n``'s head batch at its close time on the first free stream; its members get
    the node's batch number ``bno`` (batches numbered in formation order, i.e. start order)."""
    k = 0
    for s in range(1, free.shape[1]):
        if free[n, s] < free[n, k]:
            k = s
    close = next_close[n]
    i0 = q_head[n]
    j = i0
    cnt = 0
    tokens = 0.0
    pairs = 0.0
    lb = 0.0
    mb = 0.0
    mbs = 0.0
    while j >= 0 and cnt < bmax and ts[j] <= close:
        nc = float(out[OUT_COMPUTED, j])
        m = float(out[OUT_CAND, j])
        tokens += nc + m
        pairs += attention_pairs(nc, float(out[OUT_CTX, j]), m)
        lb += float(out[OUT_LOOKUP_B, j])
        mb += float(out[OUT_MISS_B, j])
        mbs += float(out[OUT_MISS_B, j]) / shr[j]
        j = nxt[j]
        cnt += 1
    t_b = batch_time_s(c, float(cnt), tokens, pairs, lb, mb, mbs)
    fin = close + t_b
    q = i0
    for _ in range(cnt):
        start[q] = close
        finish[q] = fin
        service[q] = t_b
        bsize[q] = cnt
        bno[q] = n_batch[n]
        q = nxt[q]
    n_batch[n] += 1
    free[n, k] = fin
    bnx[i0] = -1
    if sl_tail[n, k] >= 0:
        bnx[sl_tail[n, k]] = i0
    else:
        sl_head[n, k] = i0
        if fin < next_done[n]:
            next_done[n] = fin
    sl_tail[n, k] = i0
    q_len[n] -= cnt
    q_head[n] = j if q_len[n] > 0 else -1
    if q_len[n] >= bmax:
        q = q_head[n]
        for _ in range(bmax - 1):
            q = nxt[q]
        q_kth[n] = q
    next_close[n] = head_close(n, ts, free, q_head, q_len, q_kth, bmax, timeout, greedy)


@nb.njit(cache=True)
def complete(n, t, out, load, bs, sl_head, sl_tail, next_done, nxt, bnx, finish, bsize, est):
    """Batches of node ``n`` finished by ``t`` leave the router's counters."""
    nd = np.inf
    for k in range(sl_head.shape[1]):
        b = sl_head[n, k]
        while b >= 0 and finish[b] <= t:
            j = b
            for _ in range(bsize[b]):
                isl = out[OUT_CTX, j] + out[OUT_CAND, j]
                load[n, CNT] -= 1
                load[n, EST] -= est[j]
                load[n, DTOK] -= isl - (out[OUT_REUSED, j] // bs) * bs
                load[n, DBLK] -= (isl + bs - 1) // bs
                j = nxt[j]
            b = bnx[b]
        sl_head[n, k] = b
        if b < 0:
            sl_tail[n, k] = -1
        elif finish[b] < nd:
            nd = finish[b]
    next_done[n] = nd


@nb.njit(cache=True)
def run_window(
    s, e,
    ts, user, hist_end, uoff, hist, tok_off, tok_ring, tok_top, coff, cvals, ncand, explicit,
    seed, window, max_seq_len, chunk, item_keys, hist_tab, cand_tab, key_bytes, table_bytes,
    direct,
    e_last, e_qi, e_meta, k_prev, k_next, k_len, k_start, k_meta, counts,
    pf_keys, pf_t, pf_pos, pf_hi, share,
    c, bmax, timeout, greedy, free,
    route, view, bs,
    load, q_head, q_len, q_kth, tail, sl_head, sl_tail, next_close, next_done, n_batch,
    node, out, start, finish, service, bsize, bno, shr, est, nxt, bnx,
):  # fmt: skip
    """Route and serve requests ``[s, e)`` (one window) on every node, then flush the queues.

    ``route`` is the router's compiled rule (a one-element tuple of a first-class function,
    :func:`helm_plan.cluster.routers.compiled_rule`) and ``view`` what it reads: this kernel
    names no router, so one compiled copy serves every router, registered ones included.
    """
    n_nodes = e_meta.shape[0]
    for i in range(s, e):
        t = ts[i]
        for n in range(n_nodes):
            while next_close[n] < t:
                form_batch(n, ts, out, shr, c, bmax, timeout, greedy, free, q_head, q_len,
                           q_kth, sl_head, sl_tail, next_close, next_done, nxt, bnx, start,
                           finish, service, bsize, n_batch, bno)  # fmt: skip
            if next_done[n] <= t:
                complete(n, t, out, load, bs, sl_head, sl_tail, next_done, nxt, bnx, finish,
                         bsize, est)  # fmt: skip
        u = user[i]
        s0, L = context(hist_end[i], max_seq_len, chunk)
        M = ncand[i]
        n, miss_est = route[0](Request(np.int64(i), np.int64(u), np.int64(s0), np.int64(L),
                                       np.int64(M)), view)  # fmt: skip
        node[i] = n
        # the node's caches: land the refill rows due by now, then serve
        qh, qtl, used, cap = e_meta[n, QH], e_meta[n, QT], e_meta[n, USED], e_meta[n, E_CAP]
        clk, qe, tl = e_meta[n, CLK], e_meta[n, QE], e_meta[n, TL]
        el = e_last[n]
        if qtl > STAMP_LIMIT:  # rare: restamp 0..R-1 before the stamps leave int32
            qe = qtl = renumber(el, e_qi[n], qh, qe, tl)
            qh = tl = 0
        hi = pf_hi[n]
        pf, _, tl, qtl, used, clk = land_prefetch(t, pf_pos[n], pf_keys[:hi], pf_t[:hi],
                                                  key_bytes, el, e_qi[n], qe, tl, qtl,
                                                  used, cap, clk)  # fmt: skip
        pf_pos[n] = pf
        qh, qtl, used, clk, qe, tl, nc, cr, lr, mc, lb, mb, ms = serve_request(
            i, user, hist_end, uoff, hist, tok_off, tok_ring, tok_top, coff, cvals, ncand, explicit,
            seed, window, max_seq_len, chunk, item_keys, hist_tab, cand_tab, key_bytes,
            table_bytes, el, e_qi[n], k_prev[:, n], k_next[:, n], k_len[:, n], k_start[:, n],
            k_meta[n], qh, qtl, used, cap, clk, qe, tl, counts[n], direct,
        )  # fmt: skip
        e_meta[n, QH], e_meta[n, QT], e_meta[n, USED] = qh, qtl, used
        e_meta[n, CLK], e_meta[n, QE], e_meta[n, TL] = clk, qe, tl
        out[OUT_COMPUTED, i] = nc
        out[OUT_REUSED, i] = cr
        out[OUT_CTX, i] = lr
        out[OUT_CAND, i] = mc
        out[OUT_LOOKUP_B, i] = lb
        out[OUT_MISS_B, i] = mb
        out[OUT_MISS, i] = ms
        shr[i] = share[n, i - s]
        # the router's counters: its service estimate (EMB misses only if it modelled them)
        est[i] = to_ns(est_service(c, nc, lr, mc, lb, miss_est))
        isl = lr + mc
        load[n, CNT] += 1
        load[n, EST] += est[i]
        load[n, DTOK] += isl - (cr // bs) * bs
        load[n, DBLK] += (isl + bs - 1) // bs
        # FIFO append
        nxt[i] = -1
        if tail[n] >= 0:
            nxt[tail[n]] = i
        tail[n] = i
        if q_head[n] < 0:
            q_head[n] = i
        q_len[n] += 1
        if q_len[n] == bmax:
            q_kth[n] = i
        next_close[n] = head_close(n, ts, free, q_head, q_len, q_kth, bmax, timeout, greedy)
    # no batch spans the window boundary: every queue is served among itself
    for n in range(n_nodes):
        while q_head[n] >= 0:
            form_batch(n, ts, out, shr, c, bmax, timeout, greedy, free, q_head, q_len, q_kth,
                       sl_head, sl_tail, next_close, next_done, nxt, bnx, start, finish,
                       service, bsize, n_batch, bno)  # fmt: skip
