"""How a cluster is simulated: node count, router, the node config every node shares, seed."""

from __future__ import annotations

from dataclasses import dataclass, field

from helm_plan.cluster.routers import get_router
from helm_plan.config import require_at_most, require_int
from helm_plan.sim.config import NodeConfig

DEFAULT_NODES = 32
"""Default fleet size (DESIGN.md, Cluster and routing)."""
DEFAULT_ROUTER = "helm"
MAX_NODES = 4096
"""Largest fleet simulated: every node's caches, queue and policy live in memory and step every
window (4,096 nodes of a 3,000-request trace took 3.4 GB and 31 s; memory grows with nodes ×
distinct items); plan a share of the traffic (a region, a shard) for a larger fleet."""
NODES_REASON = "every node's caches and queue are simulated in memory; plan a share of the traffic"


@dataclass(frozen=True)
class ClusterConfig:
    """How a cluster is simulated."""

    nodes: int = DEFAULT_NODES
    """GPU nodes, each with its own caches, queue, refill and policy."""
    router: str = DEFAULT_ROUTER
    """Router name (see helm_plan.cluster.routers)."""
    node: NodeConfig = field(default_factory=NodeConfig)
    """How every node is simulated (SLO, window, slots, batching, refill, warm-up)."""
    seed: int = 0
    """Seed of the routers' random choices (candidate draws are seeded by the trace arrays)."""

    def __post_init__(self) -> None:
        require_int("nodes", self.nodes, 1)
        require_at_most("nodes", self.nodes, MAX_NODES, NODES_REASON)
        require_int("seed", self.seed, 0)
        get_router(self.router)  # a precise error for an unknown name
