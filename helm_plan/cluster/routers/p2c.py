"""Power of two choices (Envoy's LEAST_REQUEST)."""

from __future__ import annotations

import numba as nb

from helm_plan.cluster.routers.base import EST, Request, Router, RouteView, pick, register_router


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


@register_router
class P2c(Router):
    """Power of two choices: two distinct seeded random nodes, the one with the lower backlog
    estimate (Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing", IEEE
    TPDS 2001; Envoy's LEAST_REQUEST). Near-JSQ balance from two probes."""

    name = "p2c"
    colour = "#457b9d"
    symbol = "cross"
    order = 3

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        return two_choices(v.load, v.load.shape[0], v.seed, q.i), 0.0
