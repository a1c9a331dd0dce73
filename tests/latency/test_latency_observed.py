"""Fitting the model to observed latencies: recovery on synthetic data, held terms, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_table
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import arrays, trace
from helm_plan.errors import ConfigError, TraceError
from helm_plan.latency.model import LatencyModel
from helm_plan.latency.observed import FITTED, fit_observed
from helm_plan.profiles import load_latency
from helm_plan.sim import fit as sim_fit

TRUTH = LatencyModel(
    t0_s=300e-6,
    prefill_a_s=3e-8,
    prefill_b_s=8e-11,
    score_c_s=2e-8,
    score_d_s=4e-11,
    host_gather_s=6e-7,
    row_bytes=4096,
    hbm_bw_Bps=2e12,
    h2d_bw_Bps=25e9,
    h2d_latency_s=12e-6,
)
# A base that is wrong in every fitted coefficient but shares the bandwidths.
BASE = LatencyModel(
    t0_s=100e-6,
    prefill_a_s=1e-8,
    prefill_b_s=2e-11,
    score_c_s=1e-8,
    score_d_s=1e-11,
    host_gather_s=2e-7,
    row_bytes=4096,
    hbm_bw_Bps=2e12,
    h2d_bw_Bps=25e9,
    h2d_latency_s=5e-6,
)


def _requests(n: int, seed: int, const_m: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    L = rng.integers(20, 2048, n)
    kv_hit = rng.random(n) < 0.6
    n_comp = np.where(kv_hit, np.minimum(L, rng.integers(1, 30, n)), L)
    M = np.full(n, const_m) if const_m is not None else rng.integers(8, 513, n)
    look = n_comp + M
    miss = np.where(rng.random(n) < 0.3, 0, rng.binomial(look, rng.uniform(0.05, 0.6, n)))
    return {"n_computed": n_comp, "ctx_len": L, "n_cand": M, "n_lookup": look, "n_miss": miss}


def _latency_ms(p: dict[str, np.ndarray], noise: float, seed: int) -> np.ndarray:
    s = TRUTH.service_time_s(p["n_computed"], p["ctx_len"], p["n_cand"], p["n_lookup"], p["n_miss"])
    return s * 1e3 * (1 + noise * np.random.default_rng(seed + 100).standard_normal(len(s)))


def test_recovers_known_coefficients() -> None:
    p = _requests(5000, seed=3)
    fit = fit_observed(_latency_ms(p, 0.01, 3), p, base=BASE, seed=3)
    assert fit.held_at_base == ()
    for k in FITTED:
        assert fit.coefficients[k] == pytest.approx(getattr(TRUTH, k), rel=0.05), k
    assert fit.mape_heldout < 0.015 and fit.mape_train < 0.015
    assert fit.mape_base_heldout > 0.3  # the wrong base is far off
    assert fit.n_heldout == 1000 and fit.n_train == 4000
    assert fit.model.hbm_bw_Bps == BASE.hbm_bw_Bps


def test_noise_free_is_exact() -> None:
    p = _requests(800, seed=5)
    fit = fit_observed(_latency_ms(p, 0.0, 5), p, base=BASE)
    for k in FITTED:
        assert fit.coefficients[k] == pytest.approx(getattr(TRUTH, k), rel=1e-6), k
    assert fit.mape_heldout < 1e-8


def test_constant_candidates_hold_c_at_base() -> None:
    # With M = 512 everywhere, c·M is a constant indistinguishable from t0.
    p = _requests(2000, seed=7, const_m=512)
    fit = fit_observed(_latency_ms(p, 0.0, 7), p, base=BASE)
    assert fit.held_at_base == ("score_c_s",)
    assert fit.coefficients["score_c_s"] == BASE.score_c_s
    # t0 absorbs the difference, so predictions stay exact.
    assert fit.coefficients["t0_s"] == pytest.approx(
        TRUTH.t0_s + (TRUTH.score_c_s - BASE.score_c_s) * 512, rel=1e-6
    )
    assert fit.mape_heldout < 1e-8


def test_nan_rows_dropped_and_errors() -> None:
    p = _requests(400, seed=9)
    y = _latency_ms(p, 0.0, 9)
    y[:10] = np.nan
    fit = fit_observed(y, p, base=BASE)
    assert fit.n_dropped == 10 and fit.n_train + fit.n_heldout == 390
    y[20] = -1.0
    with pytest.raises(TraceError, match="row 20, column latency_ms"):
        fit_observed(y, p, base=BASE)
    with pytest.raises(ConfigError, match="n_miss"):
        fit_observed(y, {k: v for k, v in p.items() if k != "n_miss"}, base=BASE)


def test_predictors_from_trace_extremes() -> None:
    from helm_plan.profiles import load_model

    model = load_model("gr-small")
    arr = arrays.from_table(small_table(300, seed=2), seed=0)
    L = np.minimum(arr.hist_end, model.max_seq_len)
    M = arr.n_candidates.astype(np.int64)
    # r = 1: no KV at all, so every request recomputes its whole context.
    p = sim_fit.predictors_from_trace(arr, model, ratio=1.0, pool_bytes=1 << 30)
    np.testing.assert_array_equal(p["ctx_len"], L)
    np.testing.assert_array_equal(p["n_computed"], L)
    np.testing.assert_array_equal(p["n_lookup"], L + M)
    # A 1 GiB EMB cache holds all items: each distinct item misses exactly once.
    assert p["n_miss"].sum() == len(np.unique(arr.cand_values.tolist() + arr.hist_values.tolist()))
    # r = 0: no EMB rows, so every lookup misses.
    p0 = sim_fit.predictors_from_trace(arr, model, ratio=0.0, pool_bytes=1 << 30)
    np.testing.assert_array_equal(p0["n_miss"], p0["n_lookup"])
    np.testing.assert_array_equal(p0["n_lookup"], p0["n_computed"] + M)
    assert (p0["n_computed"] < L).any()  # returning users reuse their KV prefix


def test_cli_fit_end_to_end(tmp_path: Path) -> None:
    from helm_plan.profiles import load_gpu, load_model

    pool = 3 << 20  # small enough that both caches miss
    table = small_table(600, seed=4)
    arr = arrays.from_table(table, seed=0)
    p = sim_fit.predictors_from_trace(arr, load_model("gr-small"), ratio=0.5, pool_bytes=pool)
    assert 0 < p["n_miss"].sum() < p["n_lookup"].sum()
    lat = _latency_ms(p, 0.005, 4)
    path = tmp_path / "obs.parquet"
    trace.write(table.append_column("latency_ms", pa.array(lat)), path, {"source": "test"})
    out = tmp_path / "fitted.toml"
    r = CliRunner().invoke(
        app,
        ["fit", str(path), "--gpu", "a100-80g", "--model", "gr-small", "--ratio", "0.5",
         "--pool-bytes", str(pool), "--json", "-o", str(out)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["mape_heldout"] < 0.02 and info["base_profile"] == "a100-80g_gr-small"
    assert "score_c_s" in info["held_at_base"]  # small_table has 8 candidates everywhere
    prof = load_latency(out)
    assert prof.gpu == "a100-80g" and "fitted to observed latency_ms" in prof.source
    assert prof.h2d_bw_Bps == load_gpu("a100-80g").h2d_bw_Bps
    # Short histories leave b weakly identified; check predictions instead of each coefficient.
    from helm_plan.latency.model import build_latency_model

    fitted = build_latency_model(load_gpu("a100-80g"), load_model("gr-small"), prof)
    args = (p["n_computed"], p["ctx_len"], p["n_cand"], p["n_lookup"], p["n_miss"])
    np.testing.assert_allclose(fitted.service_time_s(*args), TRUTH.service_time_s(*args), rtol=0.03)
    # The table form and --pool-fraction also run.
    r2 = CliRunner().invoke(app, ["fit", str(path), "--pool-fraction", "0.3", "-q"])
    assert r2.exit_code == 0, r2.output
    assert "held-out MAPE" in r2.stdout


def test_cli_fit_needs_latency_column(small_trace: Path) -> None:
    r = CliRunner().invoke(app, ["fit", str(small_trace)])
    assert r.exit_code != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "no latency_ms column" in last
