"""User affinity: consistent hashing with bounded loads."""

from __future__ import annotations

import numba as nb
import numpy as np

from helm_plan.cache.stack import grid_bin
from helm_plan.cluster.routers.base import (
    CNT,
    Request,
    Router,
    RouteView,
    build_ring,
    register_router,
    ring_hash,
)


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
    pos = grid_bin(ring_h, h)  # np.searchsorted's lower bound, without its compile cost
    for j in range(r):
        n = ring_n[(pos + j) % r]
        if load[n, CNT] + 1 <= cap:
            return n
    return ring_n[pos % r]  # unreachable: total < nodes · cap, so some node is under it


@register_router
class Affinity(Router):
    """Consistent hashing on the user with bounded loads (Mirrokni, Thorup, Zadimoghaddam,
    "Consistent Hashing with Bounded Loads", SODA 2018): each node owns ``vnodes`` points on a
    hash ring; a user goes to the first node clockwise from its point whose outstanding requests
    stay within ``ceil((1 + eps) · (total + 1) / N)``. A user keeps its node (and its KV prefix)
    while loads are within the bound; adding or removing a node moves only that node's users.
    ``eps = 0.25``: the 1.25 imbalance constant of Vimeo's deployment (liblb ``bounded``) and
    brpc's ``c_murmurhash_bl`` default; load is outstanding requests, as in both."""

    name = "affinity"
    colour = "#2a9d8f"
    symbol = "square"
    order = 4
    eps: float = 0.25
    vnodes: int = 64

    def params(self, n_nodes: int) -> np.ndarray:
        return np.array([self.eps, float(n_nodes)])

    def ring(self, nodes: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return build_ring(np.asarray(nodes, np.int64), self.vnodes, seed)

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        p = v.params  # (eps, nodes on the ring)
        return bounded_affinity(v.load, v.ring_h, v.ring_n, p[1], p[0], v.seed,
                                v.user_ids[q.u]), 0.0  # fmt: skip
