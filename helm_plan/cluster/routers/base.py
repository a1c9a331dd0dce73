"""What every router shares: the :class:`Router` base, its registry, the view a rule reads, and
the compiled helpers the rules use.

A router is one class in one module of this package: its name, colour, marker
symbol, display order, parameters and its rule, :meth:`Router.route`, a
plain function compiled by numba the first time a cluster runs it. Every rule
has the same signature: ``route(q, v) -> (node, EMB miss estimate in bytes)``,
where ``q`` is the :class:`Request` being routed and ``v`` the
:class:`RouteView`, everything a router may read at the request's arrival
(DESIGN.md, Cluster and routing):

- ``v.load[n]``: per-node counters over requests dispatched and not yet
  completed (``CNT`` requests, ``EST`` the router's estimate of their service
  in integer nanoseconds, ``DTOK``/``DBLK`` Dynamo's active prefill tokens and
  blocks). They change at dispatch and when a batch's finish time has passed,
  never with a queued request's true service time. The estimate of a request
  is the latency model's time for a batch of one with the prefill tokens the
  KV directory says it computes there, and the EMB bytes the rule said it
  would miss (only ``helm`` models them);
- the KV directory ``v.k_len[u, n]``/``v.k_start[u, n]`` (users × nodes):
  which prefix of which user each node holds;
- the EMB hot set ``v.e_last[n, key] >= 0`` (nodes × keys): resident keys;
- the trace's ids and the latency model, for estimates a router makes itself.

Counters are integers so a decision does not depend on the order completions
were folded in (the brute-force cluster of the tests recomputes them from
scratch and must agree bit for bit). Random picks use a counter-based hash of
``(seed, request, k)``, so routing is deterministic for a seed and a decision
never depends on anything drawn for another request.
"""

from __future__ import annotations

import warnings
from abc import ABC
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import numba as nb
import numpy as np
from numba.core.errors import NumbaExperimentalFeatureWarning
from numba.core.typing.typeof import typeof_impl

from helm_plan._hash import counter_hash
from helm_plan.errors import ConfigError
from helm_plan.latency.kernel import attention_pairs, batch_time_s

DYNAMO_BLOCK_TOKENS = 16
"""KV block size of the Dynamo cost form (Dynamo's DEFAULT_KV_CACHE_BLOCK_SIZE, local_model.rs)."""

CNT, EST, DTOK, DBLK = range(4)
"""Columns of the per-node load counters."""
N_LOAD = 4


class Request(NamedTuple):
    """The request being routed (the kernel builds one per arrival; every field int64)."""

    i: int
    """Its index in the trace (the key of its random draws)."""
    u: int
    """Its user's row in the KV directory."""
    s0: int
    """First history token of its context (the KV directory's prefix start)."""
    L: int  # noqa: N815 (the project's name for the context length)
    """Context tokens."""
    M: int  # noqa: N815
    """Candidates."""


class RouteView(NamedTuple):
    """Everything a rule may read (arrays are the simulator's own, shared, never copied)."""

    load: np.ndarray
    k_len: np.ndarray
    k_start: np.ndarray
    e_last: np.ndarray
    rstate: np.ndarray
    """The router's own mutable state (round-robin's counter)."""
    params: np.ndarray
    """:meth:`Router.params`."""
    ring_h: np.ndarray
    ring_n: np.ndarray
    seed: int
    """The routers' seed (:func:`router_seed`), apart from the candidate draws."""
    block_tokens: int
    res_h: np.ndarray
    """Scratch, one per node."""
    res_c: np.ndarray
    slots: int
    """Streams per node."""
    coeffs: np.ndarray
    """The latency model's coefficients."""
    tok_b: int
    cand_b: int
    # the trace and its EMB keys (helm_plan.cache._kernels.serve_request's names)
    user: np.ndarray
    user_ids: np.ndarray
    hist_end: np.ndarray
    uoff: np.ndarray
    hist: np.ndarray
    tok_off: np.ndarray
    tok_ring: np.ndarray
    tok_top: np.ndarray
    coff: np.ndarray
    cvals: np.ndarray
    explicit: bool
    cand_seed: int
    window: int
    item_keys: np.ndarray
    hist_tab: np.ndarray
    cand_tab: np.ndarray
    key_bytes: np.ndarray
    direct: int


class Router(ABC):
    """One routing rule: its name, display facts, parameters and compiled rule."""

    name: ClassVar[str]
    colour: ClassVar[str]
    """Its colour on every chart of the report."""
    symbol: ClassVar[str]
    """Its plotly marker symbol (charts that colour by policy mark the router by shape)."""
    order: ClassVar[int] = 1000
    """Position in listings (the CLI's choices, error hints); ties keep registration order."""

    @staticmethod
    def route(q: Request, v: RouteView) -> tuple[int, float]:
        """The rule (compiled with numba): (node for request ``q``, its EMB miss estimate)."""
        raise NotImplementedError

    def params(self, n_nodes: int) -> np.ndarray:
        """Float parameters the rule reads as ``v.params`` for ``n_nodes`` nodes."""
        return np.zeros(2)

    def ring(self, nodes: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Consistent-hashing ring (sorted positions, node per position); empty if unused."""
        return np.zeros(1, np.uint64), np.zeros(1, np.int64)


ROUTERS: dict[str, type[Router]] = {}
"""Registered routers by name, in display order."""


def register_router(cls: type[Router]) -> type[Router]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if cls.route is Router.route:  # else the first cluster run would fail inside numba
        raise TypeError(f"router {cls.__name__} has no rule: define its staticmethod route(q, v)")
    ROUTERS[cls.name] = cls
    # sorted is stable: equal orders keep registration order
    ordered = sorted(ROUTERS.items(), key=lambda kv: kv[1].order)
    ROUTERS.clear()
    ROUTERS.update(ordered)
    return cls


def get_router(name: str) -> Router:
    """The router called ``name``, with a precise error."""
    cls = ROUTERS.get(name.strip())
    if cls is None:
        raise ConfigError(f"unknown router {name!r}", hint=f"use one of {', '.join(ROUTERS)}")
    return cls()


RESULT = nb.types.Tuple((nb.types.int64, nb.types.float64))
REQUEST = nb.typeof(Request(0, 0, 0, 0, 0))
_COMPILED: dict[tuple[Callable, object], object] = {}

# The kernel calls the rule through a first-class function (numba marks the feature
# experimental); it is what keeps the kernel one compiled function for every router, so the
# warning says nothing new on every run.
warnings.filterwarnings("ignore", "First-class function", NumbaExperimentalFeatureWarning)


class _Rule(tuple):
    """The kernel's ``route`` argument (:func:`compiled_rule`): a one-element tuple of the
    compiled rule that carries its numba type. numba's dispatcher types a tuple holding a
    dispatcher in Python, and typing a first-class function of the view's signature hashes
    the whole view type: ~60 µs at every window of every simulation (~1.2 µs with the type
    carried); this type is computed once per rule."""

    numba_type: nb.types.Type


@typeof_impl.register(_Rule)
def _typeof_rule(val: _Rule, c: object) -> nb.types.Type:
    return val.numba_type


def compiled_rule(router: Router, view: RouteView) -> tuple:
    """``router``'s rule compiled for ``view``'s types, as the kernel's ``route`` argument.

    The kernel takes it as a one-element tuple: a dispatcher with exactly one signature in a
    tuple is typed as a first-class function of that signature, the same type for every
    router. So the kernel is compiled (and cached) once, holds no rule, and calls whichever
    rule it is handed: a cached kernel cannot keep an old dispatch when routers are added,
    removed or edited (each rule is cached beside its own source, which numba's cache checks).
    A view with other array types (read-only, another dtype) compiles its own copy of the rule.
    """
    fn = type(router).route
    sig = RESULT(REQUEST, nb.typeof(view))
    key = (fn, sig)
    if key not in _COMPILED:
        # only the kernel calls it: no Python wrapper to unbox the whole view (a fifth of the
        # seven rules' cold compile time)
        rule = _Rule((nb.njit(sig, cache=True, no_cpython_wrapper=True)(fn),))
        rule.numba_type = nb.typeof(tuple(rule))
        _COMPILED[key] = rule
    return _COMPILED[key]


# ---- compiled helpers the rules and the kernel share ----------------------------------------


@nb.njit(cache=True, inline="always")
def pick(seed, i, k, n):
    """A uniform integer in [0, n) keyed by (seed, i, k): multiply-shift of a 32-bit draw."""
    z = counter_hash(seed, i, k)
    return np.int64(((z >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@nb.njit(cache=True, inline="always")
def ring_hash(seed, a, b):
    """Position on the consistent-hashing ring of (a, b): a node's virtual point or a user."""
    return counter_hash(seed, a, b)


@nb.njit(cache=True, inline="always")
def est_service(c, ncomp, L, M, look, miss):
    """The router's service estimate: the latency model's batch of one with ``miss`` bytes missed."""
    return batch_time_s(c, 1.0, float(ncomp + M), attention_pairs(float(ncomp), float(L), float(M)),
                        float(look), miss, miss)  # fmt: skip


@nb.njit(cache=True, inline="always")
def to_ns(x):
    return np.int64(x * 1e9 + 0.5)


@nb.njit(cache=True, inline="always")
def cached_prefix(k_len, k_start, u, n, s0):
    """Tokens of user ``u``'s context the directory says node ``n`` can reuse."""
    if k_len[u, n] >= 0 and k_start[u, n] == s0:
        return k_len[u, n]
    return np.int64(0)


@nb.njit(cache=True)
def _ring(nodes, vnodes, seed):
    h = np.empty(len(nodes) * vnodes, np.uint64)
    owner = np.empty(len(nodes) * vnodes, np.int64)
    k = 0
    for n in nodes:
        for v in range(vnodes):
            h[k] = ring_hash(seed, n, v)
            owner[k] = n
            k += 1
    return h, owner


def build_ring(nodes: np.ndarray, vnodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ring of ``nodes`` with ``vnodes`` points each: (sorted positions, owner node)."""
    if len(nodes) == 0:
        raise ConfigError("a ring needs at least one node", hint="pass --nodes >= 1")
    h, owner = _ring(np.asarray(nodes, np.int64), vnodes, seed)
    # sorted by NumPy, not in the compiled loop: numba's mergesort cost ~1 s of a fresh
    # install's compile; a stable sort gives the same order
    order = np.argsort(h, kind="stable")
    return h[order], owner[order]


def router_seed(seed: int) -> int:
    """The routers' seed from the run seed (kept apart from the candidate draws)."""
    return int(np.random.SeedSequence([seed, 0x7207E]).generate_state(1)[0])
