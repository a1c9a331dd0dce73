"""``static:R``: the same r in every window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from helm_plan.errors import ConfigError
from helm_plan.policies.registry import Built, PolicyEnv, PolicySpec, register_policy, usage
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import StaticPolicy

__all__ = ["Static"]


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
