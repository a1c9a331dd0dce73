"""Shipped latency profiles equal the roofline derivation, and the derivation is right."""

from __future__ import annotations

import tomllib

import pytest

from helm_plan.latency.roofline import derive_profile, shipped_texts
from helm_plan.profiles import _data_root, available, load_gpu, load_latency, load_model

GPUS = ["a100-40g", "a100-80g", "h100-80g", "h200-141g"]
MODELS = ["gr-large", "gr-small"]


def test_all_pairs_shipped_and_equal_to_derivation() -> None:
    names = available("latency")
    assert names == sorted(f"{g}_{m}" for g in GPUS for m in MODELS)
    texts = shipped_texts()
    for g in GPUS:
        for m in MODELS:
            name = f"{g}_{m}"
            path = _data_root() / "latency" / f"{name}.toml"
            assert path.read_text() == texts[f"{name}.toml"], f"regenerate {name}"
            lat = load_latency(name)
            assert lat == derive_profile(load_gpu(g), load_model(m))
            data = tomllib.loads(path.read_text())
            assert "DERIVED" in data["source"] and "not measured" in data["source"]
            assert data["derivation"]["dense_mfu"] == 0.4
            assert data["derivation"]["peak_flops"] == load_gpu(g).peak_flops


def test_hand_computed_a100_80g_gr_small() -> None:
    lat = load_latency("a100-80g_gr-small")
    # gr-small: 4 layers, d=256; A100: 312 TFLOP/s, 2.039 TB/s.
    a = 4 * 2 * 5 * 256**2 / (312e12 * 0.4)  # 2,621,440 FLOPs / 124.8 TFLOP/s
    b = 4 * 4 * 256 / (312e12 * 0.25)  # 4,096 FLOPs / 78 TFLOP/s
    t0 = 4 * 6 * 5e-6 + 4 * 5 * 256**2 * 2 / 2.039e12  # 120 us launches + 1.29 us weights
    assert lat.prefill_a_s == pytest.approx(2.1005128e-8, rel=1e-7) == a
    assert lat.prefill_b_s == pytest.approx(b, rel=1e-12)
    assert lat.score_c_s == pytest.approx(a, rel=1e-12)
    assert lat.score_d_s == pytest.approx(b, rel=1e-12)
    assert lat.t0_s == pytest.approx(t0, rel=1e-12)
    assert lat.host_gather_s == pytest.approx(1e-7 + 4096 / 10e9, rel=1e-12)
    assert lat.hbm_bw_Bps is None  # bandwidths come from the GPU profile


@pytest.mark.parametrize("gpu", GPUS)
def test_large_model_costs_more_per_token(gpu: str) -> None:
    small, large = load_latency(f"{gpu}_gr-small"), load_latency(f"{gpu}_gr-large")
    # 24*1024^2 / (4*256^2) = 96x the dense FLOPs; 24*1024 / (4*256) = 24x the attention.
    assert large.prefill_a_s / small.prefill_a_s == pytest.approx(96.0)
    assert large.prefill_b_s / small.prefill_b_s == pytest.approx(24.0)
    assert large.t0_s > small.t0_s
    # Narrow rows (256 B) are cheaper to gather than wide ones (4 KiB).
    assert large.host_gather_s < small.host_gather_s


def test_faster_gpu_is_faster() -> None:
    a100, h100 = load_latency("a100-80g_gr-large"), load_latency("h100-80g_gr-large")
    assert h100.prefill_a_s == pytest.approx(a100.prefill_a_s * 312 / 989)
