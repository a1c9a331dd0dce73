"""Compiled routing rules: one function per router, dispatched by code from the request kernel.

Every rule sees only what a router holds at the request's arrival (see
:mod:`helm_plan.cluster.routers` for each rule's source and meaning):

- ``load[n]``: per-node counters over requests dispatched and not yet
  completed (``CNT`` requests, ``EST`` the router's estimate of their service
  in integer nanoseconds, ``DTOK``/``DBLK`` Dynamo's active prefill tokens and
  blocks). They change at dispatch and when a batch's finish time has passed,
  never with a queued request's true service time;
- the KV directory ``k_len[u, n]``/``k_start[u, n]`` (users × nodes): which
  prefix of which user each node holds;
- the EMB hot set ``e_last[n, key] >= 0`` (nodes × keys): resident keys.

Counters are integers so a decision does not depend on the order completions
were folded in (the brute-force cluster of the tests recomputes them from
scratch and must agree bit for bit). Random picks use a counter-based hash of
``(seed, request, k)``, so a decision never depends on anything drawn for
another request.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan._hash import counter_hash
from helm_plan.cache._kernels import draw_candidate, ring_fill
from helm_plan.latency.kernel import attention_pairs, batch_time_s

ROUND_ROBIN, RANDOM, JSQ, P2C, AFFINITY, KV_OVERLAP, HELM = range(7)
"""Router codes (the ``RouterKind`` enum's values)."""

CNT, EST, DTOK, DBLK = range(4)
"""Columns of the per-node load counters."""
N_LOAD = 4


@nb.njit(cache=True, inline="always")
def pick(seed, i, k, n):
    """A uniform integer in [0, n) keyed by (seed, i, k): multiply-shift of a 32-bit draw."""
    z = counter_hash(seed, i, k)
    return np.int64(((z >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@nb.njit(cache=True, inline="always")
def ring_hash(seed, a, b):
    """Position on the consistent-hashing ring of (a, b): a node's virtual point or a user."""
    return counter_hash(seed, a, b)


@nb.njit(cache=True, inline="always")
def est_service(c, ncomp, L, M, look, miss):
    """The router's service estimate: the latency model's batch of one with ``miss`` bytes missed."""
    return batch_time_s(c, 1.0, float(ncomp + M), attention_pairs(float(ncomp), float(L), float(M)),
                        float(look), miss, miss)  # fmt: skip


@nb.njit(cache=True, inline="always")
def to_ns(x):
    return np.int64(x * 1e9 + 0.5)


@nb.njit(cache=True, inline="always")
def cached_prefix(k_len, k_start, u, n, s0):
    """Tokens of user ``u``'s context the directory says node ``n`` can reuse."""
    if k_len[u, n] >= 0 and k_start[u, n] == s0:
        return k_len[u, n]
    return np.int64(0)


@nb.njit(cache=True)
def least_work(load, n_nodes, i):
    """JSQ: the lowest backlog estimate; ties to fewer requests, then from node ``i mod N`` on."""
    best = -1
    for j in range(n_nodes):
        n = (i + j) % n_nodes
        if (
            best < 0
            or load[n, EST] < load[best, EST]
            or (load[n, EST] == load[best, EST] and load[n, CNT] < load[best, CNT])
        ):
            best = n
    return best


@nb.njit(cache=True)
def two_choices(load, n_nodes, seed, i):
    """Power of two choices: two distinct seeded nodes, the lower backlog estimate (ties: first)."""
    if n_nodes == 1:
        return 0
    a = pick(seed, i, 0, n_nodes)
    b = pick(seed, i, 1, n_nodes - 1)
    if b >= a:
        b += 1
    return a if load[a, EST] <= load[b, EST] else b


@nb.njit(cache=True)
def bounded_affinity(load, ring_h, ring_n, n_active, eps, seed, user_id):
    """Consistent hashing with bounded loads: the first node clockwise from the user's point
    whose outstanding requests stay within ceil((1 + eps) · (total + 1) / nodes).

    The user's point hashes its original id, so it does not depend on which other users the
    trace holds."""
    total = 0
    for n in range(load.shape[0]):
        total += load[n, CNT]
    cap = np.int64(np.ceil((1.0 + eps) * (total + 1) / n_active))
    h = ring_hash(seed, user_id, 0xA5)
    r = ring_h.shape[0]
    pos = np.searchsorted(ring_h, h)
    for j in range(r):
        n = ring_n[(pos + j) % r]
        if load[n, CNT] + 1 <= cap:
            return n
    return ring_n[pos % r]  # unreachable: total < nodes · cap, so some node is under it


@nb.njit(cache=True)
def kv_overlap(load, k_len, k_start, u, s0, L, M, n_nodes, weight, bs, seed, i):
    """Dynamo's KV router cost: weight · prefill blocks + decode blocks, lowest wins, ties random."""
    isl = L + M
    req_blocks = (isl + bs - 1) // bs
    best = np.inf
    ties = 0
    for n in range(n_nodes):
        ovl = cached_prefix(k_len, k_start, u, n, s0) // bs
        prefill = float(load[n, DTOK] + isl - ovl * bs) / bs
        logit = weight * prefill + float(load[n, DBLK] + req_blocks)
        if logit < best:
            best = logit
            ties = 1
        elif logit == best:
            ties += 1
    k = pick(seed, i, 7, ties)
    for n in range(n_nodes):
        ovl = cached_prefix(k_len, k_start, u, n, s0) // bs
        prefill = float(load[n, DTOK] + isl - ovl * bs) / bs
        logit = weight * prefill + float(load[n, DBLK] + req_blocks)
        if logit == best:
            if k == 0:
                return n
            k -= 1
    return 0


@nb.njit(cache=True)
def emb_locality(
    i, u, L, M, s_h, s_c, hist_end, uoff, hist, tok_off, user, tok_ring, tok_top, coff, cvals, explicit,
    seed, window, item_keys, hist_tab, cand_tab, key_bytes, direct, e_last, res_h, res_c,
):  # fmt: skip
    """Sampled EMB residency per node, byte-weighted: of the newest ``s_h`` history tokens (into
    ``res_h``) and the first ``s_c`` candidates (into ``res_c``); returns the sampled totals."""
    n_nodes = e_last.shape[0]
    res_h[:] = 0
    res_c[:] = 0
    tot_h = np.int64(0)
    tot_c = np.int64(0)
    base = uoff[u] + hist_end[i]
    nh = s_h if s_h < L else L
    nc = s_c if s_c < M else M
    if not explicit and nc > 0:
        ring_fill(i, tok_ring, tok_top, tok_off, user, hist_end, uoff, hist)
    for x in range(nh + nc):
        if x < nh:
            item = hist[base - 1 - x]
        elif explicit:
            item = cvals[coff[i] + x - nh]
            if item < 0:  # a routed node's copy of a draw made before any token
                continue
        else:
            item = draw_candidate(seed, i, x - nh, tok_off, tok_ring, window)
            if item < 0:
                break
        for t in range(item_keys.shape[1]):
            if (hist_tab[t] if x < nh else cand_tab[t]) == 0:
                continue
            if direct:
                key = np.int64(item)
                kb = np.int64(direct)
            else:
                key = np.int64(item_keys[item, t])
                kb = key_bytes[key]
            if x < nh:
                tot_h += kb
            else:
                tot_c += kb
            for n in range(n_nodes):
                if e_last[n, key] >= 0:
                    if x < nh:
                        res_h[n] += kb
                    else:
                        res_c[n] += kb
    return tot_h, tot_c


@nb.njit(cache=True)
def helm(load, k_len, k_start, u, s0, L, M, m_look, tok_b, cand_b, res_h, res_c, tot_h, tot_c,
         c, slots, n_nodes, i):  # fmt: skip
    """EMB-KV-aware: the lowest estimated completion time, backlog / slots + this request's
    service on the node (KV prefix it reuses there, EMB bytes it would miss there).

    Returns (node, its EMB miss estimate in bytes); ties go to fewer requests, then from node
    ``i mod N`` on.
    """
    best = -1
    best_cost = np.inf
    best_miss = 0.0
    for j in range(n_nodes):
        n = (i + j) % n_nodes
        ncomp = L - cached_prefix(k_len, k_start, u, n, s0)
        loc_h = res_h[n] / tot_h if tot_h > 0 else 1.0
        loc_c = res_c[n] / tot_c if tot_c > 0 else 1.0
        miss = float(ncomp * tok_b) * (1.0 - loc_h) + float(m_look * cand_b) * (1.0 - loc_c)
        look = ncomp * tok_b + m_look * cand_b
        cost = float(load[n, EST]) * 1e-9 / slots + est_service(c, ncomp, L, M, look, miss)
        if best < 0 or cost < best_cost or (cost == best_cost and load[n, CNT] < load[best, CNT]):
            best = n
            best_cost = cost
            best_miss = miss
    return best, best_miss
