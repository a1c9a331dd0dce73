"""``hill-climb``: ghost-cache hill climbing (a baseline for the controller)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.controller.policy import HillClimbPolicy
from helm_plan.policies.registry import Built, PolicyEnv, PolicySpec, register_policy
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext

__all__ = ["HillClimb"]


@register_policy
@dataclass(frozen=True)
class HillClimb(PolicySpec):
    """Ghost-cache hill climbing, a fixed step of 0.05 toward the cache whose ghost gain saves
    more service time (a baseline for the controller)."""

    name: ClassVar[str] = "hill-climb"
    aliases: ClassVar[tuple[str, ...]] = ("hill_climb",)
    colour: ClassVar[str] = "#8c564b"
    order: ClassVar[int] = 5
    defaults_of: ClassVar[tuple[str, ...]] = ("plan",)

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        return Built(HillClimbPolicy(ctx, node_cfg, name=self.name))
