"""Dynamo's KV-aware router cost."""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.cluster.routers.base import (
    DBLK,
    DTOK,
    Request,
    Router,
    RouteView,
    cached_prefix,
    pick,
    register_router,
)


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


@register_router
class KvOverlap(Router):
    """Dynamo's KV-aware router (ai-dynamo/dynamo, lib/llm/src/kv_router/scheduler.rs,
    ``DefaultWorkerSelector::select_worker``, read at upstream commit e3619ce0 of Aug 2025 in
    the mirror yuekaizhang/dynamo, the upstream snapshot being too large to fetch): each node's
    cost is ``overlap_score_weight · prefill_blocks + decode_blocks``, lowest wins, ties
    uniformly at random (temperature 0). ``prefill_blocks`` = (node's active prefill tokens +
    this request's tokens not covered by whole cached prefix blocks) / block size;
    ``decode_blocks`` = node's active blocks + this request's blocks (sequence.rs,
    ``potential_blocks_and_tokens``). Defaults: weight 1.0 (kv_router.rs), 16-token blocks
    (local_model.rs). Here a request's tokens are its context plus candidates; its KV stays
    active, and its prefill counts, until its batch finishes (single-pass GR has no decode)."""

    name = "kv-overlap"
    colour = "#e9c46a"
    symbol = "diamond"
    order = 5
    overlap_score_weight: float = 1.0

    def params(self, n_nodes: int) -> np.ndarray:
        return np.array([self.overlap_score_weight, 0.0])

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        n = kv_overlap(v.load, v.k_len, v.k_start, q.u, q.s0, q.L, q.M, v.load.shape[0],
                       v.params[0], v.block_tokens, v.seed, q.i)  # fmt: skip
        return n, 0.0
