"""Refill modes: how the growing EMB cache is filled after a ratio change (DESIGN.md, Reallocation).

A pluggable family, like Vidur's schedulers: each mode is one class that
turns "these rows (hottest first) are missing, the boundary is at ``t_b``"
into a :class:`RefillPlan`, registered under its name with
:func:`register_refill`. Adding a mode is one class in one file that calls
``register_refill``; :class:`Refill` lists the shipped names.

Shipped modes (``row_s = host_gather_s + row_bytes / h2d_bw``):

- ``lazy``: no copy; demand misses fill the free space.
- ``eager``: all rows are copied before serving resumes. They are resident at
  ``t_b`` and the node is blocked for ``h2d_latency + rows·row_s`` (the
  naive baseline).
- ``throttled``: the same rows are copied in the background at a share φ of
  the H2D bandwidth. Row ``k`` (0-based) lands at
  ``t_b + h2d_latency + (k+1)·(host_gather_s + row_bytes/(φ·h2d_bw))``;
  until the copy ends, demand misses see ``h2d_share = 1 - φ`` (HELM's way).

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
from helm_plan.latency.model import LatencyModel


class Refill(StrEnum):
    """Shipped refill modes."""

    LAZY = "lazy"
    EAGER = "eager"
    THROTTLED = "throttled"


@dataclass(frozen=True)
class RefillPlan:
    """What a refill does after one boundary."""

    rows: np.ndarray
    """Dense item ids to copy, hottest first, int32."""
    ready_s: np.ndarray
    """When each row is resident, seconds (non-decreasing), float64."""
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
        self, rows: np.ndarray, boundary_s: float, lat: LatencyModel, throttle_share: float
    ) -> RefillPlan:
        """Plan the copy of ``rows`` (hottest first) starting at ``boundary_s``."""


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


@register_refill
class Lazy(RefillMode):
    """Demand misses fill the free space; nothing is copied ahead."""

    name = "lazy"
    prefetches = False

    def plan(self, rows, boundary_s, lat, throttle_share):  # noqa: ANN001, ANN201
        return _none(boundary_s)


@register_refill
class Eager(RefillMode):
    """Copy everything before serving resumes: resident at the boundary, node blocked."""

    name = "eager"

    def plan(self, rows, boundary_s, lat, throttle_share):  # noqa: ANN001, ANN201
        rows = np.asarray(rows, np.int32)
        if len(rows) == 0:
            return _none(boundary_s)
        block = lat.h2d_latency_s + len(rows) * (lat.host_gather_s + lat.row_bytes / lat.h2d_bw_Bps)
        return RefillPlan(rows, np.full(len(rows), boundary_s), block, 1.0, boundary_s)


@register_refill
class Throttled(RefillMode):
    """Background copy at bandwidth share φ; demand misses get 1 - φ meanwhile."""

    name = "throttled"

    def plan(self, rows, boundary_s, lat, throttle_share):  # noqa: ANN001, ANN201
        rows = np.asarray(rows, np.int32)
        if len(rows) == 0:
            return _none(boundary_s)
        if not 0.0 < throttle_share < 1.0:
            raise ConfigError(f"throttle_share must be in (0, 1), got {throttle_share}")
        per_row = lat.host_gather_s + lat.row_bytes / (throttle_share * lat.h2d_bw_Bps)
        ready = boundary_s + lat.h2d_latency_s + per_row * np.arange(1, len(rows) + 1)
        return RefillPlan(rows, ready, 0.0, 1.0 - throttle_share, float(ready[-1]))
