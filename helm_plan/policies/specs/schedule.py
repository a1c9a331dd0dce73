"""``schedule:FILE``: per-window ratios from an oracle labels parquet."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from helm_plan.errors import ConfigError
from helm_plan.oracle import read_labels
from helm_plan.policies.registry import Built, PolicyEnv, PolicySpec, register_policy, usage
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import SchedulePolicy, fill_forward

__all__ = ["Schedule"]


@register_policy
@dataclass(frozen=True)
class Schedule(PolicySpec):
    """Per-window ``r_star`` from an oracle labels parquet; windows without requests keep the
    previous window's ratio."""

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
