"""The policy registry: the spec base class, every name's facts, and the one parser.

A spec class carries every fact the tool needs about its name (kind, colour,
display order, the runs it is a default of, the other spellings it answers to);
analyze, plan, the report's colours and the CLI's usage text read them from
here, so no list of policy names is kept anywhere else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from helm_plan.errors import ConfigError
from helm_plan.exec import Executor, Progress
from helm_plan.oracle import BestStatic, Labels, OracleConfig
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import Policy

__all__ = [
    "ALIASES",
    "DEFAULTS_OF",
    "FLEET_STATIC",
    "KINDS",
    "POLICIES",
    "POLICY_FACTS",
    "Built",
    "PolicyEnv",
    "PolicyFacts",
    "PolicySpec",
    "baseline_policy",
    "canonical",
    "default_policies",
    "is_static",
    "parse_policy",
    "register_facts",
    "register_policy",
    "usage",
]

KINDS = ("static", "adaptive", "baseline")
"""static: one r all trace long; adaptive: r moves per window; baseline: the static policy every
saving is measured against (exactly one)."""
DEFAULTS_OF = ("analyze", "plan", "analyze-plan")
"""Runs a policy can be a default of: analyze's per-node comparison, ``plan``, analyze's planner."""


@dataclass(frozen=True)
class PolicyEnv:
    """What a spec may use to build its policy."""

    oracle: OracleConfig = field(default_factory=OracleConfig)
    """How searches (best static, oracle labels) run."""
    labels: Labels | None = None
    """This run's oracle labels, if already made (else specs that need them label now)."""
    best_static: BestStatic | None = None
    """This run's best-static search, if already made."""
    executor: Executor | None = None
    """Where independent searches run (default: in process)."""
    progress: Progress | None = None
    """Progress of a search, ``(done, total)``."""


@dataclass(frozen=True)
class Built:
    """A policy ready to drive a node, with the refill mode it needs."""

    policy: Policy
    """The closed-loop policy."""
    refill: str | None = None
    """Refill mode the spec requires (None: the node config's)."""


@dataclass(frozen=True)
class PolicyFacts:
    """What the tool shows and groups by for one policy name (its spec class's class variables)."""

    name: str
    """The name a user types (before any ``:argument``)."""
    kind: str
    """One of :data:`KINDS`."""
    colour: str
    """Its colour on every chart of the report."""
    order: int
    """Display order: tables, charts and default lists sort by it."""
    usage: str = ""
    """How to type it in the CLI's usage text (default: the name)."""
    defaults_of: tuple[str, ...] = ()
    """The runs (:data:`DEFAULTS_OF`) it is a default of when the user names no policies."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS or not set(self.defaults_of) <= set(DEFAULTS_OF):
            raise ValueError(
                f"policy {self.name}: kind {self.kind!r} or {self.defaults_of} unknown"
            )


POLICY_FACTS: dict[str, PolicyFacts] = {}
"""Facts of every policy name, in registration order: the specs, plus names analyze reports
that no user types (:data:`FLEET_STATIC`)."""


def register_facts(facts: PolicyFacts) -> str:
    """Record ``facts``; at most one baseline. Returns the name."""
    if facts.kind == "baseline" and any(
        f.kind == "baseline" and f.name != facts.name for f in POLICY_FACTS.values()
    ):
        raise ValueError(f"policy {facts.name}: a second baseline ({baseline_policy()} is one)")
    POLICY_FACTS[facts.name] = facts
    return facts.name


def _ordered(names: list[str]) -> tuple[str, ...]:
    return tuple(sorted(names, key=lambda n: POLICY_FACTS[n].order))


def default_policies(run: str) -> tuple[str, ...]:
    """The specs ``run`` (one of :data:`DEFAULTS_OF`) compares when the user names none, in order."""
    return _ordered([n for n in POLICIES if run in POLICY_FACTS[n].defaults_of])


def baseline_policy() -> str:
    """The one policy every saving is measured against (kind ``baseline``)."""
    return next(n for n, f in POLICY_FACTS.items() if f.kind == "baseline")


def canonical(policy: str) -> str:
    """``policy`` (``name`` or ``name:argument``, surrounding blanks dropped) with an alias
    replaced by its spec's name, the argument kept; a name the registry does not know is
    returned as typed (the parser reports it)."""
    name, sep, arg = policy.strip().partition(":")
    return ALIASES.get(name, name) + sep + arg


def is_static(policy: str) -> bool:
    """Whether ``policy`` (``name`` or ``name:argument``, or an alias) keeps one r all trace
    long."""
    f = POLICY_FACTS.get(canonical(policy).partition(":")[0])
    return f is not None and f.kind in ("static", "baseline")


_FLEET_SEARCH_NOTE = " (one r for the fleet)"
"""What :func:`usage` adds after a spec a fleet runs as one search (``in_cluster``)."""


def usage(cluster: bool = False) -> str:
    """How to type every registered spec, in display order (the hint of every policy error,
    the CLI's help); ``cluster``: only the specs a fleet can run (``in_cluster`` not
    ``refused``), those searched once for the whole fleet marked so."""
    specs = [POLICIES[n] for n in _ordered(list(POLICIES))]
    if cluster:
        specs = [c for c in specs if c.in_cluster != "refused"]
    names = [(POLICY_FACTS[c.name].usage or c.name)
             + (_FLEET_SEARCH_NOTE if cluster and c.in_cluster == "fleet-search" else "")
             for c in specs]  # fmt: skip
    return f"use {', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else f"use {names[0]}"


class PolicySpec(ABC):
    """A parsed policy spec; ``build`` makes the runtime policy for one trace.

    A subclass sets ``name``, ``kind``, ``colour`` and ``order`` (and ``usage`` when it takes
    an argument, ``defaults_of`` when a run uses it unasked, ``aliases`` when users spell it
    another way): :func:`register_policy` records them as its :class:`PolicyFacts`.
    """

    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    """Other spellings the parser accepts for ``name`` (every output uses ``name``)."""
    kind: ClassVar[str] = "adaptive"
    colour: ClassVar[str]
    order: ClassVar[int]
    usage: ClassVar[str] = ""
    defaults_of: ClassVar[tuple[str, ...]] = ()
    in_cluster: ClassVar[str] = "per-node"
    """How a fleet runs it: ``per-node`` (every node its own copy), ``fleet-search`` (one r
    searched for the whole fleet) or ``refused`` (no per-node meaning)."""
    takes_arg: ClassVar[bool] = False
    optional_arg: ClassVar[bool] = False
    """With takes_arg: the argument may be left out (``name`` alone)."""
    searches: ClassVar[bool] = False
    """True when building runs a search (worth a progress bar)."""
    plan_weight: ClassVar[float] = 1.0
    """Relative time of a plan's fleet search under it, for the order the plan queues its
    tasks in (heaviest first, so no worker is left with the longest one at the end; never
    changes a result)."""

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        """Build the spec from the text after ``name:`` (None if absent)."""
        return cls()

    @abstractmethod
    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        """The closed-loop policy for ``ctx`` (and the refill mode it needs)."""

    @property
    def spec(self) -> str:
        """The canonical spec string."""
        return self.name


POLICIES: dict[str, type[PolicySpec]] = {}
"""Registered policy specs by name."""
ALIASES: dict[str, str] = {}
"""Every spec's aliases, each to the spec's name."""


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _alias_clash(cls: type[PolicySpec], alias: str) -> str | None:
    """Why ``alias`` cannot be an alias of ``cls`` (None: it can)."""
    if not alias or alias != alias.strip() or ":" in alias or "," in alias:
        return "not a bare name (no blanks around it, no ':' or ',')"
    if alias == cls.name:
        return "its own name"
    if cls.aliases.count(alias) > 1:
        return "declared twice"
    if alias in POLICY_FACTS:
        return f"the name of the policy {alias!r}"
    if ALIASES.get(alias, cls.name) != cls.name:
        return f"already an alias of {ALIASES[alias]!r}"
    return None


def register_policy(cls: type[PolicySpec]) -> type[PolicySpec]:
    """Class decorator: make ``cls`` parseable under ``cls.name`` and its ``aliases``, with its
    facts. A name or an alias that another policy already answers to is refused (ValueError);
    the same class registered again (a module reloaded) replaces itself."""
    old = POLICIES.get(cls.name)
    if cls.name in ALIASES:
        raise ValueError(f"policy {cls.name!r}: the name is already an alias of "
                         f"{ALIASES[cls.name]!r}")  # fmt: skip
    if cls.name in POLICY_FACTS and (old is None or _where(old) != _where(cls)):
        by = _where(old) if old is not None else "analyze's own rows"
        raise ValueError(f"policy {cls.name!r}: the name is already taken by {by}")
    for alias in cls.aliases:
        why = _alias_clash(cls, alias)
        if why is not None:
            raise ValueError(f"policy {cls.name!r}: alias {alias!r} is {why}")
    register_facts(PolicyFacts(cls.name, cls.kind, cls.colour, cls.order, cls.usage,
                               cls.defaults_of))  # fmt: skip
    POLICIES[cls.name] = cls
    for a in [a for a, n in ALIASES.items() if n == cls.name]:  # a spec registered again
        del ALIASES[a]
    ALIASES.update(dict.fromkeys(cls.aliases, cls.name))
    return cls


FLEET_STATIC = register_facts(PolicyFacts("fleet-static", "static", "#0b2545", 8))
"""The planned fleet's own split replayed on the analysed node: analyze reports it (its r comes
from the plan), no user types it."""


def parse_policy(spec: str) -> PolicySpec:
    """Parse a policy spec (its name or an alias, then ``:argument`` if it takes one), with a
    precise error for unknown or malformed ones; the spec's ``spec`` spells its name."""
    name, sep, arg = canonical(spec).partition(":")
    cls = POLICIES.get(name)
    if cls is None:
        raise ConfigError(f"unknown policy {spec!r}", hint=usage())
    if cls.takes_arg and not sep and not cls.optional_arg:
        raise ConfigError(f"policy {name!r} needs an argument", hint=usage())
    if not cls.takes_arg and sep:
        raise ConfigError(f"policy {name!r} takes no argument, got {spec!r}", hint=usage())
    return cls.from_arg(arg if sep else None)
