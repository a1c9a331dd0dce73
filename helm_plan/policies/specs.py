"""The shipped policy specs (the catalogue's list is in :mod:`helm_plan.policies`)."""

from __future__ import annotations

from dataclasses import dataclass
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
from helm_plan.oracle import best_static, label_windows, read_labels
from helm_plan.policies.registry import (
    DEFAULTS_OF,
    Built,
    PolicyEnv,
    PolicySpec,
    register_policy,
    usage,
)
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import SchedulePolicy, StaticPolicy, fill_forward

__all__ = [
    "Adaptive",
    "BestStaticSpec",
    "ControllerSpec",
    "EmbMax",
    "HillClimb",
    "KvMax",
    "NaiveAdaptive",
    "OracleSchedule",
    "Schedule",
    "Static",
    "Threshold",
]


@register_policy
@dataclass(frozen=True)
class Static(PolicySpec):
    """The same r in every window."""

    ratio: float
    """EMB share in [0, 1]."""
    name: ClassVar[str] = "static"
    takes_arg: ClassVar[bool] = True
    kind: ClassVar[str] = "static"
    colour: ClassVar[str] = "#7f7f7f"
    order: ClassVar[int] = 10
    usage: ClassVar[str] = "static:R"

    def __post_init__(self) -> None:
        if not (np.isfinite(self.ratio) and 0.0 <= self.ratio <= 1.0):
            raise ConfigError(f"policy static: R must be in [0, 1], got {self.ratio}", hint=usage())

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        try:
            r = float(arg or "")
        except ValueError:
            raise ConfigError(
                f"policy static: R must be a number in [0, 1], got {arg!r}", hint=usage()
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
    kind: ClassVar[str] = "static"
    colour: ClassVar[str] = "#d08a2c"
    order: ClassVar[int] = 1
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF


@register_policy
@dataclass(frozen=True)
class KvMax(_PoolToOneCache):
    """r = 0: the whole pool holds KV."""

    name: ClassVar[str] = "kv-max"
    ratio: ClassVar[float] = 0.0
    kind: ClassVar[str] = "static"
    colour: ClassVar[str] = "#8064a2"
    order: ClassVar[int] = 2
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF


@register_policy
@dataclass(frozen=True)
class BestStaticSpec(PolicySpec):
    """The static r with the lowest whole-trace P99, found by the oracle's search."""

    name: ClassVar[str] = "best-static"
    searches: ClassVar[bool] = True
    kind: ClassVar[str] = "baseline"
    in_cluster: ClassVar[str] = "fleet-search"
    colour: ClassVar[str] = "#1f4e79"
    order: ClassVar[int] = 0
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF

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
    colour: ClassVar[str] = "#bcbd22"
    order: ClassVar[int] = 11
    usage: ClassVar[str] = "schedule:FILE"

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        if not arg:
            raise ConfigError("policy schedule needs a labels file: schedule:FILE", hint=usage())
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
    colour: ClassVar[str] = "#17becf"
    order: ClassVar[int] = 9
    in_cluster: ClassVar[str] = "refused"  # it labels one node's trace

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        lab = env.labels or label_windows(ctx, node_cfg, env.oracle, env.progress, env.executor)
        return Built(SchedulePolicy(fill_forward(lab.r_star), self.name), self.refill)


@register_policy
@dataclass(frozen=True)
class NaiveAdaptive(OracleSchedule):
    """The oracle schedule with eager refill: the node blocks while rows copy."""

    name: ClassVar[str] = "naive-adaptive"
    refill: ClassVar[str | None] = "eager"
    colour: ClassVar[str] = "#c0504d"
    order: ClassVar[int] = 3
    defaults_of: ClassVar[tuple[str, ...]] = ("analyze",)


@register_policy
@dataclass(frozen=True)
class Adaptive(OracleSchedule):
    """The oracle schedule with throttled refill: rows copy beside demand misses."""

    name: ClassVar[str] = "adaptive"
    refill: ClassVar[str | None] = "throttled"
    colour: ClassVar[str] = "#4f8f3a"
    order: ClassVar[int] = 4
    defaults_of: ClassVar[tuple[str, ...]] = ("analyze",)


@register_policy
@dataclass(frozen=True)
class ControllerSpec(PolicySpec):
    """The three-layer controller: the shipped default, or ``controller:PATH``."""

    path: Path | None = None
    """Controller ``.npz`` (None: the shipped default)."""
    name: ClassVar[str] = "controller"
    takes_arg: ClassVar[bool] = True
    optional_arg: ClassVar[bool] = True
    colour: ClassVar[str] = "#e377c2"
    order: ClassVar[int] = 7
    usage: ClassVar[str] = "controller[:PATH]"
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF

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
    colour: ClassVar[str] = "#8c564b"
    order: ClassVar[int] = 5
    defaults_of: ClassVar[tuple[str, ...]] = ("plan",)

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
    colour: ClassVar[str] = "#6a3d9a"
    order: ClassVar[int] = 6
    usage: ClassVar[str] = "threshold[:T]"

    @classmethod
    def from_arg(cls, arg: str | None) -> PolicySpec:
        if arg is None:
            return cls()
        try:
            t = float(arg)
        except ValueError:
            raise ConfigError(
                f"policy threshold: T must be a number in [0, 1), got {arg!r}", hint=usage()
            ) from None
        if not 0.0 <= t < 1.0:
            raise ConfigError(f"policy threshold: T must be in [0, 1), got {t}", hint=usage())
        return cls(t)

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        return Built(ThresholdPolicy(ctx, node_cfg, self.threshold, self.spec))

    @property
    def spec(self) -> str:
        return self.name if self.threshold == THRESHOLD else f"threshold:{self.threshold:g}"
