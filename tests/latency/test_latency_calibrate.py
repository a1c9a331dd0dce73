"""Calibration: the fit recovers known coefficients; a tiny CPU run writes a loadable profile."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan.errors import ConfigError
from helm_plan.latency.calibrate import CalibrateConfig, calibrate, synthetic_samples
from helm_plan.latency.fit import Samples, fit_coefficients, nnls_relative
from helm_plan.latency.model import build_latency_model
from helm_plan.profiles import load_gpu, load_latency, load_model

TRUE = {
    # Near what this repo measured on a 2-core CPU at gr-small size.
    "prefill_a_s": 1.6e-5,
    "prefill_b_s": 3.9e-8,
    "score_c_s": 7.8e-6,
    "score_d_s": 2.8e-8,
    "host_gather_s": 3.0e-7,
    "hbm_bw_Bps": 12e9,
    "h2d_bw_Bps": 19e9,
}
INTERCEPTS = {
    "t_prefill_s": 5e-4,
    "t_score_s": 7e-4,
    "t_gather_s": 2e-6,
    "t_host_s": 3e-6,
    "t_copy_s": 1e-5,
}
TINY = {"layers": 1, "d_model": 32}


def test_nnls_relative_exact_and_nonnegative() -> None:
    X = np.column_stack([np.ones(5), np.arange(1, 6.0)])
    np.testing.assert_allclose(nnls_relative(X, 2 + 3 * X[:, 1]), [2.0, 3.0], rtol=1e-10)
    # A decreasing trend would need a negative slope: NNLS clamps it to 0.
    beta = nnls_relative(X, 10 - X[:, 1])
    assert beta[1] == 0.0 and beta[0] > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_coefficients(seed: int) -> None:
    s = synthetic_samples(TRUE, row_bytes=4096, intercepts=INTERCEPTS, noise=0.01, seed=seed)
    coeffs, mape = fit_coefficients(s, seed=seed)
    for k, v in TRUE.items():
        assert coeffs[k] == pytest.approx(v, rel=0.05), k
    assert coeffs["t0_s"] == pytest.approx(5e-4 + 7e-4 + 2e-6, rel=0.05)
    # The copy intercept is < 1% of the largest copy time, so 1% noise moves it most.
    assert coeffs["h2d_latency_s"] == pytest.approx(3e-6 + 1e-5, rel=0.2)
    assert set(mape) == {"prefill", "score", "emb_hbm", "host_gather", "h2d"}
    assert all(m < 0.1 for m in mape.values()), mape


def test_fit_noise_free_is_exact() -> None:
    s = synthetic_samples(TRUE, row_bytes=256, intercepts=INTERCEPTS, noise=0.0)
    coeffs, mape = fit_coefficients(s)
    for k, v in TRUE.items():
        assert coeffs[k] == pytest.approx(v, rel=1e-6), k
    assert max(mape.values()) < 1e-6


def test_fit_without_holdout_reports_nan() -> None:
    s = synthetic_samples(TRUE, row_bytes=4096, noise=0.0)
    _, mape = fit_coefficients(s, holdout_fraction=0.0)
    assert all(math.isnan(m) for m in mape.values())


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="device"):
        CalibrateConfig(device="tpu")
    with pytest.raises(ConfigError, match="n_grid"):
        CalibrateConfig(n_grid=(8,))
    with pytest.raises(ConfigError, match="dtype"):
        CalibrateConfig(dtype="int4")


def test_calibrate_cpu_tiny(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    cfg = CalibrateConfig.quick(threads=1, **TINY)
    res = calibrate(cfg, progress=lambda d, t: calls.append((d, t)))
    # n<=L keeps all 3x3 prefill points; every repeat of every point ticks.
    total = cfg.repeats * (9 + 9 + 3 * len(cfg.lookup_grid))
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    p = res.profile
    assert p.gpu == "cpu" and p.model == "gr-small-scaled-l1-d32"
    assert (
        p.source.startswith("measured on CPU") and "torch" in p.source and "helm-plan" in p.source
    )
    assert p.t0_s > 0 and p.hbm_bw_Bps > 0 and p.h2d_bw_Bps > 0
    assert isinstance(res.samples, Samples) and len(res.samples.prefill_s) == 9
    # Timings grow with work: the biggest prefill point is slower than the smallest.
    assert res.samples.prefill_s.max() > res.samples.prefill_s.min()
    assert set(res.mape_heldout) == {"prefill", "score", "emb_hbm", "host_gather", "h2d"}


def test_cli_calibrate_writes_loadable_toml(tmp_path: Path) -> None:
    out = tmp_path / "lat.toml"
    r = CliRunner().invoke(
        app,
        [
            "calibrate",
            "--device",
            "cpu",
            "--quick",
            "--layers",
            "1",
            "--d-model",
            "32",
            "--threads",
            "1",
            "--gpu",
            "mybox",
            "--json",
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert set(info["heldout_mape"]) == {"prefill", "score", "emb_hbm", "host_gather", "h2d"}
    lat = load_latency(out)
    assert lat.gpu == "mybox" and lat.name == "mybox_gr-small-scaled-l1-d32"
    assert lat.prefill_a_s == info["coefficients"]["prefill_a_s"]
    # Measured bandwidths override the GPU datasheet when the model is built.
    m = build_latency_model(load_gpu("a100-80g"), load_model("gr-small"), lat)
    assert m.hbm_bw_Bps == lat.hbm_bw_Bps != load_gpu("a100-80g").hbm_bw_Bps
    assert m.service_time_s(10, 100, 8, 18, 2) > 0


def test_cli_calibrate_table(tmp_path: Path) -> None:
    out = tmp_path / "t.toml"
    r = CliRunner().invoke(
        app, ["calibrate", "--quick", "--layers", "1", "--d-model", "32", "-q", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert "held-out MAPE" in r.stdout and "prefill" in r.stdout and f"wrote {out}" in r.stdout
    assert out.exists()


def test_cli_cuda_unavailable_is_one_line_error(tmp_path: Path, monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "x.toml"
    r = CliRunner().invoke(app, ["calibrate", "--device", "cuda", "-o", str(out)])
    assert r.exit_code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --device cuda requested but CUDA")
    assert "--device cpu" in lines[0]
    assert not out.exists()
