"""Join the shortest queue (least work left)."""

from __future__ import annotations

import numba as nb

from helm_plan.cluster.routers.base import CNT, EST, Request, Router, RouteView, register_router


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


@register_router
class Jsq(Router):
    """Join the shortest queue, measured as least outstanding work: the node with the lowest
    backlog estimate (ties: fewer outstanding requests, then rotating from node i mod N).
    Least-work-left dispatching (Harchol-Balter, Performance Modeling and Design of Computer
    Systems, 2013, ch. 24); with exact remaining work it equals a central M/G/N queue."""

    name = "jsq"
    colour = "#264653"
    symbol = "circle"
    order = 2

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        return least_work(v.load, v.load.shape[0], q.i), 0.0
