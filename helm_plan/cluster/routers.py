"""Request routers: an enum of shipped names and a registry (adding a router is one class).

Each class names its rule, carries its parameters, its report colour and marker
symbol (the report reads them from :data:`ROUTERS`) and documents its source;
the rule itself is a compiled function in :mod:`helm_plan.cluster._route`
that the request kernel dispatches to by ``code``. A router sees only what a
real router knows at the request's arrival (DESIGN.md, Cluster and routing):

- **backlog estimate** per node: the sum, over requests dispatched there and
  not yet finished, of the router's estimate of each one's service, the
  latency model's time for a batch of one with the prefill tokens the KV
  directory says it computes there (EMB misses only where the router models
  them: ``helm``), in integer nanoseconds; plus the outstanding request count.
  A request leaves the counters when its batch's finish time has passed (the
  node reports completions), so no router reads a queued request's true
  service time;
- **KV directory**: which user prefix each node holds, and how long (the
  node's KV cache as of its last served request, as KV events report it);
- **EMB hot set**: whether a key is resident on a node.

Random choices hash ``(seed, request index, k)``, so routing is
deterministic for a seed and independent of anything drawn elsewhere.
"""

from __future__ import annotations

from abc import ABC
from enum import StrEnum
from typing import ClassVar

import numba as nb
import numpy as np

from helm_plan.cluster import _route as R
from helm_plan.errors import ConfigError

DYNAMO_BLOCK_TOKENS = 16
"""KV block size of the Dynamo cost form (Dynamo's DEFAULT_KV_CACHE_BLOCK_SIZE, local_model.rs)."""


class RouterKind(StrEnum):
    """Shipped router names."""

    ROUND_ROBIN = "round-robin"
    RANDOM = "random"
    JSQ = "jsq"
    P2C = "p2c"
    AFFINITY = "affinity"
    KV_OVERLAP = "kv-overlap"
    HELM = "helm"


class Router(ABC):
    """One routing rule: its name, kernel code and parameters."""

    name: ClassVar[str]
    code: ClassVar[int]
    colour: ClassVar[str]
    """Its colour on every chart of the report."""
    symbol: ClassVar[str]
    """Its plotly marker symbol (charts that colour by policy mark the router by shape)."""

    def params(self, n_nodes: int) -> np.ndarray:
        """Float parameters the kernel passes to the rule (``rp``) for ``n_nodes`` nodes."""
        return np.zeros(2)

    def ring(self, nodes: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Consistent-hashing ring (sorted positions, node per position); empty if unused."""
        return np.zeros(1, np.uint64), np.zeros(1, np.int64)


ROUTERS: dict[str, type[Router]] = {}
"""Registered routers by name."""


def register_router(cls: type[Router]) -> type[Router]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    ROUTERS[cls.name] = cls
    return cls


def get_router(name: str) -> Router:
    """The router called ``name``, with a precise error."""
    cls = ROUTERS.get(name.strip())
    if cls is None:
        raise ConfigError(f"unknown router {name!r}", hint=f"use one of {', '.join(ROUTERS)}")
    return cls()


@register_router
class RoundRobin(Router):
    """Node ``k mod N`` for the k-th request: the default of nginx, Envoy and Kubernetes
    Services; it ignores load and caches, so per-node load varies only with request size."""

    name = RouterKind.ROUND_ROBIN.value
    colour = "#adb5bd"
    symbol = "triangle-up"
    code = R.ROUND_ROBIN


@register_router
class Random(Router):
    """A uniform node per request from a seeded counter hash. Poisson arrivals split into
    independent Poisson streams of rate λ/N (each node an M/G/1 queue); the classic baseline
    of the supermarket model (Mitzenmacher, IEEE TPDS 2001)."""

    name = RouterKind.RANDOM.value
    colour = "#9b5de5"
    symbol = "x"
    code = R.RANDOM


@register_router
class Jsq(Router):
    """Join the shortest queue, measured as least outstanding work: the node with the lowest
    backlog estimate (ties: fewer outstanding requests, then rotating from node i mod N).
    Least-work-left dispatching (Harchol-Balter, Performance Modeling and Design of Computer
    Systems, 2013, ch. 24); with exact remaining work it equals a central M/G/N queue."""

    name = RouterKind.JSQ.value
    colour = "#264653"
    symbol = "circle"
    code = R.JSQ


@register_router
class P2c(Router):
    """Power of two choices: two distinct seeded random nodes, the one with the lower backlog
    estimate (Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing", IEEE
    TPDS 2001; Envoy's LEAST_REQUEST). Near-JSQ balance from two probes."""

    name = RouterKind.P2C.value
    colour = "#457b9d"
    symbol = "cross"
    code = R.P2C


@register_router
class Affinity(Router):
    """Consistent hashing on the user with bounded loads (Mirrokni, Thorup, Zadimoghaddam,
    "Consistent Hashing with Bounded Loads", SODA 2018): each node owns ``vnodes`` points on a
    hash ring; a user goes to the first node clockwise from its point whose outstanding requests
    stay within ``ceil((1 + eps) · (total + 1) / N)``. A user keeps its node (and its KV prefix)
    while loads are within the bound; adding or removing a node moves only that node's users.
    ``eps = 0.25``: the 1.25 imbalance constant of Vimeo's deployment (liblb ``bounded``) and
    brpc's ``c_murmurhash_bl`` default; load is outstanding requests, as in both."""

    name = RouterKind.AFFINITY.value
    colour = "#2a9d8f"
    symbol = "square"
    code = R.AFFINITY
    eps: float = 0.25
    vnodes: int = 64

    def params(self, n_nodes: int) -> np.ndarray:
        return np.array([self.eps, float(n_nodes)])

    def ring(self, nodes: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return build_ring(np.asarray(nodes, np.int64), self.vnodes, seed)


@register_router
class KvOverlap(Router):
    """Dynamo's KV-aware router (ai-dynamo/dynamo, lib/llm/src/kv_router/scheduler.rs,
    ``DefaultWorkerSelector::select_worker``, read at upstream commit e3619ce0 of Aug 2025 in
    the mirror yuekaizhang/dynamo, the upstream snapshot being too large to fetch): each node's
    cost is ``overlap_score_weight · prefill_blocks + decode_blocks``, lowest wins, ties
    uniformly at random (temperature 0). ``prefill_blocks`` = (node's active prefill tokens +
    this request's tokens not covered by whole cached prefix blocks) / block size;
    ``decode_blocks`` = node's active blocks + this request's blocks (sequence.rs,
    ``potential_blocks_and_tokens``). Defaults: weight 1.0 (kv_router.rs), 16-token blocks
    (local_model.rs). Here a request's tokens are its context plus candidates; its KV stays
    active, and its prefill counts, until its batch finishes (single-pass GR has no decode)."""

    name = RouterKind.KV_OVERLAP.value
    colour = "#e9c46a"
    symbol = "diamond"
    code = R.KV_OVERLAP
    overlap_score_weight: float = 1.0

    def params(self, n_nodes: int) -> np.ndarray:
        return np.array([self.overlap_score_weight, 0.0])


@register_router
class Helm(Router):
    """EMB-KV-aware: the node with the lowest estimated completion time, backlog estimate /
    streams + this request's service there from the latency model, with the prefill tokens the
    KV directory says that node still has to compute and the EMB bytes it would miss there,
    estimated from the residency of the request's newest ``hist_sample`` history tokens and first
    ``cand_sample`` candidates in that node's hot set (so a node's current r, through what it
    can keep resident, enters the choice). Ties go to fewer outstanding requests, then rotate
    from node i mod N. At light load it concentrates requests on the nodes whose caches are warm
    (the backlog term pushes back only once queues form): the imbalance figure shows it. This
    project's router (DESIGN.md, Cluster and routing)."""

    name = RouterKind.HELM.value
    colour = "#d62828"
    symbol = "star"
    code = R.HELM
    hist_sample: int = 8
    cand_sample: int = 8

    def params(self, n_nodes: int) -> np.ndarray:
        return np.array([float(self.hist_sample), float(self.cand_sample)])


@nb.njit(cache=True)
def _ring(nodes, vnodes, seed):
    h = np.empty(len(nodes) * vnodes, np.uint64)
    owner = np.empty(len(nodes) * vnodes, np.int64)
    k = 0
    for n in nodes:
        for v in range(vnodes):
            h[k] = R.ring_hash(seed, n, v)
            owner[k] = n
            k += 1
    order = np.argsort(h, kind="mergesort")
    return h[order], owner[order]


def build_ring(nodes: np.ndarray, vnodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ring of ``nodes`` with ``vnodes`` points each: (sorted positions, owner node)."""
    if len(nodes) == 0:
        raise ConfigError("a ring needs at least one node", hint="pass --nodes >= 1")
    return _ring(np.asarray(nodes, np.int64), vnodes, seed)


def router_seed(seed: int) -> int:
    """The routers' seed from the run seed (kept apart from the candidate draws)."""
    return int(np.random.SeedSequence([seed, 0x7207E]).generate_state(1)[0])
