"""The named-policy catalogue: every policy spec a user can type, parsed in one place.

``simulate --policy``, ``analyze`` and (next) the cluster and planner parse
specs here; each spec builds a closed-loop :class:`helm_plan.sim.policy.Policy`
for a prepared trace, possibly after a search (best static) or from oracle
labels. A small registry, like Vidur's schedulers: adding a policy is one
class with a ``name`` that calls :func:`register_policy`.

Specs:

- ``static:R``: r = R in every window;
- ``emb-max``: r = 1 (the whole pool to EMB);
- ``kv-max``: r = 0 (the whole pool to KV);
- ``best-static``: the single r minimising whole-trace P99
  (:func:`helm_plan.oracle.best_static`);
- ``schedule:FILE``: per-window ``r_star`` from an oracle labels parquet;
  windows without requests keep the previous window's ratio;
- ``oracle``: the oracle schedule of this trace (the run's labels, or labelled
  now) at the node's refill mode;
- ``naive-adaptive``, ``adaptive``: the oracle schedule with ``eager`` and
  ``throttled`` refill (the naive and the HELM way to move the split);
- ``controller``, ``controller:PATH``: the controller (:mod:`helm_plan.controller`),
  the shipped default or a trained ``.npz``; its guard falls back to this
  run's best static ratio when the run has searched it (``PolicyEnv.best_static``),
  else to the best ratio of the node's own measured curve;
- ``hill-climb``: ghost-cache hill climbing, a fixed step of 0.05 toward the
  cache whose ghost gain saves more service time;
- ``threshold``, ``threshold:T``: the simple rule, to the measured curve's
  optimum (EMB hit gain = KV reuse gain per byte) when that saves more than
  ``T`` (default 0.005) of the window's busy time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

import numpy as np

from helm_plan.controller.policy import (
    THRESHOLD,
    ControllerPolicy,
    HillClimbPolicy,
    ThresholdPolicy,
)
from helm_plan.controller.runtime import DEFAULT_PATH, Controller
from helm_plan.errors import ConfigError
from helm_plan.exec import Executor, Progress
from helm_plan.oracle import (
    BestStatic,
    Labels,
    OracleConfig,
    best_static,
    label_windows,
    read_labels,
)
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import Policy, SchedulePolicy, StaticPolicy, fill_forward

USAGE = (
    "use static:R, emb-max, kv-max, best-static, schedule:FILE, oracle, naive-adaptive, "
    "adaptive, controller[:PATH], hill-climb or threshold[:T]"
)


class PolicyKind(StrEnum):
    """Shipped policy names."""

    STATIC = "static"
    EMB_MAX = "emb-max"
    KV_MAX = "kv-max"
    BEST_STATIC = "best-static"
    SCHEDULE = "schedule"
    ORACLE = "oracle"
    NAIVE_ADAPTIVE = "naive-adaptive"
    ADAPTIVE = "adaptive"
    CONTROLLER = "controller"
    HILL_CLIMB = "hill-climb"
    THRESHOLD = "threshold"


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


class PolicySpec(ABC):
    """A parsed policy spec; ``build`` makes the runtime policy for one trace."""

    name: ClassVar[str]
    takes_arg: ClassVar[bool] = False
    optional_arg: ClassVar[bool] = False
    """With takes_arg: the argument may be left out (``name`` alone)."""
    searches: ClassVar[bool] = False
    """True when building runs a search (worth a progress bar)."""

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


def register_policy(cls: type[PolicySpec]) -> type[PolicySpec]:
    """Class decorator: make ``cls`` parseable under ``cls.name``."""
    POLICIES[cls.name] = cls
    return cls


def parse_policy(spec: str) -> PolicySpec:
    """Parse a policy spec, with a precise error for unknown or malformed ones."""
    text = spec.strip()
    name, sep, arg = text.partition(":")
    cls = POLICIES.get(name)
    if cls is None:
        raise ConfigError(f"unknown policy {spec!r}", hint=USAGE)
    if cls.takes_arg and not sep and not cls.optional_arg:
        raise ConfigError(f"policy {name!r} needs an argument", hint=USAGE)
    if not cls.takes_arg and sep:
        raise ConfigError(f"policy {name!r} takes no argument, got {spec!r}", hint=USAGE)
    return cls.from_arg(arg if sep else None)


@register_policy
@dataclass(frozen=True)
class Static(PolicySpec):
    """The same r in every window."""

    ratio: float
    """EMB share in [0, 1]."""
    name: ClassVar[str] = "static"
    takes_arg: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (np.isfinite(self.ratio) and 0.0 <= self.ratio <= 1.0):
            raise ConfigError(f"policy static: R must be in [0, 1], got {self.ratio}", hint=USAGE)

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        try:
            r = float(arg or "")
        except ValueError:
            raise ConfigError(
                f"policy static: R must be a number in [0, 1], got {arg!r}", hint=USAGE
            ) from None
        return cls(r)

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        return Built(StaticPolicy(self.ratio, self.spec))

    @property
    def spec(self) -> str:
        return f"static:{self.ratio:g}"


@dataclass(frozen=True)
class _PoolToOneCache(PolicySpec):
    """A fixed extreme ratio named by the policy alone (no argument)."""

    ratio: ClassVar[float]

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        return Built(StaticPolicy(self.ratio, self.name))


@register_policy
@dataclass(frozen=True)
class EmbMax(_PoolToOneCache):
    """r = 1: the whole pool holds EMB rows."""

    name: ClassVar[str] = "emb-max"
    ratio: ClassVar[float] = 1.0


@register_policy
@dataclass(frozen=True)
class KvMax(_PoolToOneCache):
    """r = 0: the whole pool holds KV."""

    name: ClassVar[str] = "kv-max"
    ratio: ClassVar[float] = 0.0


@register_policy
@dataclass(frozen=True)
class BestStaticSpec(PolicySpec):
    """The static r with the lowest whole-trace P99, found by the oracle's search."""

    name: ClassVar[str] = "best-static"
    searches: ClassVar[bool] = True

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        bs = env.best_static or best_static(ctx, node_cfg, env.oracle, env.progress, env.executor)
        return Built(StaticPolicy(bs.ratio, self.name))


@register_policy
@dataclass(frozen=True)
class Schedule(PolicySpec):
    """Per-window ratios from an oracle labels file (its r_star column)."""

    path: Path
    """Labels parquet written by ``helm-plan oracle``."""
    name: ClassVar[str] = "schedule"
    takes_arg: ClassVar[bool] = True

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        if not arg:
            raise ConfigError("policy schedule needs a labels file: schedule:FILE", hint=USAGE)
        p = Path(arg)
        if not p.exists():
            raise ConfigError(
                f"policy schedule: labels file {p} not found",
                hint="make one with `helm-plan oracle TRACE -o FILE`",
            )
        return cls(p)

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        lab = read_labels(self.path)
        n_w = ctx.n_windows(node_cfg.window_s)
        if abs(lab.window_s - node_cfg.window_s) > 1e-9:
            raise ConfigError(
                f"policy schedule: {self.path} was made with window_s={lab.window_s:g}, "
                f"not {node_cfg.window_s:g}",
                hint=f"pass --window-s {lab.window_s:g}",
            )
        if len(lab.r_star) != n_w:
            raise ConfigError(
                f"policy schedule: {self.path} has {len(lab.r_star)} windows but the trace has "
                f"{n_w} windows of {node_cfg.window_s:g} s",
                hint="label this trace with `helm-plan oracle`",
            )
        return Built(SchedulePolicy(fill_forward(lab.r_star), self.spec))

    @property
    def spec(self) -> str:
        return f"schedule:{self.path}"


@register_policy
@dataclass(frozen=True)
class OracleSchedule(PolicySpec):
    """The oracle's per-window r* of this trace, at the node's refill mode."""

    name: ClassVar[str] = "oracle"
    searches: ClassVar[bool] = True
    refill: ClassVar[str | None] = None

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        lab = env.labels or label_windows(ctx, node_cfg, env.oracle, env.progress, env.executor)
        return Built(SchedulePolicy(fill_forward(lab.r_star), self.name), self.refill)


@register_policy
@dataclass(frozen=True)
class NaiveAdaptive(OracleSchedule):
    """The oracle schedule with eager refill: the node blocks while rows copy."""

    name: ClassVar[str] = "naive-adaptive"
    refill: ClassVar[str | None] = "eager"


@register_policy
@dataclass(frozen=True)
class Adaptive(OracleSchedule):
    """The oracle schedule with throttled refill: rows copy beside demand misses."""

    name: ClassVar[str] = "adaptive"
    refill: ClassVar[str | None] = "throttled"


@register_policy
@dataclass(frozen=True)
class ControllerSpec(PolicySpec):
    """The three-layer controller: the shipped default, or ``controller:PATH``."""

    path: Path | None = None
    """Controller ``.npz`` (None: the shipped default)."""
    name: ClassVar[str] = "controller"
    takes_arg: ClassVar[bool] = True
    optional_arg: ClassVar[bool] = True

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        if arg is None:
            return cls()
        if not arg:
            raise ConfigError("policy controller: PATH is empty", hint="use controller:FILE.npz")
        return cls(Path(arg))

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        ctrl = Controller.load(self.path or DEFAULT_PATH)
        anchor = env.best_static.ratio if env.best_static is not None else None
        return Built(ControllerPolicy(ctx, node_cfg, ctrl, self.spec, anchor))

    @property
    def spec(self) -> str:
        return f"controller:{self.path}" if self.path else "controller"


@register_policy
@dataclass(frozen=True)
class HillClimb(PolicySpec):
    """Ghost-cache hill climbing (a baseline for the controller)."""

    name: ClassVar[str] = "hill-climb"

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        return Built(HillClimbPolicy(ctx, node_cfg, name=self.name))


@register_policy
@dataclass(frozen=True)
class Threshold(PolicySpec):
    """The simple rule on the measured curve (a baseline for the controller)."""

    threshold: float = THRESHOLD
    """Share of the window's busy time a move must save."""
    name: ClassVar[str] = "threshold"
    takes_arg: ClassVar[bool] = True
    optional_arg: ClassVar[bool] = True

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        if arg is None:
            return cls()
        try:
            t = float(arg)
        except ValueError:
            raise ConfigError(
                f"policy threshold: T must be a number in [0, 1), got {arg!r}", hint=USAGE
            ) from None
        if not 0.0 <= t < 1.0:
            raise ConfigError(f"policy threshold: T must be in [0, 1), got {t}", hint=USAGE)
        return cls(t)

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        return Built(ThresholdPolicy(ctx, node_cfg, self.threshold, self.spec))

    @property
    def spec(self) -> str:
        return self.name if self.threshold == THRESHOLD else f"threshold:{self.threshold:g}"
