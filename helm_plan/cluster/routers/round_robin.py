"""Round-robin: the default of nginx, Envoy and Kubernetes Services."""

from __future__ import annotations

from helm_plan.cluster.routers.base import Request, Router, RouteView, register_router


@register_router
class RoundRobin(Router):
    """Node ``k mod N`` for the k-th request: the default of nginx, Envoy and Kubernetes
    Services; it ignores load and caches, so per-node load varies only with request size."""

    name = "round-robin"
    colour = "#adb5bd"
    symbol = "triangle-up"
    order = 0

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        # the counter lives in the simulator's state, so it carries across windows
        n = v.rstate[0] % v.load.shape[0]
        v.rstate[0] += 1
        return n, 0.0
