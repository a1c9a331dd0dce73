"""The report's colour and marker lookups: each policy's and router's own class holds its facts.

Every figure that draws a policy or a router takes its colour (and a router
its marker symbol) from here, so a name looks the same on every chart of a
page. The facts live with the names: a policy spec's ``colour``
(:data:`helm_plan.policies.POLICY_FACTS`) and a router class's ``colour`` and
``symbol`` (:data:`helm_plan.cluster.routers.ROUTERS`), so registering a
policy or a router is all it takes to draw it. A policy typed with an
argument (``static:0.3``, ``controller:PATH``) takes its name's colour.
"""

from __future__ import annotations

from helm_plan.cluster.routers import ROUTERS
from helm_plan.policies import POLICY_FACTS, canonical

__all__ = ["PALETTE", "policy_colour", "router_colour", "router_symbol"]

PALETTE = ("#1f4e79", "#c0504d", "#4f8f3a", "#8064a2", "#d08a2c", "#2c9fa8", "#7f7f7f")
"""Colours of series that are not a policy or a router, in order of use."""

_OTHER = "#333333"
"""A name with no entry (none shipped): dark grey, never a registered name's colour."""


def policy_colour(policy: str) -> str:
    """The colour of ``policy`` (``name`` or ``name:argument``, or an alias)."""
    f = POLICY_FACTS.get(canonical(policy).partition(":")[0])
    return f.colour if f is not None else _OTHER


def router_colour(router: str) -> str:
    """The colour of ``router``."""
    cls = ROUTERS.get(router)
    return cls.colour if cls is not None else _OTHER


def router_symbol(router: str) -> str:
    """The marker symbol of ``router``."""
    cls = ROUTERS.get(router)
    return cls.symbol if cls is not None else "circle-open"
