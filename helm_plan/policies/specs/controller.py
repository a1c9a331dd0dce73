"""``controller[:PATH]``: the three-layer controller, shipped or trained."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from helm_plan.controller.policy import ControllerPolicy
from helm_plan.controller.runtime import DEFAULT_PATH, Controller
from helm_plan.errors import ConfigError
from helm_plan.policies.registry import DEFAULTS_OF, Built, PolicyEnv, PolicySpec, register_policy
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext

__all__ = ["ControllerSpec"]


@register_policy
@dataclass(frozen=True)
class ControllerSpec(PolicySpec):
    """The controller (:mod:`helm_plan.controller`), the shipped default or a trained ``.npz``;
    its guard falls back to this run's best static ratio when the run has searched it
    (``PolicyEnv.best_static``), else to the best ratio of the node's own measured curve."""

    path: Path | None = None
    """Controller ``.npz`` (None: the shipped default)."""
    name: ClassVar[str] = "controller"
    takes_arg: ClassVar[bool] = True
    optional_arg: ClassVar[bool] = True
    colour: ClassVar[str] = "#e377c2"
    order: ClassVar[int] = 7
    usage: ClassVar[str] = "controller[:PATH]"
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF
    # each node measures its ghost caches every window: 49.9 s against 4.2 s for a static
    # policy's fleet search (bench_ray_nodes.py --shape 48 --requests 12000, 2026-12-06)
    plan_weight: ClassVar[float] = 12.0

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
