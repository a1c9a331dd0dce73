"""Per-node policies from the named-policy catalogue, and what ``best-static`` means in a fleet.

Every node runs its own instance of the policy (a deep copy, reset before
window 0) and decides from its own windows only, so closed-loop policies
(``controller``, ``hill-climb``, anything implementing
:class:`~helm_plan.sim.policy.Policy`) plug in unchanged.

``best-static`` in a cluster is **one r for every node**: the static split
an operator deploys fleet-wide, searched on the cluster's own whole-trace
P99 under the chosen router (ties: higher attainment, then smaller r). A
per-node search is not well posed: a node's traffic depends on every node's
ratio (``helm`` routes by what a node's r lets it keep resident), so the
per-node optimum is a fixed point of routing and splits, not a search over
one node's trace. The search (:func:`~helm_plan.oracle.search.static_search`)
evaluates the oracle's coarse grid (default step 0.1) and edge points (0.02,
0.98) as independent cluster runs over the executor, then brackets the best
point on the ``ratio_step`` lattice (up to ``trials`` more runs, two at a time)
until neither side can beat it by ``flat_tol``: P99(r) can have a cliff
between two grid points (a regime's KV working set that fits only below
r = 0.0125), which the grid's half-steps never found.

The oracle-schedule policies (``oracle``, ``naive-adaptive``, ``adaptive``)
label one node's trace and have no per-node meaning; they are refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl

from helm_plan.cluster.config import ClusterConfig
from helm_plan.cluster.sim import simulate_cluster
from helm_plan.errors import ConfigError
from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.oracle import OracleConfig
from helm_plan.oracle.search import Eval, static_eval, static_search
from helm_plan.policies import PolicyEnv, parse_policy, usage
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import Policy, StaticPolicy


@dataclass(frozen=True)
class FleetStatic:
    """The fleet-wide best static r and every r evaluated."""

    ratio: float
    """Best static r (every node)."""
    p99_ms: float
    """Cluster P99 at ``ratio``, ms."""
    slo_attainment: float
    """Cluster SLO attainment at ``ratio``."""
    evaluated: pl.DataFrame
    """r, p99_ms, slo_attainment for every r simulated, sorted by r."""


@dataclass(frozen=True)
class NodePolicies:
    """What every node runs: its policy, and the cluster config (refill set by the spec)."""

    spec: str
    """Canonical policy spec."""
    policy: Policy
    """The policy each node gets a copy of."""
    cfg: ClusterConfig
    """The cluster config to simulate with."""
    fleet_static: FleetStatic | None = None
    """The search behind ``best-static``."""


def static_point(shared: tuple[NodeContext, ClusterConfig], r: float) -> tuple[float, float]:
    """(cluster P99 ms, attainment) with every node at static ``r`` (an executor task)."""
    ctx, cfg = shared
    res = simulate_cluster(ctx, r, cfg)
    return res.p99_ms, res.slo_attainment


def _key(r: float, ev: tuple[float, float]) -> tuple[float, float, float]:
    p99, att = ev
    return (p99 if np.isfinite(p99) else np.inf, -att if np.isfinite(att) else 0.0, r)


def fleet_best_static(
    ctx: NodeContext,
    cfg: ClusterConfig,
    oracle: OracleConfig | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> FleetStatic:
    """Search the one static r for every node with the lowest cluster P99 (see module doc)."""
    ocfg = oracle or OracleConfig()
    ex = executor or SerialExecutor()
    shared = (ctx, cfg)
    evals: dict[float, tuple[float, float]] = {}
    ranked: dict[float, Eval] = {}

    def run(rs: list[float]) -> None:
        rs = [r for r in rs if r not in evals]
        for r, ev in zip(rs, ex.map(static_point, rs, shared=shared, progress=progress,
                                    label=lambda r: f"best static r={r:g}"), strict=True):  # fmt: skip
            evals[r] = ev
            ranked[r] = static_eval(*ev)

    static_search(run, ranked, ocfg)
    best = min(evals, key=lambda r: _key(r, evals[r]))
    rs = sorted(evals)
    table = pl.DataFrame({"r": rs, "p99_ms": [evals[r][0] for r in rs],
                          "slo_attainment": [evals[r][1] for r in rs]})  # fmt: skip
    return FleetStatic(best, evals[best][0], evals[best][1], table)


def node_policies(
    spec: str,
    ctx: NodeContext,
    cfg: ClusterConfig,
    env: PolicyEnv | None = None,
) -> NodePolicies:
    """The policy every node runs for ``spec`` (``best-static`` searches the fleet-wide r)."""
    env = env or PolicyEnv()
    ps = parse_policy(spec)
    if ps.in_cluster == "refused":
        raise ConfigError(
            f"policy {ps.spec!r} labels one node's trace and has no per-node meaning in a cluster",
            hint=usage(cluster=True),
        )
    if ps.in_cluster == "fleet-search":
        fs = fleet_best_static(ctx, cfg, env.oracle, env.executor, env.progress)
        return NodePolicies(ps.spec, StaticPolicy(fs.ratio, ps.spec), cfg, fs)
    built = ps.build(ctx, cfg.node, env)
    if built.refill is not None:
        cfg = dataclasses.replace(cfg, node=dataclasses.replace(cfg.node, refill=built.refill))
    return NodePolicies(ps.spec, built.policy, cfg)
