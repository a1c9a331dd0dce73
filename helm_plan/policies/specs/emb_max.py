"""``emb-max``: r = 1, the whole pool to EMB."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.policies.registry import DEFAULTS_OF, register_policy
from helm_plan.policies.specs._fixed import PoolToOneCache

__all__ = ["EmbMax"]


@register_policy
@dataclass(frozen=True)
class EmbMax(PoolToOneCache):
    """r = 1: the whole pool holds EMB rows."""

    name: ClassVar[str] = "emb-max"
    aliases: ClassVar[tuple[str, ...]] = ("emb_max",)
    ratio: ClassVar[float] = 1.0
    kind: ClassVar[str] = "static"
    colour: ClassVar[str] = "#d08a2c"
    order: ClassVar[int] = 1
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF
