"""The cluster simulator: N GPU nodes with their own caches, queues, refill and policies, and
the routers that spread requests over them (DESIGN.md, Cluster and routing).

- :func:`simulate_cluster` (:mod:`.sim`): the window loop in Python, one compiled request
  kernel per window over all nodes (:mod:`._kernel`);
- :mod:`.routers`: the router registry, one module per router (round-robin, random, jsq,
  p2c, affinity, kv-overlap, helm), and what each may see;
- :class:`ClusterResult` (:mod:`.result`): cluster and per-node figures;
- :mod:`.policies`: every node's copy of a catalogue policy, and the fleet-wide best static;
- :mod:`.compare`: router × policy grids over an executor, and a paired bootstrap of two
  routers.
"""

from __future__ import annotations

from helm_plan.cluster.compare import GridPoint, RouterCI, compare, router_ci, run_point
from helm_plan.cluster.config import DEFAULT_NODES, DEFAULT_ROUTER, MAX_NODES, ClusterConfig
from helm_plan.cluster.policies import FleetStatic, NodePolicies, fleet_best_static, node_policies
from helm_plan.cluster.result import ClusterResult
from helm_plan.cluster.routers import ROUTERS, Router, get_router, register_router
from helm_plan.cluster.sim import simulate_cluster

__all__ = [
    "DEFAULT_NODES",
    "MAX_NODES",
    "DEFAULT_ROUTER",
    "ROUTERS",
    "ClusterConfig",
    "ClusterResult",
    "FleetStatic",
    "GridPoint",
    "NodePolicies",
    "Router",
    "RouterCI",
    "compare",
    "fleet_best_static",
    "get_router",
    "node_policies",
    "register_router",
    "router_ci",
    "run_point",
    "simulate_cluster",
]
