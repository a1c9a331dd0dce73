"""Arrival times for ingested requests: keep the log's, or re-time to serving speed.

Request order never changes; only times are assigned, in order. Rules:

- no re-timing option and a log whose timestamps are real serving arrivals
  (mooncake, csv with a ts column): keep them, shifted to start at 0;
- ``arrivals``: the real trace's rate shape, scaled so the part of it the
  written trace uses has mean rate ``qps`` (see :mod:`helm_plan.ingest.arrivals`);
- otherwise a regime (default steady) over ``duration_s`` whose *mean* rate
  is ``qps`` (bursts and ramps included: the base rate is lowered to make
  room for them). Given one of them, the other follows from the request
  count; given neither, ``qps`` = DEFAULT_QPS. Given both, requests past the
  duration are cut, and a log too short for it is spread at ``qps`` over a
  shorter span.

In every case ``--qps`` is the mean rate of the written trace (up to the
randomness of the draws).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.ingest import arrivals as arr
from helm_plan.ingest.config import DEFAULT_QPS, IngestConfig
from helm_plan.regimes import RegimeSpan, arrivals_fixed, parse_regime, shape


@dataclass(frozen=True)
class Timing:
    """Arrival times for the first ``len(ts_s)`` requests and how they were made."""

    ts_s: np.ndarray
    """Arrival time per kept request, seconds, non-decreasing."""
    description: str
    """One line for the report."""
    notes: tuple[str, ...] = ()
    """Adjustments worth reporting."""
    spans: tuple[RegimeSpan, ...] = ()
    """Regime spans of the re-timing regime (none when times are kept or drawn from a trace)."""
    bursts: tuple[tuple[float, float], ...] = ()
    """Burst intervals of the re-timing regime, seconds."""


def assign(order_t: np.ndarray, real_time: bool, cfg: IngestConfig) -> Timing:
    """Arrival times for requests whose source times (or positions) are ``order_t``."""
    n = len(order_t)
    if not cfg.retime_requested and real_time:
        ts = order_t - order_t[0] if n else order_t
        return Timing(ts.astype(np.float64), "kept the log's timestamps (shifted to start at 0)")
    if cfg.arrivals is not None:
        series = arr.load(cfg.arrivals)
        ts, scale = arr.draw(series, n, seed=cfg.seed + 1, qps=cfg.qps, duration_s=cfg.duration_s)
        target = f"mean {cfg.qps:.4g} req/s" if cfg.qps is not None else f"x{scale:.3g}"
        desc = (
            f"re-timed from {series.source} (native mean {series.mean_rps:.3g} req/s): "
            f"rate shape scaled x{scale:.3g} to {target} (seed {cfg.seed})"
        )
        return Timing(ts, desc)
    return _regime(n, cfg)


def _regime(n: int, cfg: IngestConfig) -> Timing:
    regime = parse_regime(cfg.regime or "steady")
    notes: list[str] = []
    qps, duration = cfg.qps, cfg.duration_s
    if qps is None and duration is None:
        qps = DEFAULT_QPS
        notes.append(f"no --qps or --duration-s: base rate defaults to {DEFAULT_QPS:g} req/s")
    if n == 0:
        return Timing(np.zeros(0), f"{regime.value} regime (no requests)", tuple(notes))
    keep = n
    if qps is None:
        assert duration is not None
        qps = n / duration
    elif duration is None:
        duration = n / qps
    elif n > qps * duration:
        keep = int(round(qps * duration))
    elif n < qps * duration:
        notes.append(
            f"the log has only {n} requests, fewer than {qps * duration:.0f} at "
            f"{qps:g} req/s over {duration:g} s: spread over {n / qps:.4g} s instead"
        )
        duration = n / qps
    # The shape's rate is proportional to its base rate; pick the base whose mean is qps
    # (bursts add on top of the base, a trend ramps around it).
    unit = shape(regime, qps=1.0, duration_s=duration, seed=cfg.seed).expected_requests
    base = qps * duration / unit
    sh = shape(regime, qps=base, duration_s=duration, seed=cfg.seed)
    ts = arrivals_fixed(sh, keep, cfg.seed + 1)
    desc = (
        f"re-timed: {regime.value} regime, mean {qps:.4g} req/s (base {base:.4g}) over "
        f"{duration:.4g} s (seed {cfg.seed})"
    )
    return Timing(ts, desc, tuple(notes), tuple(sh.spans()), sh.bursts)
