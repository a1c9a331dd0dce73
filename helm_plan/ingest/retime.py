"""Arrival times for ingested requests: keep the log's, or re-time to serving speed.

Request order never changes; only times are assigned, in order. Rules:

- no re-timing option and a log whose timestamps are real serving arrivals
  (mooncake, csv with a ts column): keep them, shifted to start at 0;
- ``arrivals``: the real trace's rate shape, scaled to ``qps``
  (see :mod:`helm_plan.ingest.arrivals`);
- otherwise a regime (default steady) at base rate ``qps`` over ``duration_s``.
  Given one of them, the other follows from the request count; given neither,
  ``qps`` = DEFAULT_QPS. Given both, requests past the duration are cut, and
  a log too short for it is spread at ``qps`` over a shorter span.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.ingest import arrivals as arr
from helm_plan.ingest.config import DEFAULT_QPS, IngestConfig
from helm_plan.regimes import arrivals_fixed, parse_regime, shape


@dataclass(frozen=True)
class Timing:
    """Arrival times for the first ``len(ts_s)`` requests and how they were made."""

    ts_s: np.ndarray
    """Arrival time per kept request, seconds, non-decreasing."""
    description: str
    """One line for the report."""
    notes: tuple[str, ...] = ()
    """Adjustments worth reporting."""


def assign(order_t: np.ndarray, real_time: bool, cfg: IngestConfig) -> Timing:
    """Arrival times for requests whose source times (or positions) are ``order_t``."""
    n = len(order_t)
    if not cfg.retime_requested and real_time:
        ts = order_t - order_t[0] if n else order_t
        return Timing(ts.astype(np.float64), "kept the log's timestamps (shifted to start at 0)")
    if cfg.arrivals is not None:
        series = arr.load(cfg.arrivals)
        ts, scale = arr.draw(series, n, seed=cfg.seed + 1, qps=cfg.qps, duration_s=cfg.duration_s)
        rate = series.mean_rps * scale
        desc = (
            f"re-timed from {series.source}: native {series.mean_rps:.3g} req/s "
            f"scaled x{scale:.3g} to {rate:.3g} req/s (seed {cfg.seed + 1})"
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
    if qps is not None and duration is None:
        # bursts add on top of the base rate: size the duration so n arrivals are expected
        d0 = n / qps
        duration = d0 * n / shape(regime, qps=qps, duration_s=d0, seed=cfg.seed).expected_requests
    elif qps is None and duration is not None:
        q0 = n / duration
        qps = q0 * n / shape(regime, qps=q0, duration_s=duration, seed=cfg.seed).expected_requests
    else:
        assert qps is not None and duration is not None
        expected = shape(regime, qps=qps, duration_s=duration, seed=cfg.seed).expected_requests
        if n > expected:
            keep = int(round(expected))
        elif n < expected:
            duration = duration * n / expected
            notes.append(
                f"the log has only {n} requests, fewer than {expected:.0f} expected at "
                f"{qps:g} req/s over {cfg.duration_s:g} s: spread over {duration:.4g} s instead"
            )
    sh = shape(regime, qps=qps, duration_s=duration, seed=cfg.seed)
    ts = arrivals_fixed(sh, keep, cfg.seed + 1)
    desc = (
        f"re-timed: {regime.value} regime, base {qps:.4g} req/s over {duration:.4g} s "
        f"(seed {cfg.seed})"
    )
    return Timing(ts, desc, tuple(notes))
