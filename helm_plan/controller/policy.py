"""The controller and its two simple baselines as closed-loop node policies.

All three see only what the node measured (:class:`~helm_plan.sim.policy.Observation`)
plus the ghost caches over the node's own lookups
(:class:`~helm_plan.controller.measure.NodeMeter`): on one node the
window's contiguous span, inside a cluster the requests the node served
(``Observation.served``), so the ghosts see what the node's caches saw.

- :class:`ControllerPolicy`: the runtime :class:`~helm_plan.controller.runtime.Controller`
  (PPO base policy, adapter, burst recovery, guard), its decision latency
  timed by the runtime itself and reported by :meth:`ControllerPolicy.stats`.
- :class:`ThresholdPolicy`: the simple rule. The measured curve's optimum is
  where the EMB hit gain of one more byte equals the KV reuse gain it costs
  (both in service seconds); the rule moves there when that saves more than
  ``threshold`` of the window's busy time, else holds.
- :class:`HillClimbPolicy`: ghost hill climbing, a fixed step toward the cache
  whose ghost gain saves more service time.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from helm_plan.controller.features import CurveState
from helm_plan.controller.measure import Measured, NodeMeter
from helm_plan.controller.runtime import Controller
from helm_plan.errors import ConfigError
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import Observation, Policy

START_RATIO = 0.5
"""The ratio of window 0, before anything is measured (the controller starts at its anchor
when it has one)."""
THRESHOLD = 0.005
"""The threshold rule's default: move when the curve's optimum saves 0.5% of the busy time."""


class _MeasuringPolicy(Policy):
    """Shared plumbing: the node's meter over the window just served."""

    def __init__(self, ctx: NodeContext, cfg: NodeConfig, delta: float | None = None) -> None:
        self.ctx, self.cfg = ctx, cfg.for_context(ctx)
        self.meter = (NodeMeter(ctx, self.cfg) if delta is None
                      else NodeMeter(ctx, self.cfg, delta))  # fmt: skip

    def reset(self) -> None:
        self.meter.reset()

    def __deepcopy__(self, memo: dict[int, Any]) -> _MeasuringPolicy:
        # a cluster copies the policy once per node: the state is the node's own, the trace
        # (context, workload, arrays) is shared, never copied per node
        for shared in (self.ctx, self.ctx.workload, self.cfg):
            memo[id(shared)] = shared
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            setattr(new, k, copy.deepcopy(v, memo))
        return new

    def _measure(self, obs: Observation) -> Measured:
        assert obs.last is not None
        return self.meter.measure(obs.last, obs.features, obs.served)


class ControllerPolicy(_MeasuringPolicy):
    """Runs a :class:`Controller` at every boundary (``anchor``: the guard's static ratio)."""

    def __init__(
        self,
        ctx: NodeContext,
        cfg: NodeConfig,
        controller: Controller,
        name: str,
        anchor: float | None = None,
    ) -> None:
        super().__init__(ctx, cfg)
        self.controller = (
            controller.with_config(anchor=anchor) if anchor is not None else controller
        )
        self.name = name

    def reset(self) -> None:
        super().reset()
        self.controller.reset()

    def decide(self, obs: Observation) -> float:
        if obs.last is None:
            return self.controller.start_ratio(START_RATIO)
        m = self._measure(obs)
        return self.controller.step(m.x, m.gain)

    @property
    def spec(self) -> str:
        return self.name

    def stats(self) -> dict[str, Any]:
        """Decision latencies of this run (ns, the runtime's own timer) and the guard's counts."""
        c = self.controller
        return {
            "decision_latency_ns": [int(v) for v in c.latency_ns],
            "decisions": c.guard.decisions,
            "guard_fallback_windows": c.guard.fallback_windows,
            "guard_overrides": c.guard.overrides,
            "anchor": c.guard.anchor,
            "anchor_given": c.anchor is not None,
        }


class ThresholdPolicy(_MeasuringPolicy):
    """The simple rule: to the measured curve's optimum when it saves more than ``threshold``."""

    def __init__(
        self,
        ctx: NodeContext,
        cfg: NodeConfig,
        threshold: float = THRESHOLD,
        name: str = "threshold",
    ) -> None:
        if not 0.0 <= threshold < 1.0:
            raise ConfigError(
                f"threshold must be in [0, 1), got {threshold}", hint=f"pass e.g. {THRESHOLD}"
            )
        super().__init__(ctx, cfg)
        self.curve = CurveState(tol=threshold)
        self.threshold = threshold
        self.name = name

    def reset(self) -> None:
        super().reset()
        self.curve.reset()

    def decide(self, obs: Observation) -> float:
        if obs.last is None:
            return START_RATIO
        self.curve.update(self._measure(obs).share)
        return self.curve.optimum(obs.ratio)

    @property
    def spec(self) -> str:
        return self.name


class HillClimbPolicy(_MeasuringPolicy):
    """Ghost hill climbing: a fixed step toward the cache whose ghost gain saves more time."""

    def __init__(
        self, ctx: NodeContext, cfg: NodeConfig, step: float = 0.05, name: str = "hill-climb"
    ) -> None:
        if not 0.0 < step <= 0.5:
            raise ConfigError(f"hill-climb step must be in (0, 0.5], got {step}", hint="pass 0.05")
        super().__init__(ctx, cfg, delta=step)
        self.step = step
        self.name = name

    def decide(self, obs: Observation) -> float:
        if obs.last is None:
            return START_RATIO
        g = self._measure(obs).gains
        r = obs.ratio
        # move only when the better direction saves time at all
        if g.net_up_s > max(g.net_down_s, 0.0):
            r += self.step
        elif g.net_down_s > max(g.net_up_s, 0.0):
            r -= self.step
        return float(np.clip(r, 0.0, 1.0))

    @property
    def spec(self) -> str:
        return self.name
