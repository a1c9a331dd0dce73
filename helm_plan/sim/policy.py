"""The closed-loop policy protocol: a policy picks ``r`` at each window boundary.

A policy sees only what a server could have measured up to the boundary (an
:class:`Observation`: the window about to start, the current ratio and the
previous window's :class:`~helm_plan.sim.step.WindowResult`), never later
requests. ``reset()`` is called before window 0; ``decide(obs)`` before each
window. The simulators (node, cluster, environments) drive it; named specs
(``static:R``, ``best-static``, ``controller``...) are parsed by the
catalogue in :mod:`helm_plan.policies`, above the oracle and the controller.

The primitive policies here need no search: a constant ratio and a fixed
per-window schedule (what an oracle labels file or a best-static search
produces).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helm_plan.errors import ConfigError
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.step import WindowResult


@dataclass(frozen=True)
class Observation:
    """What a node knows at the boundary before ``window``."""

    window: int
    """The window about to be served."""
    ratio: float
    """The EMB share the node runs at now (NaN before window 0)."""
    last: WindowResult | None = None
    """The previous window as the node measured it (None before window 0)."""
    features: dict[str, float] = field(default_factory=dict)
    """Arrival-side features of the previous window (see helm_plan.sim.metrics.window_features)."""
    served: np.ndarray | None = None
    """Trace indices (ascending) of the requests of ``last`` when they are not the contiguous
    span ``last.first ..`` (a cluster node serves some of each window's requests); None
    otherwise."""


class Policy(ABC):
    """Decides the EMB share at each window boundary from an observation."""

    def reset(self) -> None:  # noqa: B027 - stateless policies need no reset
        """Forget any state; called before window 0."""

    @abstractmethod
    def decide(self, obs: Observation) -> float:
        """The EMB share in [0, 1] for window ``obs.window``."""

    @property
    @abstractmethod
    def spec(self) -> str:
        """A short name of the policy, e.g. ``static:0.3``."""

    @property
    def raises_ratio(self) -> bool:
        """Whether the policy may raise ``r`` at a boundary after window 0 (a closed loop
        may: True unless a policy knows better)."""
        return True

    def stats(self) -> dict[str, Any]:
        """What the policy measured about itself since ``reset()`` (JSON-able; e.g. the
        controller's decision latencies, measured in this run); empty by default."""
        return {}


@dataclass(frozen=True)
class StaticPolicy(Policy):
    """The same ``r`` in every window."""

    ratio: float
    """EMB share in [0, 1]."""
    name: str = ""
    """Spec to report (default ``static:R``)."""

    def __post_init__(self) -> None:
        if not (np.isfinite(self.ratio) and 0.0 <= self.ratio <= 1.0):
            raise ConfigError(
                f"static ratio must be in [0, 1], got {self.ratio}",
                hint="pass static:R with R in [0, 1]",
            )

    def decide(self, obs: Observation) -> float:
        return self.ratio

    @property
    def spec(self) -> str:
        return self.name or f"static:{self.ratio:g}"

    @property
    def raises_ratio(self) -> bool:
        return False


class SchedulePolicy(Policy):
    """A fixed ratio per window (an offline schedule, e.g. oracle labels)."""

    def __init__(self, ratios: np.ndarray, name: str = "schedule") -> None:
        r = np.asarray(ratios, np.float64).reshape(-1)
        if len(r) and not (np.all(np.isfinite(r)) and r.min() >= 0 and r.max() <= 1):
            bad = r[~(np.isfinite(r) & (r >= 0) & (r <= 1))][0]
            raise ConfigError(f"ratio must be in [0, 1], got {bad}", hint="fix the schedule")
        self.ratios = r
        self.name = name

    def decide(self, obs: Observation) -> float:
        if obs.window >= len(self.ratios):
            raise ConfigError(
                f"the schedule has {len(self.ratios)} windows; window {obs.window} has no ratio",
                hint="make the schedule for this trace and window length",
            )
        return float(self.ratios[obs.window])

    @property
    def spec(self) -> str:
        return self.name

    @property
    def raises_ratio(self) -> bool:
        return bool(np.any(np.diff(self.ratios) > 0))


def runner_config(cfg: NodeConfig, policies: Iterable[Policy]) -> NodeConfig:
    """The config to step nodes run by ``policies`` with: ``cfg``, but lazy refill when no
    policy ever raises ``r``.

    Only a growing EMB cache is refilled, so such a run never reads the refill's hotness
    counts; counting every lookup into them cost a static run about a quarter of its time
    (and a cluster nodes x keys floats). The results are the same in every refill mode.
    """
    # a policy registered on the protocol without subclassing it may lack the property
    if cfg.refill == "lazy" or any(getattr(p, "raises_ratio", True) for p in policies):
        return cfg
    return dataclasses.replace(cfg, refill="lazy")


def fill_forward(r: np.ndarray) -> np.ndarray:
    """Replace NaN ratios by the previous finite one (leading NaNs by the first finite one)."""
    r = np.asarray(r, np.float64).copy()
    ok = np.isfinite(r)
    if len(r) and not ok.any():
        raise ConfigError(
            "schedule has no finite ratio (every window is empty)", hint="check the labels file"
        )
    if len(r) == 0:
        return r
    idx = np.where(ok, np.arange(len(r)), 0)
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(ok))
    idx[: first + 1] = np.where(ok[: first + 1], idx[: first + 1], first)
    return r[idx]
