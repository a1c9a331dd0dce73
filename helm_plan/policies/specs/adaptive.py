"""``adaptive``: the oracle schedule with throttled refill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.policies.registry import register_policy
from helm_plan.policies.specs.oracle import OracleSchedule

__all__ = ["Adaptive"]


@register_policy
@dataclass(frozen=True)
class Adaptive(OracleSchedule):
    """The oracle schedule with ``throttled`` refill (the HELM way to move the split): rows
    copy beside demand misses."""

    name: ClassVar[str] = "adaptive"
    refill: ClassVar[str | None] = "throttled"
    colour: ClassVar[str] = "#4f8f3a"
    order: ClassVar[int] = 4
    defaults_of: ClassVar[tuple[str, ...]] = ("analyze",)
