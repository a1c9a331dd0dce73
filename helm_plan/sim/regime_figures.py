"""P99 and SLO attainment per regime span, not only pooled over the trace.

A trace records which regime holds when (:func:`helm_plan.regimes.read_spans`:
the steady, trend and burst thirds of ``mixed``, a scenario's phases, the
spans a mix shift injected). :func:`regime_table` cuts each policy's measured
requests by the span their *arrival* falls in and computes the figures of
:mod:`helm_plan.sim.metrics` over each regime, every span of one name pooled
(the A phases of ``detectability`` are one regime). The warm-up windows are
left out exactly as in the pooled figures (``NodeResult.measured_from_window``),
so a regime's figures over the whole trace are the pooled ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from helm_plan.regimes import RegimeSpan
from helm_plan.sim import metrics
from helm_plan.sim.node import NodeResult

SCHEMA = {
    "policy": pl.String,
    "regime": pl.String,
    "spans": pl.Int64,
    "start_s": pl.Float64,
    "requests": pl.Int64,
    "p50_ms": pl.Float64,
    "p99_ms": pl.Float64,
    "mean_ms": pl.Float64,
    "slo_attainment": pl.Float64,
}
"""Columns of :func:`regime_table` (one row per policy x regime, regimes in order of first
appearance; ``start_s`` is the regime's first span start, ``spans`` how many spans it has)."""


def span_of(ts_s: np.ndarray, spans: Sequence[RegimeSpan]) -> np.ndarray:
    """Index of the span each arrival falls in (spans are contiguous and half-open; times
    before the first span go to it and times at or past the last end to the last)."""
    starts = np.array([s.start_s for s in spans], np.float64)
    idx = np.searchsorted(starts, np.asarray(ts_s, np.float64), side="right") - 1
    return np.clip(idx, 0, len(spans) - 1)


def regime_table(
    results: Mapping[str, NodeResult],
    ts_s: np.ndarray,
    spans: Sequence[RegimeSpan],
    slo_ms: float,
) -> pl.DataFrame:
    """P50, P99, mean sojourn and SLO attainment of each policy in each regime.

    ``results`` are whole-trace runs of the same trace (``ts_s``: its arrival
    times, one per request, in trace order); each result's sojourns cover every
    request and its first ``len(sojourn_s) - requests`` belong to warm-up
    windows, which are left out. An empty table (the schema above) when the
    trace records no spans.
    """
    if not spans:
        return pl.DataFrame(schema=SCHEMA)
    names: list[str] = []
    for s in spans:
        if s.name not in names:
            names.append(s.name)
    sid = span_of(ts_s, spans)
    span_name = np.array([names.index(s.name) for s in spans], np.int64)
    regime = span_name[sid]
    rows = []
    for policy, res in results.items():
        soj = np.asarray(res.sojourn_s, np.float64)
        if len(soj) != len(ts_s):
            raise ValueError(
                f"{policy}: {len(soj)} sojourns for a trace of {len(ts_s)} requests"
            )  # a bug, not a user error: every result here replays the same trace
        i0 = len(soj) - res.requests
        for k, name in enumerate(names):
            sel = np.flatnonzero(regime[i0:] == k) + i0
            fig = metrics.latency_figures(soj[sel], slo_ms)
            mine = [s for s in spans if s.name == name]
            rows.append(
                {
                    "policy": policy,
                    "regime": name,
                    "spans": len(mine),
                    "start_s": float(mine[0].start_s),
                    "requests": len(sel),
                    "p50_ms": fig.p50_ms,
                    "p99_ms": fig.p99_ms,
                    "mean_ms": fig.mean_ms,
                    "slo_attainment": fig.slo_attainment,
                }
            )
    return pl.DataFrame(rows, schema=SCHEMA)


__all__ = ["SCHEMA", "regime_table", "span_of"]
