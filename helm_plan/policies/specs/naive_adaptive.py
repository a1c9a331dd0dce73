"""``naive-adaptive``: the oracle schedule with eager refill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.policies.registry import register_policy
from helm_plan.policies.specs.oracle import OracleSchedule

__all__ = ["NaiveAdaptive"]


@register_policy
@dataclass(frozen=True)
class NaiveAdaptive(OracleSchedule):
    """The oracle schedule with ``eager`` refill (the naive way to move the split): the node
    blocks while rows copy."""

    name: ClassVar[str] = "naive-adaptive"
    aliases: ClassVar[tuple[str, ...]] = ("naive_adaptive",)
    refill: ClassVar[str | None] = "eager"
    colour: ClassVar[str] = "#c0504d"
    order: ClassVar[int] = 3
    defaults_of: ClassVar[tuple[str, ...]] = ("analyze",)
