"""Per-regime figures: each regime's P99 and attainment against a by-hand cut of the sojourns."""

from __future__ import annotations

import numpy as np
import pytest

from helm_plan import synth
from helm_plan.regimes import RegimeSpan
from helm_plan.sim import NodeConfig, load_context, simulate_node
from helm_plan.sim.regime_figures import regime_table, span_of


@pytest.fixture(scope="module")
def mixed():
    tab = synth.synthesize(
        synth.SynthConfig(regime="mixed", qps=40.0, duration_s=60.0, items=5_000,
                          candidates=8, max_seq_len=256, returning_share=0.0, seed=5)
    )  # fmt: skip
    ctx = load_context(tab, pool_fraction=0.2, seed=5)
    ncfg = NodeConfig(window_s=5.0, slo_ms=0.3)
    runs = {"a": simulate_node(ctx, np.array([0.2]), ncfg),
            "b": simulate_node(ctx, np.array([0.8]), ncfg).compact()}  # fmt: skip
    shape = synth.plan(synth.SynthConfig(regime="mixed", duration_s=60.0, seed=5)).shape
    return ctx, ncfg, runs, shape.spans()


def test_each_regime_by_hand(mixed):
    ctx, ncfg, runs, spans = mixed
    assert [s.name for s in spans] == ["steady", "trend", "burst"]
    df = regime_table(runs, ctx.arrays.ts_s, spans, ncfg.slo_ms)
    assert df.height == 6 and df["regime"].to_list()[:3] == ["steady", "trend", "burst"]
    ts = ctx.arrays.ts_s
    for name, res in runs.items():
        measured = np.arange(len(ts)) >= len(ts) - res.requests
        for s in spans:
            last = s is spans[-1]
            inside = (ts >= s.start_s) & ((ts < s.end_s) | last) & measured
            soj = res.sojourn_s[inside]
            row = df.filter((df["policy"] == name) & (df["regime"] == s.name)).row(0, named=True)
            assert row["requests"] == inside.sum() > 0
            assert row["p99_ms"] == pytest.approx(np.percentile(soj, 99) * 1e3, rel=1e-12)
            assert row["slo_attainment"] == pytest.approx(np.mean(soj <= 0.3e-3), rel=1e-12)
        # every regime together is the pooled figure
        assert df.filter(df["policy"] == name)["requests"].sum() == res.requests


def test_one_span_is_the_pooled_figure_and_names_pool_their_spans(mixed):
    ctx, ncfg, runs, _ = mixed
    whole = [RegimeSpan(0.0, 60.0, "all")]
    df = regime_table(runs, ctx.arrays.ts_s, whole, ncfg.slo_ms)
    for name, res in runs.items():
        row = df.filter(df["policy"] == name).row(0, named=True)
        assert row["p99_ms"] == pytest.approx(res.p99_ms, rel=1e-12)
        assert row["slo_attainment"] == pytest.approx(res.slo_attainment, rel=1e-12)
    # two spans of one name (a scenario's A phases) are one regime
    abab = [RegimeSpan(0, 15, "A"), RegimeSpan(15, 30, "B"), RegimeSpan(30, 45, "A"),
            RegimeSpan(45, 60, "B")]  # fmt: skip
    df = regime_table(runs, ctx.arrays.ts_s, abab, ncfg.slo_ms)
    assert df["regime"].to_list() == ["A", "B", "A", "B"] and set(df["spans"]) == {2}
    ts = ctx.arrays.ts_s
    res = runs["a"]
    a = ((ts < 15) | ((ts >= 30) & (ts < 45))) & (np.arange(len(ts)) >= len(ts) - res.requests)
    row = df.filter((df["policy"] == "a") & (df["regime"] == "A")).row(0, named=True)
    assert row["p99_ms"] == pytest.approx(np.percentile(res.sojourn_s[a], 99) * 1e3, rel=1e-12)


def test_no_spans_empty_table_and_edges():
    assert regime_table({}, np.zeros(3), [], 1.0).is_empty()
    spans = [RegimeSpan(0, 1, "x"), RegimeSpan(1, 2, "y")]
    np.testing.assert_array_equal(span_of(np.array([-1.0, 0.0, 0.99, 1.0, 2.0, 5.0]), spans),
                                  [0, 0, 0, 1, 1, 1])  # fmt: skip
