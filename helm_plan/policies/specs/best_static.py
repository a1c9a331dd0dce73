"""``best-static``: the single r minimising whole-trace P99 (the baseline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.oracle import best_static
from helm_plan.policies.registry import DEFAULTS_OF, Built, PolicyEnv, PolicySpec, register_policy
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import StaticPolicy

__all__ = ["BestStaticSpec"]


@register_policy
@dataclass(frozen=True)
class BestStaticSpec(PolicySpec):
    """The single r minimising whole-trace P99, found by the oracle's search
    (:func:`helm_plan.oracle.best_static`)."""

    name: ClassVar[str] = "best-static"
    aliases: ClassVar[tuple[str, ...]] = ("best_static",)
    searches: ClassVar[bool] = True
    kind: ClassVar[str] = "baseline"
    in_cluster: ClassVar[str] = "fleet-search"
    colour: ClassVar[str] = "#1f4e79"
    order: ClassVar[int] = 0
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        bs = env.best_static or best_static(ctx, node_cfg, env.oracle, env.progress, env.executor)
        return Built(StaticPolicy(bs.ratio, self.name))
