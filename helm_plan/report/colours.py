"""The one home of the report's colours: one per policy, one per router, and the palette.

Every figure that draws a policy or a router takes its colour from here, so
a name has the same colour on every chart of a page.
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
}
"""Colour of each policy name."""

ROUTER_COLOURS = {"jsq": "#6c757d", "affinity": "#2a9d8f", "kv-overlap": "#e9c46a",
                  "helm": "#d62828", "round-robin": "#adb5bd", "random": "#8d99ae",
                  "p2c": "#457b9d"}  # fmt: skip
"""Colour of each router name."""


def policy_colour(policy: str, i: int) -> str:
    """The colour of ``policy`` (the ``i``-th series of its chart)."""
    return POLICY_COLOURS.get(policy, PALETTE[i % len(PALETTE)])


def router_colour(router: str) -> str:
    """The colour of ``router``."""
    return ROUTER_COLOURS.get(router, "#333")
