"""The latency and hit-rate figures every simulator reports, defined once (DESIGN.md, Node model).

- ``p50_ms``/``p99_ms``: percentiles of sojourn times (numpy's default linear
  interpolation), milliseconds;
- ``slo_attainment``: share of requests with sojourn <= SLO;
- ``mean_ms``: mean sojourn, milliseconds;
- ``emb_hit_rate``: 1 - misses / lookups;
- ``kv_reuse_rate``: reused context tokens / context tokens;
- ``throughput_rps``: requests / max(window length, last finish - window start).

Every figure of an empty set (no requests, no lookups, no context) is NaN,
never 0: "nothing measured" must not read as "all missed".

:func:`window_features` is what a server measures about its arrivals over a
window (rate, trend, burst score, inter-arrival CV, cold share, history
length); both the oracle's label table and the live node observation use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NAN = float("nan")
BURST_TRAILING = 6
"""Windows in the trailing mean of the burst score."""


@dataclass(frozen=True)
class LatencyFigures:
    """Sojourn-time figures of a set of requests."""

    p50_ms: float
    """Median sojourn, ms (NaN when empty)."""
    p99_ms: float
    """P99 sojourn, ms (NaN when empty)."""
    slo_attainment: float
    """Share of requests with sojourn <= SLO (NaN when empty)."""
    mean_ms: float
    """Mean sojourn, ms (NaN when empty)."""


def latency_figures(sojourn_s: np.ndarray, slo_ms: float) -> LatencyFigures:
    """P50, P99 (ms) and SLO attainment of ``sojourn_s``; NaN for an empty set."""
    if len(sojourn_s) == 0:
        return LatencyFigures(NAN, NAN, NAN, NAN)
    if slo_ms is None:  # no silent default: every caller resolves the model's SLO first
        raise ValueError("slo_ms is None: resolve it with NodeConfig.for_context(ctx)")
    # one partition for both (each the same figure as its own np.percentile call: tested)
    p50, p99 = np.percentile(sojourn_s, (50, 99))
    return LatencyFigures(
        p50_ms=float(p50 * 1e3),
        p99_ms=float(p99 * 1e3),
        slo_attainment=float(np.mean(sojourn_s <= slo_ms / 1e3)),
        mean_ms=float(np.mean(sojourn_s) * 1e3),
    )


def hit_rate(misses: int | float, lookups: int | float) -> float:
    """1 - misses / lookups; NaN without lookups."""
    return 1.0 - misses / lookups if lookups else NAN


def reuse_rate(reused: int | float, context: int | float) -> float:
    """Reused / context tokens; NaN without context."""
    return reused / context if context else NAN


def throughput_rps(n: int, window_start_s: float, window_s: float, last_done_s: float) -> float:
    """``n`` requests over max(window length, last finish - window start); 0 when empty."""
    if n == 0:
        return 0.0
    return n / max(window_s, last_done_s - window_start_s)


def window_features(
    ts_s: np.ndarray,
    edges: np.ndarray,
    window_s: float,
    first_visit: np.ndarray,
    ctx_len: np.ndarray,
) -> dict[str, np.ndarray]:
    """Arrival-side observable features per window (see :func:`window_feature_row`)."""
    n_w = len(edges) - 1
    rate = np.diff(edges).astype(np.float64) / window_s
    rows = [
        window_feature_row(
            ts_s, int(edges[w]), int(edges[w + 1]), rate[: w + 1], first_visit, ctx_len
        )  # fmt: skip
        for w in range(n_w)
    ]
    keys = ("arrival_rate_rps", "rate_trend", "burst_score", "interarrival_cv",
            "cold_user_share", "hist_len_mean", "hist_len_p95")  # fmt: skip
    return {k: np.array([r[k] for r in rows], np.float64).reshape(n_w) for k in keys}


def window_feature_row(
    ts_s: np.ndarray,
    s: int,
    e: int,
    rates: np.ndarray,
    first_visit: np.ndarray,
    ctx_len: np.ndarray,
) -> dict[str, float]:
    """Features of requests ``[s, e)`` given the arrival rates of this and earlier windows.

    ``arrival_rate_rps`` (``rates[-1]``); ``rate_trend`` (rate / previous rate - 1,
    0 for the first window or after an empty one); ``burst_score`` (rate / mean
    of up to ``BURST_TRAILING`` previous rates, 1 when there is none);
    ``interarrival_cv`` (std/mean of inter-arrival gaps, NaN under 3
    requests); ``cold_user_share`` (share of requests that are their user's
    first); ``hist_len_mean``, ``hist_len_p95`` (context length L, tokens).
    """
    rate = float(rates[-1])
    trend, burst = 0.0, 1.0
    if len(rates) > 1:
        prev = float(rates[-2])
        trend = rate / prev - 1.0 if prev > 0 else 0.0
        tm = rates[max(0, len(rates) - 1 - BURST_TRAILING) : -1].mean()
        burst = rate / tm if tm > 0 else 1.0
    cv = cold = hmean = h95 = NAN
    if e - s >= 3:
        gaps = np.diff(ts_s[s:e])
        mu = gaps.mean()
        cv = gaps.std() / mu if mu > 0 else 0.0
    if e > s:
        cold = float(first_visit[s:e].mean())
        hmean = float(ctx_len[s:e].mean())
        h95 = float(np.percentile(ctx_len[s:e], 95))
    return {
        "arrival_rate_rps": rate,
        "rate_trend": trend,
        "burst_score": burst,
        "interarrival_cv": float(cv),
        "cold_user_share": cold,
        "hist_len_mean": hmean,
        "hist_len_p95": h95,
    }
