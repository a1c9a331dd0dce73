"""The shared base of ``emb-max`` and ``kv-max`` (a helper module: it registers nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.policies.registry import Built, PolicyEnv, PolicySpec
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import StaticPolicy

__all__ = ["PoolToOneCache"]


@dataclass(frozen=True)
class PoolToOneCache(PolicySpec):
    """A fixed extreme ratio named by the policy alone (no argument)."""

    ratio: ClassVar[float]

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        return Built(StaticPolicy(self.ratio, self.name))
