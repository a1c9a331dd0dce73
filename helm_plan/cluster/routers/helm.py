"""helm: this project's EMB-KV-aware router (DESIGN.md, Cluster and routing)."""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.cache._kernels import draw_candidate, ring_fill
from helm_plan.cluster.routers.base import (
    CNT,
    EST,
    Request,
    Router,
    RouteView,
    cached_prefix,
    est_service,
    register_router,
)


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


@register_router
class Helm(Router):
    """EMB-KV-aware: the node with the lowest estimated completion time, backlog estimate /
    streams + this request's service there from the latency model, with the prefill tokens the
    KV directory says that node still has to compute and the EMB bytes it would miss there,
    estimated from the residency of the request's newest ``hist_sample`` history tokens and first
    ``cand_sample`` candidates in that node's hot set (so a node's current r, through what it
    can keep resident, enters the choice). Ties go to fewer outstanding requests, then rotate
    from node i mod N. At light load it concentrates requests on the nodes whose caches are warm
    (the backlog term pushes back only once queues form): the imbalance figure shows it. This
    project's router (DESIGN.md, Cluster and routing)."""

    name = "helm"
    colour = "#d62828"
    symbol = "star"
    order = 6
    hist_sample: int = 8
    cand_sample: int = 8

    def params(self, n_nodes: int) -> np.ndarray:
        return np.array([float(self.hist_sample), float(self.cand_sample)])

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        i, u, L, M = q.i, q.u, q.L, q.M
        # candidates are looked up only when the request has any: explicit, or drawn from tokens
        m_look = M if (v.explicit or v.tok_off[i + 1] > 0) else 0
        tot_h, tot_c = emb_locality(
            i, u, L, M, np.int64(v.params[0]), np.int64(v.params[1]), v.hist_end, v.uoff, v.hist,
            v.tok_off, v.user, v.tok_ring, v.tok_top, v.coff, v.cvals, v.explicit, v.cand_seed,
            v.window, v.item_keys, v.hist_tab, v.cand_tab, v.key_bytes, v.direct, v.e_last,
            v.res_h, v.res_c,
        )  # fmt: skip
        return helm(v.load, v.k_len, v.k_start, u, q.s0, L, M, m_look, v.tok_b, v.cand_b, v.res_h,
                    v.res_c, tot_h, tot_c, v.coeffs, v.slots, v.load.shape[0], i)  # fmt: skip
