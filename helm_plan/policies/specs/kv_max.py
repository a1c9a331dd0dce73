"""``kv-max``: r = 0, the whole pool to KV."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from helm_plan.policies.registry import DEFAULTS_OF, register_policy
from helm_plan.policies.specs._fixed import PoolToOneCache

__all__ = ["KvMax"]


@register_policy
@dataclass(frozen=True)
class KvMax(PoolToOneCache):
    """r = 0: the whole pool holds KV."""

    name: ClassVar[str] = "kv-max"
    aliases: ClassVar[tuple[str, ...]] = ("kv_max",)
    ratio: ClassVar[float] = 0.0
    kind: ClassVar[str] = "static"
    colour: ClassVar[str] = "#8064a2"
    order: ClassVar[int] = 2
    defaults_of: ClassVar[tuple[str, ...]] = DEFAULTS_OF
