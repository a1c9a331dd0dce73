"""Bursts with new content (issue 14, item 6): new users and new long-tail items at set shares.

Shares are measured on the generated table and compared with the configured
values within binomial tolerances (4 standard errors from the counts). Only
the burst intervals and the documented id block of each burst's new items are
taken from the plan, to know where to look; that the block's ids are unseen
before the burst is then checked on the trace itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helm_plan import synth
from helm_plan.errors import ConfigError


def _tol(p: float, n: int) -> float:
    return 4 * math.sqrt(p * (1 - p) / n)


def _flat(t) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ts, user, per-token request times, flat items."""
    ni = t.column("new_items").combine_chunks()
    off = ni.offsets.to_numpy().astype(np.int64)
    ts = t.column("ts_s").to_numpy()
    return ts, t.column("user_id").to_numpy(), np.repeat(ts, np.diff(off)), ni.values.to_numpy()


CFG = synth.SynthConfig(
    regime="burst",
    qps=200.0,
    duration_s=300.0,
    items=3000,
    zipf_alpha=0.5,
    returning_share=0.0,
    burst_hot_share=0.5,
    burst_new_item_share=0.3,
    burst_new_items=150,
    burst_cold_share=0.6,
    seed=13,
)


@pytest.fixture(scope="module")
def burst_trace():
    return synth.plan(CFG), synth.synthesize(CFG)


def test_new_items_share_and_unseen_before_burst(burst_trace) -> None:
    pl, t = burst_trace
    ts, _, tok_t, vals = _flat(t)
    assert pl.items.new_per_burst == 150 and pl.items.regular == 3000 - 4 * 150
    blocks = []
    for b, (a, e) in enumerate(pl.shape.bursts):
        ids = pl.items.new_item_ids(b, CFG.items)
        assert len(np.unique(ids)) == 150 and ids.min() >= 0 and ids.max() < CFG.items
        blocks.append(ids)
        inside = (tok_t >= a) & (tok_t < e)
        is_new = np.isin(vals, ids)
        # The share of the burst's items that are its new items is as configured ...
        share = is_new[inside].mean()
        assert abs(share - CFG.burst_new_item_share) < _tol(0.3, int(inside.sum())), b
        # ... and not one of those ids occurs anywhere outside the burst (so never before it).
        assert not is_new[~inside].any(), b
        # Measured without the block: items of the burst unseen before its start cover at
        # least the new-item share (regular tail items may be first seen there too).
        seen_before = np.unique(vals[tok_t < a])
        unseen = ~np.isin(vals[inside], seen_before)
        assert unseen.mean() > CFG.burst_new_item_share - _tol(0.3, int(inside.sum()))
        # Zipf within the block: its top item is drawn far more often than its median one.
        _, c = np.unique(vals[inside & is_new], return_counts=True)
        assert np.sort(c)[-1] > 3 * np.median(c)
    assert len(np.unique(np.concatenate(blocks))) == 4 * 150  # disjoint blocks
    # Hot sets never contain new items.
    assert not np.isin(pl.hot_items, np.concatenate(blocks)).any()


def test_hot_and_new_shares_partition_burst_items(burst_trace) -> None:
    pl, t = burst_trace
    _, _, tok_t, vals = _flat(t)
    for b, (a, e) in enumerate(pl.shape.bursts):
        inside = (tok_t >= a) & (tok_t < e)
        n = int(inside.sum())
        hot = np.isin(vals[inside], pl.hot_items[b])
        # Hot ids also come through the regular draws (the remaining 0.2 of the items);
        # a uniform 500-of-2400 hot set takes 500/2400 of them on average.
        rest = 1 - CFG.burst_hot_share - CFG.burst_new_item_share
        expected = CFG.burst_hot_share + rest * CFG.burst_hot_items / pl.items.regular
        assert hot.mean() > CFG.burst_hot_share - _tol(0.5, n)
        assert hot.mean() < CFG.burst_hot_share + rest
        assert abs(hot.mean() - expected) < 0.05, b


def test_burst_cold_share_is_as_configured(burst_trace) -> None:
    pl, t = burst_trace
    ts, user, _, _ = _flat(t)
    _, first_idx = np.unique(user, return_index=True)
    first = np.zeros(len(user), bool)
    first[first_idx] = True
    inside = pl.shape.in_burst(ts)
    n = int(inside.sum())
    assert abs(first[inside].mean() - CFG.burst_cold_share) < _tol(0.6, n)
    # Outside bursts: users / expected requests outside (one user per 12 by default).
    p_out = pl.arrivals.p_out
    assert abs(first[~inside].mean() - p_out) < _tol(p_out, int((~inside).sum()))


def test_new_items_knob_validation() -> None:
    with pytest.raises(ConfigError, match="burst_hot_share \\+ burst_new_item_share") as e:
        synth.SynthConfig(burst_hot_share=0.8, burst_new_item_share=0.3)
    assert e.value.hint
    with pytest.raises(ConfigError, match="more than half of items") as e:
        synth.SynthConfig(regime="burst", items=1000, burst_new_items=200)
    assert "burst_new_items" in e.value.hint
    # Default block: 1% of the catalog per burst, none without bursts or with share 0.
    assert synth.SynthConfig(regime="burst", items=1_000_000).reserved_items == 4 * 10_000
    assert synth.SynthConfig(regime="mixed", items=1_000_000).reserved_items == 2 * 10_000
    assert synth.SynthConfig(regime="steady").reserved_items == 0
    assert synth.SynthConfig(regime="burst", burst_new_item_share=0.0).reserved_items == 0
    assert synth.SynthConfig(regime="burst", items=50).new_items_per_burst == 1


def test_burst_regime_records_each_burst_and_the_steady_stretches_between():
    from helm_plan import regimes

    sh = regimes.shape("burst", qps=10.0, duration_s=100.0, seed=3, bursts_per_duration=3)
    spans = sh.spans()
    assert [s.name for s in spans if s.name == "burst"] == ["burst"] * 3
    assert [(s.start_s, s.end_s) for s in spans if s.name == "burst"] == sorted(sh.bursts)
    assert spans[0].start_s == 0.0 and spans[-1].end_s == 100.0
    assert all(a.end_s == b.start_s for a, b in zip(spans, spans[1:], strict=False))
    assert {s.name for s in spans} == {"steady", "burst"}
    # overlapping bursts (long ones in neighbouring slots) make one burst span
    wide = regimes.shape("burst", qps=10.0, duration_s=100.0, seed=1, bursts_per_duration=2,
                         burst_len_frac=0.25)  # fmt: skip
    got = [s for s in wide.spans() if s.name == "burst"]
    assert sum(s.end_s - s.start_s for s in got) <= sum(b - a for a, b in wide.bursts) + 1e-9
    assert all(a.end_s == b.start_s for a, b in zip(wide.spans(), wide.spans()[1:], strict=False))
