"""How one node is simulated: the node config shared by every simulator."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from helm_plan.config import require_at_most, require_int, require_positive
from helm_plan.errors import ConfigError
from helm_plan.profiles import resolve_slo_ms
from helm_plan.sim.refill import REFILL_MODES

BATCHING = ("static", "continuous")
"""Batch formation modes (see helm_plan.sim.batching)."""
MAX_SLOTS = 48
"""Most streams a node may have: a GPU runs at most 48 MPS clients (Volta and later) or 7 MIG
instances, so more slots model no GPU (and each slot is simulated state)."""
SLOTS_REASON = "a GPU runs at most 48 MPS clients or 7 MIG instances"
DEFAULT_WINDOW_S = 10.0
"""Default window: at >=100 QPS per node a window holds >=1000 requests (>=10 above its P99),
and re-splitting HBM more often than every ~10 s mostly churns refill traffic."""


@dataclass(frozen=True)
class NodeConfig:
    """How one node is simulated."""

    slo_ms: float | None = None
    """P99 latency SLO, milliseconds (attainment = share of requests with sojourn <= SLO);
    None: the model profile's ``default_slo_ms``, resolved by :meth:`for_context` where the
    model is known (every simulator does so on entry)."""
    window_s: float = DEFAULT_WINDOW_S
    """Window length, seconds; the ratio may change only at window boundaries."""
    slots: int = 1
    """Independent streams serving the FIFO queue (MIG/MPS partitions)."""
    batch_max: int = 1
    """Most requests per batch (1 = each request alone)."""
    batch_timeout_ms: float = 0.0
    """static batching: longest a batch waits for more requests after its first, ms."""
    batching: str = "static"
    """static (close at batch_max or the timeout) or continuous (start at once with all waiting)."""
    refill: str = "throttled"
    """Refill mode of a growing EMB cache: lazy, eager or throttled (see helm_plan.sim.refill)."""
    throttle_share: float = 0.3
    """φ: share of the H2D bandwidth a throttled refill copy uses, in (0, 1)."""
    warmup_windows: int = 1
    """Leading windows left out of the overall figures (cold caches)."""

    def __post_init__(self) -> None:
        if self.slo_ms is not None:
            require_positive("slo_ms", self.slo_ms)
        require_positive("window_s", self.window_s)
        require_int("slots", self.slots, 1)
        require_at_most("slots", self.slots, MAX_SLOTS, SLOTS_REASON)
        require_int("batch_max", self.batch_max, 1)
        if not (self.batch_timeout_ms >= 0 and self.batch_timeout_ms < float("inf")):
            raise ConfigError(
                f"batch_timeout_ms must be finite and >= 0, got {self.batch_timeout_ms}",
                hint="pass --batch-timeout-ms >= 0",
            )
        if self.batching not in BATCHING:
            raise ConfigError(
                f"unknown batching {self.batching!r}", hint=f"use one of {', '.join(BATCHING)}"
            )
        if str(self.refill) not in REFILL_MODES:
            raise ConfigError(
                f"unknown refill mode {str(self.refill)!r}",
                hint=f"use one of {', '.join(REFILL_MODES)}",
            )
        if not 0.0 < self.throttle_share < 1.0:
            raise ConfigError(
                f"throttle_share must be in (0, 1), got {self.throttle_share}",
                hint="pass --throttle-share between 0 and 1",
            )
        require_int("warmup_windows", self.warmup_windows, 0)

    def for_context(self, ctx: Any) -> NodeConfig:  # noqa: ANN401 - a NodeContext (sim.context)
        """This config with its SLO resolved for the node context's model (the one SLO rule,
        :func:`helm_plan.profiles.resolve_slo_ms`); itself when it has an SLO."""
        if self.slo_ms is not None:
            return self
        return replace(self, slo_ms=resolve_slo_ms(ctx.model, None))
