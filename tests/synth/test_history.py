"""History lengths at HSTU scale: returning users carry a long pre-existing history.

The expected figures are computed here from the documented distribution
(``1 + round(lognormal)`` with the configured mean and spread, capped at
``max_seq_len``) with scipy's normal CDF, not read from the generator.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from helm_plan import synth


def _pmf(mean: float, sigma: float, cap: int) -> np.ndarray:
    """P(min(1 + round(X), cap) = n) for n = 0..cap, X lognormal with mean ``mean - 1``."""
    mu = math.log(mean - 1.0) - sigma * sigma / 2
    edges = np.log(np.arange(cap) + 0.5)  # round(X) = m  <=>  m - 1/2 <= X < m + 1/2
    cdf = norm.cdf((edges - mu) / sigma)
    pmf = np.zeros(cap + 1)
    pmf[1] = cdf[0]  # round(X) = 0
    pmf[2:cap] = np.diff(cdf)[: cap - 2]
    pmf[cap] = 1.0 - cdf[cap - 2]  # round(X) >= cap - 1: capped
    return pmf


def _mixture(cfg: synth.SynthConfig, share: float) -> np.ndarray:
    """pmf of a first request's item count: returning with probability ``share``, else new."""
    cap = cfg.max_seq_len
    ret = _pmf(cfg.returning_history_mean, cfg.returning_history_sigma, cap)
    new = _pmf(cfg.cold_history_mean, cfg.cold_history_sigma, cap)
    return share * ret + (1 - share) * new


def _first_counts(t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times, item counts and first-request mask (independent of the generator)."""
    user = t.column("user_id").to_numpy()
    off = t.column("new_items").combine_chunks().offsets.to_numpy()
    _, first_idx = np.unique(user, return_index=True)
    first = np.zeros(len(user), bool)
    first[first_idx] = True
    return t.column("ts_s").to_numpy(), np.diff(off), first


def test_pmf_helper_hand_case() -> None:
    # sigma -> 0: X = mean - 1 = 9.6 exactly, so 1 + round(X) = 11 with certainty.
    p = _pmf(10.6, 1e-6, 64)
    assert p[11] == pytest.approx(1.0) and p.sum() == pytest.approx(1.0)
    # cap below the value: all mass at the cap.
    assert _pmf(10.6, 1e-6, 5)[5] == pytest.approx(1.0)


def test_returning_users_carry_long_histories() -> None:
    cfg = synth.SynthConfig(
        qps=200.0,
        duration_s=300.0,
        users=4000,
        items=100_000,
        returning_share=0.7,
        returning_history_mean=1500.0,
        returning_history_sigma=1.0,
        max_seq_len=4096,
        seed=21,
    )
    _, k, first = _first_counts(synth.synthesize(cfg))
    kf = k[first]
    n = len(kf)
    assert abs(n - 4000) < 4 * math.sqrt(4000)
    pmf = _mixture(cfg, 0.7)
    support = np.arange(len(pmf))
    mean = float((pmf * support).sum())
    sd = math.sqrt(float((pmf * (support - mean) ** 2).sum()))
    assert abs(kf.mean() - mean) < 4 * sd / math.sqrt(n)
    # Shares above thresholds, and at the cap, match the mixture (binomial tolerances).
    for thr in (100, 500, 2000):
        p = float(pmf[thr + 1 :].sum())
        assert abs((kf > thr).mean() - p) < 4 * math.sqrt(p * (1 - p) / n), thr
    p_cap = float(pmf[-1])
    assert p_cap > 0.04  # the tail really reaches max_seq_len
    assert abs((kf == cfg.max_seq_len).mean() - p_cap) < 4 * math.sqrt(p_cap * (1 - p_cap) / n)
    assert kf.max() == cfg.max_seq_len and k.max() <= cfg.max_seq_len
    # Revisits still add a few items each (geometric, mean new_items_mean), below the cap.
    assert k[~first].mean() < 2 * cfg.new_items_mean


def test_default_workload_is_hstu_scale() -> None:
    """SynthConfig() defaults: most users return with a history of 1k-2k tokens on average,
    p95 of several thousand, capped at 8192."""
    d = synth.SynthConfig()
    assert d.max_seq_len == 8192 and d.returning_share == 0.8
    ret = _pmf(d.returning_history_mean, d.returning_history_sigma, d.max_seq_len)
    support = np.arange(len(ret))
    mean = float((ret * support).sum())
    p95 = int(np.searchsorted(np.cumsum(ret), 0.95))
    assert 1000 <= mean <= 2000 and 4000 <= p95 < 8192 and ret[-1] > 0.005
    # A small trace with the default history knobs follows the same mixture.
    cfg = synth.SynthConfig(qps=100.0, duration_s=240.0, items=100_000, seed=3)
    _, k, first = _first_counts(synth.synthesize(cfg))
    kf = k[first]
    pmf = _mixture(cfg, d.returning_share)
    m = float((pmf * support).sum())
    sd = math.sqrt(float((pmf * (support - m) ** 2).sum()))
    assert abs(kf.mean() - m) < 4 * sd / math.sqrt(len(kf))
    assert 1000 < m < 2000


def test_burst_first_requests_use_burst_returning_share() -> None:
    cfg = synth.SynthConfig(
        regime="burst",
        qps=100.0,
        duration_s=400.0,
        items=50_000,
        returning_share=0.9,
        burst_returning_share=0.2,
        max_seq_len=4096,
        seed=8,
    )
    pl = synth.plan(cfg)
    ts, k, first = _first_counts(synth.synthesize(cfg))
    inside = pl.shape.in_burst(ts)
    thr = 300
    for mask, share in ((inside, 0.2), (~inside, 0.9)):
        kf = k[first & mask]
        p = float(_mixture(cfg, share)[thr + 1 :].sum())
        assert abs((kf > thr).mean() - p) < 4 * math.sqrt(p * (1 - p) / len(kf)), share


def test_returning_share_zero_leaves_trace_unchanged_by_other_returning_knobs() -> None:
    """Returning histories draw from their own stream: with both shares 0, the other
    returning knobs do not touch the trace (traces made before them stay valid)."""
    kw = {"regime": "mixed", "qps": 80.0, "duration_s": 60.0, "items": 5000, "seed": 4}
    off = {"returning_share": 0.0, "burst_new_item_share": 0.0}
    a = synth.synthesize(synth.SynthConfig(**kw, **off))
    b = synth.synthesize(
        synth.SynthConfig(**kw, **off, returning_history_mean=99.0, returning_history_sigma=2.0)
    )
    assert a.equals(b)
    on = synth.synthesize(synth.SynthConfig(**kw, burst_new_item_share=0.0))
    # Same arrivals and users; only first requests' item counts differ.
    assert np.array_equal(a.column("ts_s").to_numpy(), on.column("ts_s").to_numpy())
    assert np.array_equal(a.column("user_id").to_numpy(), on.column("user_id").to_numpy())
    _, ka, first = _first_counts(a)
    _, kb, _ = _first_counts(on)
    assert kb[first].mean() > 3 * ka[first].mean()  # bursts bring new users (short histories)


def test_segments_bound_history_items() -> None:
    """Long histories cut the trace into more generation segments (bounded memory per
    segment) and the expected item count behind the cut matches the trace."""
    cfg = synth.SynthConfig(qps=500.0, duration_s=600.0, items=1_000_000, seed=0)
    pl = synth.plan(cfg)
    from helm_plan.synth import users as su

    est = su.expected_tokens(cfg, pl.expected_requests, 0.0, pl.arrivals.p_out, pl.arrivals.p_in)
    assert pl.arrivals.segments == max(
        math.ceil(pl.expected_requests / su.SEGMENT_REQUESTS), math.ceil(est / su.SEGMENT_TOKENS)
    )
    assert est / pl.expected_requests > 64  # more items than requests decide the cut
    assert pl.arrivals.segments > math.ceil(pl.expected_requests / su.SEGMENT_REQUESTS)
