"""The one home of the report's colours and marker symbols, one per policy and per router.

Every figure that draws a policy or a router takes its colour (and a
router its marker symbol) from here, so a name looks the same on every
chart of a page. Every shipped policy (:class:`helm_plan.policies.PolicyKind`)
and router (:class:`helm_plan.cluster.routers.RouterKind`) has an entry;
``tests/report/test_report_colours.py`` holds the two lists to it. A policy
typed with an argument (``static:0.3``, ``controller:PATH``) takes its
name's colour.
"""

from __future__ import annotations

PALETTE = ("#1f4e79", "#c0504d", "#4f8f3a", "#8064a2", "#d08a2c", "#2c9fa8", "#7f7f7f")
"""Colours of series that are not a policy or a router, in order of use."""

POLICY_COLOURS = {
    "best-static": "#1f4e79",
    "emb-max": "#d08a2c",
    "kv-max": "#8064a2",
    "naive-adaptive": "#c0504d",
    "adaptive": "#4f8f3a",
    "controller": "#e377c2",
    "hill-climb": "#8c564b",
    "threshold": "#6a3d9a",
    "fleet-static": "#0b2545",
    "oracle": "#17becf",
    "static": "#7f7f7f",
    "schedule": "#bcbd22",
}
"""Colour of each policy name."""

ROUTER_COLOURS = {
    "jsq": "#264653",
    "affinity": "#2a9d8f",
    "kv-overlap": "#e9c46a",
    "helm": "#d62828",
    "round-robin": "#adb5bd",
    "random": "#9b5de5",
    "p2c": "#457b9d",
}
"""Colour of each router name."""

ROUTER_SYMBOLS = {
    "jsq": "circle",
    "affinity": "square",
    "kv-overlap": "diamond",
    "helm": "star",
    "round-robin": "triangle-up",
    "random": "x",
    "p2c": "cross",
}
"""Marker symbol of each router name (charts that colour by policy mark the router by shape)."""

_OTHER = "#333333"
"""A name with no entry (none shipped): dark grey, never a registered name's colour."""


def policy_colour(policy: str) -> str:
    """The colour of ``policy`` (``name`` or ``name:argument``)."""
    return POLICY_COLOURS.get(policy.partition(":")[0], _OTHER)


def router_colour(router: str) -> str:
    """The colour of ``router``."""
    return ROUTER_COLOURS.get(router, _OTHER)


def router_symbol(router: str) -> str:
    """The marker symbol of ``router``."""
    return ROUTER_SYMBOLS.get(router, "circle-open")
