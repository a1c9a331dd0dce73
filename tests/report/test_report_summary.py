"""summary.json's derived figures, each computed again by hand from the fake run's tables."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from fake_run import make_run

from helm_plan.report.summary import build_summary, sensitivity_summary, verdict


def _with_p99(run, **p99):
    """The run with some policies' overall P99 (ms) replaced (keys use _ for -)."""
    want = {k.replace("_", "-"): v for k, v in p99.items()}
    pol = run.tables["policies"].with_columns(
        pl.struct("policy", "p99_ms")
        .map_elements(lambda r: want.get(r["policy"], r["p99_ms"]), return_dtype=pl.Float64)
        .alias("p99_ms")
    )
    return dataclasses.replace(run, tables={**run.tables, "policies": pol})


def test_extreme_split_penalty_is_the_worse_extreme_against_best_static():
    run = make_run()  # best static 12, emb-max 30, kv-max 25
    s = sensitivity_summary(run)
    assert s["extreme_split_penalty"] == pytest.approx(30.0 / 12.0 - 1.0)
    assert s["split_matters"] is True and s["flat_tolerance"] == 0.02
    widths = run.tables["labels"]["flat_width"].to_numpy()
    assert s["median_flat_width"] == pytest.approx(float(np.median(widths)))
    # the worse extreme is kv-max now
    s = sensitivity_summary(_with_p99(run, emb_max=13.0, kv_max=15.0))
    assert s["extreme_split_penalty"] == pytest.approx(15.0 / 12.0 - 1.0)


def test_split_matters_only_strictly_above_the_run_tolerance():
    run = _with_p99(make_run(), emb_max=18.0, kv_max=11.0)  # penalty 18/12 - 1 = 0.5 exactly
    at = dataclasses.replace(run, meta={**run.meta, "flat_tol": 0.5})
    s = sensitivity_summary(at)
    assert s["extreme_split_penalty"] == 0.5 and s["flat_tolerance"] == 0.5
    assert s["split_matters"] is False
    below = dataclasses.replace(run, meta={**run.meta, "flat_tol": 0.49})
    assert sensitivity_summary(below)["split_matters"] is True
    flat = sensitivity_summary(make_run(flat=True))
    assert flat["extreme_split_penalty"] == 0.0 and flat["split_matters"] is False


def test_no_penalty_without_a_baseline_or_an_extreme():
    run = make_run()
    pol = run.tables["policies"].filter(pl.col("policy") != "best-static")
    s = sensitivity_summary(dataclasses.replace(run, tables={**run.tables, "policies": pol}))
    assert s["extreme_split_penalty"] is None and s["split_matters"] is None
    s = sensitivity_summary(_with_p99(run, kv_max=float("nan")))
    assert s["extreme_split_penalty"] is None and s["split_matters"] is None
    pol = run.tables["policies"].filter(pl.col("policy") != "emb-max")
    s = sensitivity_summary(dataclasses.replace(run, tables={**run.tables, "policies": pol}))
    assert s["extreme_split_penalty"] == pytest.approx(25.0 / 12.0 - 1.0)


def test_summary_sections_and_numbers_by_hand():
    run = make_run()
    s = build_summary(run)
    assert s["schema"] == "helm-plan/summary"
    assert s["trace"] == {"path": "t.parquet", "requests": 3000, "users": 200,
                          "zipf_alpha": 1.05, "model": "gr-small"}  # fmt: skip
    assert s["setup"]["gpu"] == "h100-80g" and s["setup"]["pool_bytes"] == 2**31
    assert s["setup"]["footprint_bytes"] is None
    assert s["oracle"] == {
        "p99_ms": 10.0, "slo_attainment": 0.99, "schedule": "labels",
        "ratio_min": run.tables["labels"]["r_star"].min(),
        "ratio_max": run.tables["labels"]["r_star"].max(),
    }  # fmt: skip
    assert s["value_of_adaptivity"] == {
        "policy": "adaptive", "baseline": "best-static", "p99_reduction": 1 - 10.5 / 12.0,
        "ci_low": 1 - 10.5 / 12.0 - 0.05, "ci_high": 1 - 10.5 / 12.0 + 0.05,
        "confidence": 0.95, "n_boot": 1000,
    }  # fmt: skip
    pol = {p["name"]: p for p in s["policies"]}
    assert pol["kv-max"] == {"name": "kv-max", "p99_ms": 25.0, "slo_attainment": 0.97,
                             "mean_ratio": 0.0}  # fmt: skip
    assert s["sensitivity"] == sensitivity_summary(run)
    assert s["verdict"] == verdict(run)
    assert s["timings_s"] == {"inspect": 0.5, "curves": 1.5}
    assert s["stages_cached"] == ["curves"]
    assert s["versions"] == {"python": "3.11", "numpy": "2.4"}
    json.dumps(s, allow_nan=False)


def test_verdict_sentences_carry_the_numbers():
    v = verdict(make_run())  # every policy serves 97% within the SLO: overloaded first
    assert v[0].startswith("No policy meets the SLO at this load: the best serves 97.0% of requests "
                           "within 100.0 ms (a P99 SLO needs 99%).")  # fmt: skip
    assert v[1] == (
        "The EMB/KV split matters (against the best static split, the whole pool to EMB gives a "
        "P99 150.0% above it and the whole pool to KV gives a P99 108.3% above it)."
    )
    assert (
        v[2]
        == "Best static split: r = 0.50 (EMB share of the pool), P99 12.00 ms, SLO attainment 97.0%."
    )
    assert any(x.startswith("Adapting the split per window (throttled refill) cuts P99 by 12.5% "
                            "against the best static split (95% CI 7.5% to 17.5%)") for x in v)  # fmt: skip
    gap = 14.0 / 10.5 - 1.0
    assert gap > 0.02
    assert v[-1] == ("Refill mode matters: with the oracle schedule, eager (blocking) refill gives "
                     "P99 14.000 ms, throttled background refill 10.500 ms.")  # fmt: skip
