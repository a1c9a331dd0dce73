"""``oracle``: this trace's oracle schedule at the node's refill mode (the base of
``naive-adaptive`` and ``adaptive``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.oracle import label_windows
from helm_plan.policies.registry import Built, PolicyEnv, PolicySpec, register_policy
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import SchedulePolicy, fill_forward

__all__ = ["OracleSchedule"]


@register_policy
@dataclass(frozen=True)
class OracleSchedule(PolicySpec):
    """The oracle schedule of this trace (the run's labels, or labelled now) at the node's
    refill mode."""

    name: ClassVar[str] = "oracle"
    searches: ClassVar[bool] = True
    refill: ClassVar[str | None] = None
    colour: ClassVar[str] = "#17becf"
    order: ClassVar[int] = 9
    in_cluster: ClassVar[str] = "refused"  # it labels one node's trace

    def build(self, ctx: NodeContext, node_cfg: NodeConfig, env: PolicyEnv) -> Built:
        lab = env.labels or label_windows(ctx, node_cfg, env.oracle, env.progress, env.executor)
        return Built(SchedulePolicy(fill_forward(lab.r_star), self.name), self.refill)
