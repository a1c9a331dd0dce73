"""Catalogs at production scale: 10^8 items in bounded memory, and the --like catalog estimate."""

from __future__ import annotations

import dataclasses
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from helm_plan import synth
from helm_plan.synth.catalog import EXACT_RANKS, estimate_catalog, expected_distinct


def _peak_bytes(cfg: synth.SynthConfig) -> tuple[int, int, int]:
    """(requests, history items, peak bytes): numpy (tracemalloc) plus arrow's pool growth."""
    pool = pa.default_memory_pool()
    arrow0 = pool.max_memory() or 0
    tracemalloc.start()
    try:
        rows = items = 0
        pl = synth.plan(cfg)
        for chunk in synth.iter_chunks(cfg, pl=pl):
            rows += chunk.num_rows
            items += len(chunk.column("new_items").combine_chunks().values)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return rows, items, peak + max(0, (pool.max_memory() or 0) - arrow0)


def test_1e8_item_catalog_generates_in_bounded_memory() -> None:
    """Every item path (Zipf, trend drift, churn, burst hot sets, new-item blocks, the
    bijection) at 10^8 items costs what it costs at 10^4: nothing is sized by the catalog
    (a bool per item alone would be 100 MB)."""
    kw = {
        "regime": "mixed",
        "qps": 100.0,
        "duration_s": 60.0,
        "drift_ranks": 50_000,
        "drift_ranks_per_s": 1000.0,
        "burst_new_item_share": 0.15,
        "seed": 5,
    }
    small = synth.SynthConfig(items=10_000, **kw)
    huge = synth.SynthConfig(items=100_000_000, **kw)
    assert huge.reserved_items == 2 * 1_000_000  # 1% of the catalog per burst
    _peak_bytes(small)  # warm imports and caches
    rows_s, items_s, peak_s = _peak_bytes(small)
    rows_h, items_h, peak_h = _peak_bytes(huge)
    assert rows_h == rows_s and items_h == items_s  # same arrivals and histories
    assert rows_h > 5000 and items_h > 300_000
    assert peak_h < 64 * 2**20, peak_h
    assert peak_h - peak_s < 4 * 2**20, (peak_s, peak_h)
    # The ids really span the huge catalog.
    t = synth.synthesize(huge)
    vals = t.column("new_items").combine_chunks().values.to_numpy()
    assert vals.min() >= 0 and vals.max() < huge.items and vals.max() > huge.items // 2


def test_like_scaled_to_1e8_items_plans_in_bounded_memory(small_trace: Path) -> None:
    f = dataclasses.replace(synth.fit(small_trace), catalog_items=10_000_000)
    cfg = synth.like_config(f, scale=10.0, qps=50.0, duration_s=30.0, seed=1)
    assert cfg.items == 100_000_000
    _, _, peak = _peak_bytes(cfg)
    assert peak < 64 * 2**20


# --- expected distinct items and the catalog estimate ---------------------------------------


def test_expected_distinct_hand_cases() -> None:
    assert expected_distinct(1, 5, 1.0) == pytest.approx(1.0)
    assert expected_distinct(2, 3, 0.0) == pytest.approx(2 * (1 - 0.5**3))
    # Uniform over a catalog past EXACT_RANKS exercises the tail quadrature.
    c, t = 10 * EXACT_RANKS, 10 * EXACT_RANKS
    assert expected_distinct(c, t, 0.0) == pytest.approx(c * (1 - (1 - 1 / c) ** t), rel=1e-5)
    assert expected_distinct(0, 10, 1.0) == 0.0 and expected_distinct(10, 0, 1.0) == 0.0


@pytest.mark.parametrize(
    ("catalog", "draws", "alpha"), [(3000, 20_000, 0.8), (400_000, 300_000, 1.1)]
)
def test_expected_distinct_matches_monte_carlo(catalog: int, draws: int, alpha: float) -> None:
    rng = np.random.default_rng(7)
    runs = [len(np.unique(synth.zipf_ranks(rng.random(draws), catalog, alpha))) for _ in range(5)]
    e = expected_distinct(catalog, draws, alpha)
    # D is a sum of negatively correlated indicators: Var[D] <= E[D].
    assert abs(np.mean(runs) - e) < 4 * math.sqrt(e / len(runs))


def test_estimate_catalog_inverts_expected_distinct() -> None:
    for c0, t, a in [(50_000, 500_000, 0.7), (2_000_000, 1_000_000, 1.0), (300_000, 200_000, 1.3)]:
        d = round(expected_distinct(c0, t, a))
        c, how = estimate_catalog(d, t, a)
        assert how == "zipf" and c == pytest.approx(c0, rel=2e-3), (c0, a)
    # A steep skew cannot show that many distinct items from any catalog: fall back.
    assert estimate_catalog(9_000, 10_000, 3.0) == (9_000, "distinct")
    assert estimate_catalog(1, 10, 1.0) == (1, "distinct")
