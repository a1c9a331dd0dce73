"""Random: a uniform node per request, the supermarket model's baseline."""

from __future__ import annotations

from helm_plan.cluster.routers.base import Request, Router, RouteView, pick, register_router


@register_router
class Random(Router):
    """A uniform node per request from a seeded counter hash. Poisson arrivals split into
    independent Poisson streams of rate λ/N (each node an M/G/1 queue); the classic baseline
    of the supermarket model (Mitzenmacher, IEEE TPDS 2001)."""

    name = "random"
    colour = "#9b5de5"
    symbol = "x"
    order = 1

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        return pick(v.seed, q.i, 0, v.load.shape[0]), 0.0
