"""Arrival-rate regimes: steady, trend, burst and mixed.

A regime is a rate shape over ``[0, duration_s]``. Arrivals are drawn as a
(conditional) inhomogeneous Poisson process by inverting the cumulative rate,
so both a fixed count (re-timing an ingested log) and a Poisson count
(synthesis) use the same shape.

**Regime spans.** A synthetic trace records which regime holds when: a list
of :class:`RegimeSpan` ``(start_s, end_s, name)``, contiguous, half-open
``[start_s, end_s)`` (the last one closed at the trace's duration), as JSON in
the parquet file metadata under :data:`SPANS_KEY`. :func:`read_spans` reads
them back, so per-regime figures and tests need not know how the trace was
made. ``synth`` writes the thirds of ``mixed`` (steady, trend, burst), the bursts
of ``burst`` and the steady stretches between them, or one span named after the
regime; a named scenario (``synth --scenario``) writes
its phases (e.g. ``A`` and ``B`` of ``detectability``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np
import pyarrow.parquet as pq

from helm_plan.config import require_positive
from helm_plan.errors import ConfigError, TraceError

_GRID = 20_000

#: Parquet file-metadata key holding a trace's regime spans (JSON list of objects).
SPANS_KEY = "helm_plan.regimes"


class RegimeSpan(NamedTuple):
    """One stretch of a trace under one regime: ``[start_s, end_s)``."""

    start_s: float
    end_s: float
    name: str


def spans_json(spans: list[RegimeSpan] | tuple[RegimeSpan, ...]) -> str:
    """The metadata value of ``spans`` (what :func:`read_spans` parses)."""
    return json.dumps([s._asdict() for s in spans])


def read_spans(path: str | os.PathLike[str]) -> list[RegimeSpan]:
    """The regime spans recorded in a trace file's metadata ([] when it has none)."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, ValueError) as e:
        raise TraceError(
            f"cannot read {path} as parquet: {e}", hint="pass a canonical trace file"
        ) from e
    raw = meta.get(SPANS_KEY.encode())
    if raw is None:
        return []
    return [
        RegimeSpan(float(d["start_s"]), float(d["end_s"]), str(d["name"])) for d in json.loads(raw)
    ]


class Regime(StrEnum):
    """Workload regimes of DESIGN.md."""

    STEADY = "steady"
    TREND = "trend"
    BURST = "burst"
    MIXED = "mixed"


@dataclass(frozen=True)
class RegimeShape:
    """A rate shape and where its bursts are."""

    regime: Regime
    """The regime this shape realises."""
    duration_s: float
    """Length of the shape, seconds."""
    qps: float
    """Base rate, requests per second (bursts add on top)."""
    grid_s: np.ndarray
    """Time grid, seconds (len _GRID + 1)."""
    rate: np.ndarray
    """Rate on the grid, requests per second."""
    bursts: tuple[tuple[float, float], ...]
    """Burst intervals (start_s, end_s)."""
    trend_span: tuple[float, float] | None
    """Interval over which popularity should drift, if any."""

    def in_burst(self, t: np.ndarray) -> np.ndarray:
        """Boolean mask: which times fall inside a burst."""
        mask = np.zeros(np.shape(t), bool)
        for a, b in self.bursts:
            mask |= (t >= a) & (t < b)
        return mask

    @property
    def expected_requests(self) -> float:
        return float(np.trapezoid(self.rate, self.grid_s))

    def spans(self) -> list[RegimeSpan]:
        """Regime spans of this shape: the three thirds of mixed; for burst, each burst
        (overlapping ones merged) and the steady stretches between them; else the whole trace."""
        d = self.duration_s
        if self.regime is Regime.MIXED:
            third = d / 3  # as shape() cuts them
            return [
                RegimeSpan(0.0, third, "steady"),
                RegimeSpan(third, 2 * third, "trend"),
                RegimeSpan(2 * third, d, "burst"),
            ]
        if self.regime is Regime.BURST and self.bursts:
            out: list[RegimeSpan] = []
            t = 0.0
            for a, b in sorted(self.bursts):
                if out and out[-1].name == "burst" and a <= out[-1].end_s:  # overlapping bursts
                    out[-1] = RegimeSpan(out[-1].start_s, max(b, out[-1].end_s), "burst")
                else:
                    if a > t:
                        out.append(RegimeSpan(t, a, "steady"))
                    out.append(RegimeSpan(a, b, "burst"))
                t = out[-1].end_s
            if t < d:
                out.append(RegimeSpan(t, d, "steady"))
            return out
        return [RegimeSpan(0.0, d, self.regime.value)]


def parse_regime(name: str, *, allow_mixed: bool = True) -> Regime:
    """Regime from its name, with a precise error."""
    try:
        r = Regime(name)
    except ValueError:
        r = None
    if r is None or (r is Regime.MIXED and not allow_mixed):
        valid = [m.value for m in Regime if allow_mixed or m is not Regime.MIXED]
        raise ConfigError(f"unknown regime {name!r}", hint=f"use one of {', '.join(valid)}")
    return r


def shape(
    regime: Regime | str,
    *,
    qps: float,
    duration_s: float,
    seed: int,
    burst_factor: float = 4.0,
    burst_len_frac: float = 0.04,
    bursts_per_duration: int = 4,
) -> RegimeShape:
    """Build the rate shape of ``regime``.

    steady: constant ``qps``. trend: a linear ramp from 0.5x to 1.5x ``qps``
    (mean ``qps``), during which popularity drifts. burst: ``qps`` plus
    ``bursts_per_duration`` seeded spikes of ``burst_factor`` x the base rate,
    each ``burst_len_frac`` of the duration. mixed: steady, trend and burst thirds.
    """
    regime = parse_regime(regime) if isinstance(regime, str) else regime
    require_positive("qps", qps)
    require_positive("duration_s", duration_s)
    require_positive("burst_factor", burst_factor)
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, duration_s, _GRID + 1)
    rate = np.full_like(t, qps)
    bursts: list[tuple[float, float]] = []
    trend: tuple[float, float] | None = None

    def ramp(a: float, b: float) -> None:
        m = (t >= a) & (t <= b)
        rate[m] = qps * (0.5 + (t[m] - a) / max(b - a, 1e-12))

    def add_bursts(a: float, b: float, k: int) -> None:
        span = b - a
        length = burst_len_frac * duration_s
        slots = np.sort(rng.choice(max(k * 3, 1), size=k, replace=False))
        for s in slots:
            start = a + (s + rng.uniform(0.1, 0.6)) * span / max(k * 3, 1)
            end = min(start + length, b)
            rate[(t >= start) & (t < end)] = qps * burst_factor
            bursts.append((float(start), float(end)))

    if regime is Regime.TREND:
        ramp(0.0, duration_s)
        trend = (0.0, duration_s)
    elif regime is Regime.BURST:
        add_bursts(0.0, duration_s, bursts_per_duration)
    elif regime is Regime.MIXED:
        third = duration_s / 3
        ramp(third, 2 * third)
        trend = (third, 2 * third)
        add_bursts(2 * third, duration_s, max(1, bursts_per_duration // 2))
    return RegimeShape(regime, duration_s, qps, t, rate, tuple(bursts), trend)


def arrivals_fixed(s: RegimeShape, n: int, seed: int) -> np.ndarray:
    """Exactly ``n`` sorted arrival times following the shape (keeps request order)."""
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}", hint="ask for n >= 0 arrivals")
    rng = np.random.default_rng(seed)
    cum = np.concatenate([[0.0], np.cumsum((s.rate[1:] + s.rate[:-1]) * 0.5 * np.diff(s.grid_s))])
    u = np.sort(rng.random(n)) * cum[-1]
    return np.interp(u, cum, s.grid_s)


def arrivals_poisson(s: RegimeShape, seed: int) -> np.ndarray:
    """A Poisson number of arrivals (mean = integral of the rate) following the shape."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(s.expected_requests))
    return arrivals_fixed(s, n, seed + 1)
