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


def _without(run, *names):
    return dataclasses.replace(run, tables={k: v for k, v in run.tables.items() if k not in names})


def _policies(run, **cols):
    """The run with policies-table columns replaced: ``p99_ms={"kv-max": 3.0}`` etc."""
    pol = run.tables["policies"]
    for col, by_name in cols.items():
        pol = pol.with_columns(
            pl.Series(col, [by_name.get(p, v) for p, v in zip(pol["policy"], pol[col], strict=True)],
                      dtype=pl.Float64)
        )  # fmt: skip
    return dataclasses.replace(run, tables={**run.tables, "policies": pol})


def _adaptivity(run, **vals):
    ad = run.tables["adaptivity"].with_columns(
        *[pl.when(pl.col("policy") == "adaptive").then(pl.lit(v, pl.Float64)).otherwise(pl.col(k)).alias(k)
          for k, v in vals.items()]
    )  # fmt: skip
    return dataclasses.replace(run, tables={**run.tables, "adaptivity": ad})


def _ok(run):
    """Every policy meets the SLO (no overload sentence)."""
    pol = run.tables["policies"].with_columns(pl.lit(0.999).alias("slo_attainment"))
    return dataclasses.replace(run, tables={**run.tables, "policies": pol})


def test_setup_stats_and_oracle_schedule_from_the_meta():
    run = make_run()
    run = dataclasses.replace(
        run, meta={**run.meta, "footprint_bytes": 123, "oracle_schedule": "best-static"}
    )
    s = build_summary(run)
    assert s["setup"] == {"gpu": "h100-80g", "model": "gr-small", "latency": "h100-80g_gr-small",
                          "slo_ms": 100.0, "window_s": 10.0, "windows": 6, "pool_bytes": 2**31,
                          "pool_source": "test", "footprint_bytes": 123}  # fmt: skip
    assert s["oracle"]["schedule"] == "best-static"
    stats = pl.DataFrame({"name": ["a", "b", "c"], "value": [3.0, 2.0**53 - 1, 2.0**53],
                          "text": [None, None, None]})  # fmt: skip
    t = build_summary(dataclasses.replace(run, tables={**run.tables, "stats": stats}))["trace"]
    assert t == {"path": "t.parquet", "a": 3, "b": 2**53 - 1, "c": 2.0**53}
    assert (
        type(t["a"]) is int and type(t["b"]) is int and type(t["c"]) is float
    )  # beyond 2**53 a float is not an int


def test_a_run_with_no_tables_summarises_to_nones():
    run = _without(make_run(), *make_run().tables)
    s = build_summary(run)
    assert s["policies"] == [] and s["timings_s"] == {} and s["stages_cached"] == []
    assert s["versions"] == {}
    assert s["oracle"]["ratio_min"] is None and s["oracle"]["ratio_max"] is None
    assert s["best_static"]["p99_ms"] is None and s["best_static"]["ratio"] == 0.5
    assert set(s["value_of_adaptivity"].values()) == {"adaptive", "best-static", None}
    assert s["sensitivity"]["median_flat_width"] is None
    assert s["verdict"] == []  # no best-static P99, no labels, no adaptivity row


def test_verdict_without_a_baseline_or_a_best_static_ratio():
    run = _ok(make_run())
    pol = run.tables["policies"].filter(pl.col("policy") != "best-static")
    v = verdict(dataclasses.replace(run, tables={**run.tables, "policies": pol}))
    assert not any("gives a P99" in x or "split matters" in x for x in v)
    nometa = {k: x for k, x in run.meta.items() if k != "best_static_ratio"}
    v = verdict(dataclasses.replace(run, meta=nometa))
    assert not any(x.startswith("Best static split") for x in v)
    v = verdict(_policies(run, slo_attainment={"best-static": float("nan")}))
    assert (
        "Best static split: r = 0.50 (EMB share of the pool), P99 12.00 ms, SLO attainment n/a."
        in v
    )


def test_verdict_overload_threshold_is_strict():
    run = make_run()
    at = run.tables["policies"].with_columns(pl.lit(0.99).alias("slo_attainment"))
    v = verdict(dataclasses.replace(run, tables={**run.tables, "policies": at}))
    assert not any("No policy meets the SLO" in x for x in v)
    v = verdict(make_run())
    assert v[0].endswith(
        "The node is overloaded; the answer is more capacity, not a different split."
    )


def test_verdict_flat_split_and_ratio_range_sentences():
    v = verdict(_ok(make_run(flat=True)))
    assert v[0] == (
        "The EMB/KV split hardly matters for this workload and profile: even giving the whole pool "
        "to one cache stays within 2% of the best static P99 (against the best static split, the "
        "whole pool to EMB gives a P99 0.0% above it and the whole pool to KV gives a P99 0.0% "
        "above it). Any reasonable ratio is a valid plan; spend effort elsewhere."
    )
    run = _ok(make_run())
    r = run.tables["labels"]["r_star"]
    width = float(np.median(run.tables["labels"]["flat_width"].to_numpy()))
    want = (f"The per-window optimum r* ranges over [{r.min():.2f}, {r.max():.2f}] (moves by "
            f"{r.max() - r.min():.2f}); in the median window any r within a band {width:.2f} wide "
            "is within 2% of the best P99.")  # fmt: skip
    assert want in verdict(run)
    lab = run.tables["labels"].with_columns(pl.lit(None, pl.Float64).alias("flat_width"))
    v = verdict(dataclasses.replace(run, tables={**run.tables, "labels": lab}))
    assert (
        f"The per-window optimum r* ranges over [{r.min():.2f}, {r.max():.2f}] (moves by {r.max() - r.min():.2f})."
        in v
    )
    assert not any("per-window optimum" in x for x in verdict(_without(run, "labels")))


@pytest.mark.parametrize(
    ("red", "lo", "hi", "conf", "want"),
    [
        (-0.2, -0.3, -0.1, 0.95, "Adapting the split per window makes P99 worse by 20.0% (95% CI "
         "-30.0% to -10.0%): reallocation costs more than it gains here; keep a static split."),
        (0.1, 0.0, 0.2, 0.9, "Adapting the split per window changes P99 by 10.0%, but the 90% CI "
         "(0.0% to 20.0%) includes zero: no reliable gain over the best static split."),
        (-0.1, -0.2, 0.0, 0.95, "Adapting the split per window changes P99 by -10.0%, but the 95% CI "
         "(-20.0% to 0.0%) includes zero: no reliable gain over the best static split."),
        (-0.1, -0.2, 0.5, None, "Adapting the split per window changes P99 by -10.0%, but the CI "
         "(-20.0% to 50.0%) includes zero: no reliable gain over the best static split."),
        (0.1, None, None, 0.95, "Adapting the split per window changes P99 by 10.0%, but the 95% CI "
         "(n/a) includes zero: no reliable gain over the best static split."),
    ],
)  # fmt: skip
def test_verdict_adaptivity_sentence_by_ci(red, lo, hi, conf, want):
    run = _adaptivity(make_run(), p99_reduction=red, ci_low=lo, ci_high=hi, confidence=conf)
    assert want in verdict(run)


def test_verdict_refill_mode_sentence():
    run = _ok(make_run())
    same = _policies(run, p99_ms={"naive-adaptive": 10.5})
    assert verdict(same)[-1] == (
        "Refill mode hardly matters here: with the oracle schedule, eager (blocking) refill gives "
        "P99 10.500 ms, throttled background refill 10.500 ms."
    )
    # a gap exactly at the tolerance hardly matters: 15/10 - 1 = 0.5
    at = _policies(run, p99_ms={"naive-adaptive": 15.0, "adaptive": 10.0})
    at = dataclasses.replace(at, meta={**at.meta, "flat_tol": 0.5})
    assert verdict(at)[-1].startswith("Refill mode hardly matters here")
    for missing in ("naive-adaptive", "adaptive"):
        v = verdict(_policies(run, p99_ms={missing: float("nan")}))
        assert not any(x.startswith("Refill mode") for x in v)
