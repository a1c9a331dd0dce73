"""The minimal node count that meets an SLO, and what it costs (DESIGN.md, Capacity planning).

:func:`minimal_nodes` searches N with any pass/fail evaluation (the cluster
simulator in practice): a bracket galloping from a single-node estimate
(down by 1, 2, 4, ... while it passes, up likewise while it fails), then
bisection, so the
answer ``N`` has ``N`` evaluated passing and ``N − 1`` evaluated failing.
``N + 1`` is evaluated too unless the caller checks it elsewhere
(``check_above``): bisection alone only ever sees sizes consistent with a
monotone answer, so a failing ``N + 1`` (or any evaluated size above ``N``
that failed, or below ``N − 1`` that passed) means "P99 ≤ T" is not monotone
in N here (routing and per-node caches can do that); it is reported, never
hidden. With a first guess that is right, the search costs two simulations
(``N`` passes, ``N − 1`` fails). A guess that is only a ceiling (``ceiling``: one node's
capacity behind it was a lower bound) is bisected from below instead: galloping down from
it would simulate every passing size on the way, each a full fleet of the whole trace.

Cost: a fleet of ``N`` GPUs at ``price`` USD per GPU-hour serving ``qps``
requests per second costs ``N · 24`` GPU-hours per day and
``N · price / (qps · 3600 / 10⁶)`` USD per million requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from helm_plan.config import require_int, require_positive
from helm_plan.errors import ConfigError


@dataclass(frozen=True)
class Point:
    """One fleet size evaluated."""

    nodes: int
    """Fleet size."""
    passes: bool
    """True when the SLO and attainment target are both met."""
    p99_ms: float
    """Fleet-wide P99 sojourn, ms."""
    slo_attainment: float
    """Fleet-wide share of requests within the SLO."""
    ratio: float = math.nan
    """best-static: the fleet-wide static r behind this answer (NaN for other policies)."""


@dataclass(frozen=True)
class Search:
    """The minimal fleet size and every size evaluated on the way."""

    nodes: int | None
    """Minimal passing size (None if none passes up to max_nodes)."""
    evaluated: tuple[Point, ...] = field(default=())
    """Every size evaluated, in order of evaluation."""
    non_monotone: bool = False
    """True when a larger size failed or a smaller one than N − 1 passed."""

    @property
    def at(self) -> dict[int, Point]:
        return {p.nodes: p for p in self.evaluated}


def minimal_nodes(
    evaluate: Callable[[int], Point], *, start: int, max_nodes: int, check_above: bool = True,
    ceiling: bool = False,
) -> Search:  # fmt: skip
    """The smallest N with ``evaluate(N).passes`` (see the module docstring); ``check_above``
    False skips the ``N + 1`` check (a plan checks it where it matters: plan.frontier).
    ``ceiling``: ``start`` is an upper bound, not an estimate (it came from a lower bound of
    one node's capacity), so N is bisected in [1, start] and ``start`` is evaluated only if
    every size below it fails (then the search gallops up from it as from a failing guess)."""
    require_int("max_nodes", max_nodes, 1)
    start = min(max(int(start), 1), max_nodes)
    seen: dict[int, Point] = {}
    order: list[Point] = []

    def ev(n: int) -> bool:
        if n not in seen:
            seen[n] = evaluate(n)
            order.append(seen[n])
        return seen[n].passes

    def bisect(lo: int, hi: int) -> tuple[int, int]:
        """Narrow a failing ``lo`` and a passing ``hi`` until they are neighbours."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ev(mid):
                hi = mid
            else:
                lo = mid
        return lo, hi

    # gallop from the first guess (steps 1, 2, 4, ...) so a good guess costs three sizes
    lo, hi = 0, None  # lo fails (0 always "fails"), hi passes
    step = 1
    if ceiling:
        # bisect [1, start] with start assumed to pass: start itself is simulated only where
        # every size below it failed (the gallop down would simulate each passing size)
        lo, top = bisect(0, start)
        if top < start or ev(top):
            hi = top
        else:
            lo = top  # the bound was wrong: gallop up from it
    elif ev(start):
        hi = start
        while hi > 1:
            n = max(hi - step, 1)
            if not ev(n):
                lo = n
                break
            hi, step = n, step * 2
    else:
        lo = start
    if hi is None:
        while lo < max_nodes:
            n = min(lo + step, max_nodes)
            if ev(n):
                hi = n
                break
            lo, step = n, step * 2
    if hi is None:
        return Search(None, tuple(order), False)
    lo, hi = bisect(lo, hi)
    if hi > 1:
        ev(hi - 1)  # N − 1 is evaluated and fails (bisection left it at lo = hi − 1)
    if check_above and hi < max_nodes:
        ev(hi + 1)  # one size up must pass as well, or the answer is not monotone
    non_mono = any(p.passes for p in order if p.nodes < hi - 1) or any(
        not p.passes for p in order if p.nodes > hi
    )
    return Search(hi, tuple(order), non_mono)


def first_guess(offered_qps: float, node_qps: float) -> int:
    """A starting fleet size: the offered load over what one node sustains at the SLO."""
    if not (node_qps > 0 and math.isfinite(node_qps)):
        return 1
    return max(1, math.ceil(offered_qps / node_qps))


@dataclass(frozen=True)
class Cost:
    """What a fleet costs."""

    gpu_hours_per_day: float
    """N · 24."""
    usd_per_hour: float
    """N · price."""
    usd_per_million_requests: float
    """N · price / (qps · 3600 / 1e6)."""


def cost(nodes: int, price_per_gpu_hour: float, qps: float) -> Cost:
    """The cost of ``nodes`` GPUs serving ``qps`` requests per second."""
    require_int("nodes", nodes, 1)
    if not (price_per_gpu_hour >= 0 and math.isfinite(price_per_gpu_hour)):
        raise ConfigError(
            f"cost_per_hour must be finite and >= 0, got {price_per_gpu_hour}",
            hint="pass --cost-per-hour GPU=USD with a price in dollars",
        )
    require_positive("qps", qps)
    per_hour = nodes * price_per_gpu_hour
    return Cost(
        gpu_hours_per_day=24.0 * nodes,
        usd_per_hour=per_hour,
        usd_per_million_requests=per_hour / (qps * 3600.0 / 1e6),
    )
