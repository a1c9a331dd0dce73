"""The controller and ghost hill climbing as closed-loop node policies.

Both see only what the node measured (:class:`~helm_plan.sim.policy.Observation`)
plus the ghost caches over the node's own lookups (:class:`~helm_plan.cache.ghost.Ghost`).
In a cluster a node's window is not a contiguous span of the trace, so the
ghost has nothing to replay: its gains are then zero (the adapter and hill
climbing hold still) and the base policy decides from the other features.
"""

from __future__ import annotations

import time

import numpy as np

from helm_plan.cache.ghost import NO_GAINS, Ghost, GhostGains, gains
from helm_plan.controller.dataset import cost_coefficients
from helm_plan.controller.env import GHOST_DELTA, raw_from_window
from helm_plan.controller.features import observation
from helm_plan.controller.runtime import Controller
from helm_plan.errors import ConfigError
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import Observation, Policy

START_RATIO = 0.5
"""The ratio of window 0, before anything is measured."""


class _GhostPolicy(Policy):
    """Shared plumbing: ghost gains and raw features of the window just served."""

    def __init__(self, ctx: NodeContext, cfg: NodeConfig, delta: float = GHOST_DELTA) -> None:
        self.ctx, self.cfg, self.delta = ctx, cfg.for_context(ctx), delta
        self.ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token)
        self.costs = cost_coefficients(ctx)

    def reset(self) -> None:
        self.ghost.reset()

    def _gains(self, obs: Observation) -> GhostGains:
        res = obs.last
        if res is None or res.requests == 0 or res.first < 0:
            return NO_GAINS
        c = self.ghost.observe(res.first, res.first + res.requests, res.n_computed)
        return gains(c, res.ratio, self.delta, *self.costs)


class ControllerPolicy(_GhostPolicy):
    """Runs a :class:`Controller` at every boundary; records its decision latency."""

    def __init__(
        self, ctx: NodeContext, cfg: NodeConfig, controller: Controller, name: str
    ) -> None:
        super().__init__(ctx, cfg)
        self.controller = controller
        self.name = name
        self.latency_s: list[float] = []

    def reset(self) -> None:
        super().reset()
        self.controller.reset()
        self.latency_s = []

    def decide(self, obs: Observation) -> float:
        if obs.last is None:
            return START_RATIO
        g = self._gains(obs).as_dict()
        raw = raw_from_window(obs.last, obs.features, g, self.cfg.slo_ms,
                              self.ctx.latency.h2d_bw_Bps)  # fmt: skip
        x = observation(raw)
        t0 = time.perf_counter()
        r = self.controller.step(x)
        self.latency_s.append(time.perf_counter() - t0)
        return r

    @property
    def spec(self) -> str:
        return self.name


class HillClimbPolicy(_GhostPolicy):
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
        g = self._gains(obs)
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
