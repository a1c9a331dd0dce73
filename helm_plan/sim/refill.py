"""Refill modes: how the growing EMB cache is filled after a ratio change (DESIGN.md, Reallocation).

A pluggable family, like Vidur's schedulers: each mode is one class that
turns "these keys (hottest first) are missing, the boundary is at ``t_b``"
into a :class:`RefillPlan`, registered under its name with
:func:`register_refill`. Adding a mode is one class in one file that calls
``register_refill``; :class:`Refill` lists the shipped names.

"Hottest" comes from decayed lookup counts (halved at every window boundary,
so a key evicted by a shrink stays hot for a few windows and is copied back
first when EMB grows again). With ``bytes_k`` the bytes of key ``k`` and
``per_byte = 1/h2d_bw + 1/host_gather_bw`` (the link and the host-side
gather):

- ``lazy``: no copy; demand misses fill the free space.
- ``eager``: all keys are copied before serving resumes. They are resident at
  ``t_b`` and the node is blocked for ``h2d_latency + Σ bytes·per_byte`` (the
  naive baseline).
- ``throttled``: the same keys are copied in the background at a share φ of
  the link. Key ``k`` (0-based) lands at ``t_b + h2d_latency + Σ_{j<=k}
  bytes_j·(1/(φ·h2d_bw) + 1/host_gather_bw)``; until the copy ends, demand
  misses see ``h2d_share = 1 - φ`` (HELM's way).

Only EMB is refilled: KV entries cannot be copied from the host (they are
the product of a prefill, not stored data), so a growing KV cache is always
demand-filled, whatever the mode.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

import numpy as np

from helm_plan.errors import ConfigError
from helm_plan.latency.kernel import COEFFS
from helm_plan.latency.model import LatencyModel


class Refill(StrEnum):
    """Shipped refill modes."""

    LAZY = "lazy"
    EAGER = "eager"
    THROTTLED = "throttled"


@dataclass(frozen=True)
class RefillPlan:
    """What a refill does after one boundary."""

    keys: np.ndarray
    """Dense EMB keys to copy, hottest first, int32."""
    ready_s: np.ndarray
    """When each key is resident, seconds (non-decreasing), float64."""
    block_s: float
    """How long the node is blocked from the boundary before serving resumes, seconds."""
    demand_share: float
    """Share of the H2D link demand misses get while the copy runs (1 = all of it)."""
    copy_end_s: float
    """When the background copy ends, seconds (the boundary if there is none)."""


class RefillMode(ABC):
    """One refill mode; subclasses set ``name`` and implement :meth:`plan`."""

    name: ClassVar[str]
    prefetches: ClassVar[bool] = True
    """Whether the mode copies rows (False: lookup counts need not be gathered)."""

    @abstractmethod
    def plan(
        self,
        keys: np.ndarray,
        key_bytes: np.ndarray,
        boundary_s: float,
        lat: LatencyModel,
        throttle_share: float,
    ) -> RefillPlan:
        """Plan the copy of ``keys`` (hottest first, ``key_bytes`` each) from ``boundary_s``."""


REFILL_MODES: dict[str, type[RefillMode]] = {}
"""Registered refill modes by name."""


def register_refill(cls: type[RefillMode]) -> type[RefillMode]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    REFILL_MODES[cls.name] = cls
    return cls


def get_refill(name: str | Refill) -> RefillMode:
    """The refill mode called ``name``, with a precise error."""
    key = str(name)
    if key not in REFILL_MODES:
        raise ConfigError(
            f"unknown refill mode {key!r}", hint=f"use one of {', '.join(REFILL_MODES)}"
        )
    return REFILL_MODES[key]()


def _none(boundary_s: float) -> RefillPlan:
    return RefillPlan(np.zeros(0, np.int32), np.zeros(0), 0.0, 1.0, boundary_s)


def _link(lat: LatencyModel) -> tuple[float, float, float]:
    """(h2d latency s, h2d bandwidth B/s, host gather bandwidth B/s) of the latency model."""
    c = dict(zip(COEFFS, lat.coeffs, strict=True))
    return c["h2d_latency_s"], c["h2d_bw_Bps"], c["host_gather_Bps"]


@register_refill
class Lazy(RefillMode):
    """Demand misses fill the free space; nothing is copied ahead."""

    name = "lazy"
    prefetches = False

    def plan(self, keys, key_bytes, boundary_s, lat, throttle_share):  # noqa: ANN001, ANN201
        return _none(boundary_s)


@register_refill
class Eager(RefillMode):
    """Copy everything before serving resumes: resident at the boundary, node blocked."""

    name = "eager"

    def plan(self, keys, key_bytes, boundary_s, lat, throttle_share):  # noqa: ANN001, ANN201
        keys = np.asarray(keys, np.int32)
        if len(keys) == 0:
            return _none(boundary_s)
        h2d_lat, h2d_bw, host_bw = _link(lat)
        total = float(np.sum(key_bytes, dtype=np.float64))
        block = h2d_lat + total / h2d_bw + total / host_bw
        return RefillPlan(keys, np.full(len(keys), boundary_s), block, 1.0, boundary_s)


@register_refill
class Throttled(RefillMode):
    """Background copy at bandwidth share φ; demand misses get 1 - φ meanwhile."""

    name = "throttled"

    def plan(self, keys, key_bytes, boundary_s, lat, throttle_share):  # noqa: ANN001, ANN201
        keys = np.asarray(keys, np.int32)
        if len(keys) == 0:
            return _none(boundary_s)
        if not 0.0 < throttle_share < 1.0:
            raise ConfigError(
                f"throttle_share must be in (0, 1), got {throttle_share}",
                hint="pass --throttle-share between 0 and 1",
            )
        h2d_lat, h2d_bw, host_bw = _link(lat)
        per_byte = 1.0 / (throttle_share * h2d_bw) + 1.0 / host_bw
        ready = boundary_s + h2d_lat + np.cumsum(np.asarray(key_bytes, np.float64)) * per_byte
        return RefillPlan(keys, ready, 0.0, 1.0 - throttle_share, float(ready[-1]))
