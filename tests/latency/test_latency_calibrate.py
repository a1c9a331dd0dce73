"""Calibration: the fit recovers known coefficients; a tiny CPU run writes a loadable profile."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan.errors import ConfigError
from helm_plan.latency.calibrate import CalibrateConfig, calibrate
from helm_plan.latency.fit import (
    TERMS_FITTED,
    CalibrationError,
    compute_pred,
    fit_coefficients,
    nnls_relative,
)
from helm_plan.latency.model import build_latency_model
from helm_plan.latency.samples import Samples, point_sums, stack_points, synthetic_samples
from helm_plan.profiles import load_gpu, load_latency, load_model

# GPU-like: the a100-80g gr-small roofline with measured-looking bandwidths.
GPU_TRUTH = {
    "t_launch_s": 140e-6, "t_request_s": 10e-6, "weight_read_s": 1.3e-6,
    "dense_s_per_token": 1.4e-8, "mfu_half_tokens": 864.0, "attn_s_per_pair": 5.25e-11,
    "host_gather_Bps": 38.4e9, "hbm_bw_Bps": 1.5e12, "h2d_bw_Bps": 22e9, "h2d_latency_s": 9e-6,
}  # fmt: skip
# CPU-like (near what this repo measured on a 2-core CPU at gr-small size), with a weight
# floor above the small points' compute so the fit has to leave them out.
CPU_TRUTH = {
    "t_launch_s": 240e-6, "t_request_s": 3e-6, "weight_read_s": 10e-3,
    "dense_s_per_token": 6e-5, "mfu_half_tokens": 4.0, "attn_s_per_pair": 1.5e-7,
    "host_gather_Bps": 9e9, "hbm_bw_Bps": 9e9, "h2d_bw_Bps": 14e9, "h2d_latency_s": 8e-6,
}  # fmt: skip
INTERCEPTS = {"t_weight_call_s": 20e-6, "t_gather_call_s": 10e-6, "t_host_call_s": 15e-6}
TINY = {"layers": 1, "d_model": 32}


def test_nnls_relative_exact_and_nonnegative() -> None:
    X = np.column_stack([np.ones(5), np.arange(1, 6.0)])
    np.testing.assert_allclose(nnls_relative(X, 2 + 3 * X[:, 1]), [2.0, 3.0], rtol=1e-10)
    # A decreasing trend would need a negative slope: NNLS clamps it to 0.
    beta = nnls_relative(X, 10 - X[:, 1])
    assert beta[1] == 0.0 and beta[0] > 0


def test_stack_points_and_sums() -> None:
    pts = stack_points((8, 64), (4, 16, 64), (16, 64), (8,), (1, 3))
    # dense (1,1,1,X-1); prefill n<=L; scoring (1,1,L,M); a batch of 3 mid-grid requests.
    assert pts == [(1, 1, 1, 7), (1, 1, 1, 63), (1, 4, 16, 0), (1, 16, 16, 0), (1, 4, 64, 0),
                   (1, 16, 64, 0), (1, 64, 64, 0), (1, 1, 16, 8), (1, 1, 64, 8), (3, 64, 64, 8)]  # fmt: skip
    B, X, P = point_sums(pts)
    assert (B[-1], X[-1], P[-1]) == (3, 3 * 72, 3 * 72 * 64)
    assert (X[0], P[0]) == (8, 8)


def _cfg() -> CalibrateConfig:
    return CalibrateConfig()


@pytest.mark.parametrize("truth", [GPU_TRUTH, CPU_TRUTH], ids=["gpu", "cpu"])
def test_fit_noise_free_is_exact(truth: dict[str, float]) -> None:
    s = synthetic_samples(truth, _cfg(), row_bytes=512, intercepts=INTERCEPTS, noise=0.0)
    coeffs, mape = fit_coefficients(s)
    assert set(coeffs) == set(truth)
    for k, v in truth.items():
        assert coeffs[k] == pytest.approx(v, rel=1e-6), k
    assert set(mape) == set(TERMS_FITTED)
    assert max(mape.values()) < 1e-6


def test_weight_floor_points_are_left_out_but_scored() -> None:
    s = synthetic_samples(CPU_TRUTH, _cfg(), row_bytes=512, noise=0.0)
    work = s.stack_s - CPU_TRUTH["t_launch_s"] - s.stack_batch * CPU_TRUTH["t_request_s"]
    floor = np.isclose(work, CPU_TRUTH["weight_read_s"], rtol=1e-12)
    assert 0 < floor.sum() < len(floor) - 3  # some points sit on the floor, enough do not
    pred = compute_pred(CPU_TRUTH, s.stack_batch, s.stack_tokens, s.stack_pairs)
    np.testing.assert_allclose(pred, s.stack_s, rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("truth", [GPU_TRUTH, CPU_TRUTH], ids=["gpu", "cpu"])
def test_fit_recovers_known_coefficients_with_noise(truth: dict[str, float], seed: int) -> None:
    s = synthetic_samples(truth, _cfg(), row_bytes=4096, intercepts=INTERCEPTS, noise=0.01,
                          seed=seed)  # fmt: skip
    coeffs, mape = fit_coefficients(s, seed=seed)
    for k in ("t_launch_s", "dense_s_per_token", "attn_s_per_pair", "host_gather_Bps",
              "hbm_bw_Bps", "h2d_bw_Bps"):  # fmt: skip
        assert coeffs[k] == pytest.approx(truth[k], rel=0.05), k
    # Small parts of their timings: the GPU's 1.3 us weight read per copy (5% of a 4-copy
    # call's 25 us), the per-request slope (a few % of a 32-request batch), the half-point
    # (an intercept over a slope) and the copy latency (a small intercept).
    w_tol = 0.05 if truth is CPU_TRUTH else 0.25
    assert coeffs["weight_read_s"] == pytest.approx(truth["weight_read_s"], rel=w_tol)
    assert coeffs["t_request_s"] == pytest.approx(truth["t_request_s"], rel=0.25)
    assert coeffs["mfu_half_tokens"] == pytest.approx(truth["mfu_half_tokens"], rel=0.5, abs=2.0)
    assert coeffs["h2d_latency_s"] == pytest.approx(truth["h2d_latency_s"], rel=0.5)
    assert all(m < 0.1 for m in mape.values()), mape


def test_fit_without_holdout_reports_nan() -> None:
    s = synthetic_samples(GPU_TRUTH, _cfg(), row_bytes=4096, noise=0.0)
    _, mape = fit_coefficients(s, holdout_fraction=0.0)
    assert all(math.isnan(m) for m in mape.values())


def test_flat_timings_are_a_calibration_error() -> None:
    s = synthetic_samples(GPU_TRUTH, _cfg(), row_bytes=4096, noise=0.0)
    flat = dataclasses.replace(s, h2d_s=np.full_like(s.h2d_s, 1e-5))
    with pytest.raises(CalibrationError, match="H2D copy"):
        fit_coefficients(flat)
    flat = dataclasses.replace(s, stack_s=np.full_like(s.stack_s, 1.0))
    with pytest.raises(CalibrationError, match="dense_s_per_token"):
        fit_coefficients(flat)


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="device"):
        CalibrateConfig(device="tpu")
    with pytest.raises(ConfigError, match="n_grid"):
        CalibrateConfig(n_grid=(8,))
    with pytest.raises(ConfigError, match="dtype"):
        CalibrateConfig(dtype="int4")
    with pytest.raises(ConfigError, match="token_grid"):
        CalibrateConfig(token_grid=(1, 8))


def test_calibrate_cpu_tiny() -> None:
    calls: list[tuple[int, int]] = []
    cfg = CalibrateConfig.quick(threads=1, **TINY)
    res = calibrate(cfg, progress=lambda d, t: calls.append((d, t)))
    n_pts = len(cfg.points())
    total = cfg.repeats * (len(cfg.tiny_batch_grid) + len(cfg.weight_sets_grid) + n_pts
                           + 3 * len(cfg.lookup_grid))  # fmt: skip
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    p = res.profile
    assert p.gpu == "cpu" and p.model == "gr-small-scaled-l1-d32"
    assert p.source.startswith("measured on CPU") and "torch" in p.source
    for k in ("t_launch_s", "dense_s_per_token", "hbm_bw_Bps", "h2d_bw_Bps", "host_gather_Bps"):
        assert getattr(p, k) > 0, k
    assert isinstance(res.samples, Samples) and len(res.samples.stack_s) == n_pts
    # Timings grow with work: the biggest dense point is slower than the smallest.
    dense = res.samples.stack_tokens[: len(cfg.token_grid)]
    t = res.samples.stack_s[: len(cfg.token_grid)]
    assert t[np.argmax(dense)] > t[np.argmin(dense)]
    assert set(res.mape_heldout) == set(TERMS_FITTED)


def test_cli_calibrate_writes_loadable_toml(tmp_path: Path) -> None:
    out = tmp_path / "lat.toml"
    r = CliRunner().invoke(
        app,
        ["calibrate", "--device", "cpu", "--quick", "--layers", "1", "--d-model", "32",
         "--threads", "1", "--gpu", "mybox", "--json", "-o", str(out)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert set(info["heldout_mape"]) == set(TERMS_FITTED)
    lat = load_latency(out)
    assert lat.gpu == "mybox" and lat.name == "mybox_gr-small-scaled-l1-d32"
    assert lat.dense_s_per_token == info["coefficients"]["dense_s_per_token"]
    # Measured bandwidths override the GPU datasheet when the model is built.
    m = build_latency_model(load_gpu("a100-80g"), load_model("gr-small"), lat)
    assert m.hbm_bw_Bps == lat.hbm_bw_Bps != load_gpu("a100-80g").hbm_bw_Bps
    assert m.service_time_s(10, 100, 8, 18 * 4096, 2 * 4096) > 0


def test_cli_calibrate_table(tmp_path: Path) -> None:
    out = tmp_path / "t.toml"
    r = CliRunner().invoke(
        app, ["calibrate", "--quick", "--layers", "1", "--d-model", "32", "--threads", "1",
              "-q", "-o", str(out)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "held-out MAPE" in r.stdout and "compute" in r.stdout and f"wrote {out}" in r.stdout
    assert "efficiency half-point" in r.stdout
    assert out.exists()


def test_cli_cuda_unavailable_is_one_line_error(tmp_path: Path, monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "x.toml"
    r = CliRunner().invoke(app, ["calibrate", "--device", "cuda", "-o", str(out)])
    assert r.exit_code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --device cuda requested but CUDA")
    assert "use --device cpu" in lines[0]
    assert not out.exists()
