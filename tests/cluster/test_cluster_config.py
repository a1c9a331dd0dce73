"""The cluster config's checks (``cluster/config.py``): each bad field is named with its value,
and each boundary value is accepted (issue 16, item 4)."""

from __future__ import annotations

import re

import pytest

from helm_plan.cluster.config import DEFAULT_NODES, DEFAULT_ROUTER, MAX_NODES, ClusterConfig
from helm_plan.errors import ConfigError
from helm_plan.sim import NodeConfig


def test_defaults():
    c = ClusterConfig()
    assert (c.nodes, c.router, c.seed, c.node) == (32, "helm", 0, NodeConfig())
    assert (DEFAULT_NODES, DEFAULT_ROUTER) == (32, "helm")


def test_boundaries_are_accepted():
    c = ClusterConfig(nodes=1, router="jsq", seed=0)
    assert (c.nodes, c.router, c.seed) == (1, "jsq", 0)
    assert ClusterConfig(nodes=MAX_NODES, seed=12345).nodes == MAX_NODES


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"nodes": -3}, "nodes must be a positive integer, got -3"),
        ({"nodes": 0}, "nodes must be a positive integer, got 0"),
        ({"nodes": 2.0}, "nodes must be a positive integer, got 2.0"),
        ({"nodes": True}, "nodes must be a positive integer, got True"),
        (
            {"nodes": 4097},
            "nodes must be at most 4,096 (every node's caches and queue are simulated in memory; plan a share of the traffic), got 4,097",
        ),
        ({"seed": -1}, r"seed must be an integer >= 0, got -1"),
        ({"seed": 1.5}, r"seed must be an integer >= 0, got 1.5"),
        ({"router": "fastest"}, "unknown router 'fastest'"),
    ],
)
def test_bad_fields_are_named_with_their_value(kw, msg):
    with pytest.raises(ConfigError, match=f"^{re.escape(msg)}$"):
        ClusterConfig(**kw)
