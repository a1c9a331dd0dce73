"""How one node is simulated: the node config shared by every simulator."""

from __future__ import annotations

from dataclasses import dataclass

from helm_plan.config import require_int, require_positive
from helm_plan.errors import ConfigError
from helm_plan.sim.refill import REFILL_MODES

DEFAULT_SLO_MS = 100.0
"""Default P99 SLO: the ~100 ms budget of an online ranking stage (HSTU-class GR serving)."""
DEFAULT_WINDOW_S = 10.0
"""Default window: at >=100 QPS per node a window holds >=1000 requests (>=10 above its P99),
and re-splitting HBM more often than every ~10 s mostly churns refill traffic."""


@dataclass(frozen=True)
class NodeConfig:
    """How one node is simulated."""

    slo_ms: float = DEFAULT_SLO_MS
    """P99 latency SLO, milliseconds (attainment = share of requests with sojourn <= SLO)."""
    window_s: float = DEFAULT_WINDOW_S
    """Window length, seconds; the ratio may change only at window boundaries."""
    slots: int = 1
    """Parallel executors of the FIFO queue."""
    refill: str = "throttled"
    """Refill mode of a growing EMB cache: lazy, eager or throttled (see helm_plan.sim.refill)."""
    throttle_share: float = 0.3
    """φ: share of the H2D bandwidth a throttled refill copy uses, in (0, 1)."""
    warmup_windows: int = 1
    """Leading windows left out of the overall figures (cold caches)."""

    def __post_init__(self) -> None:
        require_positive("slo_ms", self.slo_ms)
        require_positive("window_s", self.window_s)
        require_int("slots", self.slots, 1)
        if str(self.refill) not in REFILL_MODES:
            raise ConfigError(
                f"unknown refill mode {str(self.refill)!r}",
                hint=f"use one of {', '.join(REFILL_MODES)}",
            )
        if not 0.0 < self.throttle_share < 1.0:
            raise ConfigError(f"throttle_share must be in (0, 1), got {self.throttle_share}")
        require_int("warmup_windows", self.warmup_windows, 0)
