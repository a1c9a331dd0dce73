"""``threshold[:T]``: the simple rule on the measured curve (a baseline for the controller)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.controller.policy import THRESHOLD, ThresholdPolicy
from helm_plan.errors import ConfigError
from helm_plan.policies.registry import Built, PolicyEnv, PolicySpec, register_policy, usage
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext

__all__ = ["Threshold"]


@register_policy
@dataclass(frozen=True)
class Threshold(PolicySpec):
    """The simple rule: move to the measured curve's optimum (EMB hit gain = KV reuse gain per
    byte) when that saves more than ``T`` (default 0.005) of the window's busy time (a
    baseline for the controller)."""

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
