"""The service-time formula: a hand-worked example, each term, and profile resolution."""

from __future__ import annotations

import numpy as np
import pytest

from helm_plan.errors import ProfileError
from helm_plan.latency.model import (
    LatencyModel,
    build_latency_model,
    profile_mismatch,
    resolve_latency,
)
from helm_plan.profiles import GpuProfile, LatencyProfile, load_gpu, load_latency, load_model

M0 = LatencyModel(
    t0_s=100e-6,
    prefill_a_s=2e-8,
    prefill_b_s=5e-11,
    score_c_s=1e-8,
    score_d_s=2e-11,
    host_gather_s=5e-7,
    row_bytes=4096,
    hbm_bw_Bps=2e12,
    h2d_bw_Bps=25e9,
    h2d_latency_s=10e-6,
)


def test_hand_worked_example() -> None:
    # Request 1: n=100 computed of L=1000, M=50 candidates, 150 lookups, 20 misses,
    # the H2D link shared 50/50 with a background refill.
    #   fixed   = 100 us
    #   emb_hbm = 150 * 4096 B / 2e12 B/s                      = 0.3072 us
    #   h2d     = 10 us + 20 * (0.5 us + 4096 / (25e9 * 0.5))
    #           = 10 + 20 * (0.5 + 0.32768)                    = 26.5536 us
    #   prefill = 2e-8 * 100 + 5e-11 * 100 * 1000 = 2 + 5       = 7 us
    #   score   = 1e-8 * 50 + 2e-11 * 50 * 1000 = 0.5 + 1       = 1.5 us
    #   total   = 100 + 0.3072 + 26.5536 + 7 + 1.5              = 135.3608 us
    # Request 2: KV hit (n=0), L=1000, M=50, 50 lookups, no miss, full link:
    #   100 + 50 * 4096 / 2e12 (0.1024 us) + 0 + 0 + 1.5        = 101.6024 us
    args = ([100, 0], [1000, 1000], [50, 50], [150, 50], [20, 0], [0.5, 1.0])
    t = M0.terms_s(*args)
    us = {k: v * 1e6 for k, v in t.items()}
    np.testing.assert_allclose(us["fixed"], [100.0, 100.0], rtol=1e-12)
    np.testing.assert_allclose(us["emb_hbm"], [0.3072, 0.1024], rtol=1e-12)
    np.testing.assert_allclose(us["h2d"], [26.5536, 0.0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(us["prefill"], [7.0, 0.0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(us["score"], [1.5, 1.5], rtol=1e-12)
    s = M0.service_time_s(*args)
    assert s.dtype == np.float64
    np.testing.assert_allclose(s * 1e6, [135.3608, 101.6024], rtol=1e-12)
    assert set(t) == {"fixed", "emb_hbm", "h2d", "prefill", "score"}


def test_terms_vectorised_and_scalar_share() -> None:
    rng = np.random.default_rng(1)
    n = rng.integers(0, 500, 1000)
    L = n + rng.integers(0, 500, 1000)
    M = rng.integers(0, 300, 1000)
    miss = rng.integers(0, 50, 1000) * (rng.random(1000) < 0.5)
    s = M0.service_time_s(n, L, M, n + M, miss)
    # Independent loop over the same requests.
    for i in range(0, 1000, 97):
        want = (
            M0.t0_s
            + (n[i] + M[i]) * 4096 / 2e12
            + (10e-6 if miss[i] > 0 else 0.0)
            + miss[i] * (5e-7 + 4096 / 25e9)
            + 2e-8 * n[i]
            + 5e-11 * n[i] * L[i]
            + 1e-8 * M[i]
            + 2e-11 * M[i] * L[i]
        )
        assert s[i] == pytest.approx(want, rel=1e-12)
    assert M0.service_time_s(10, 20, 5, 15, 0).shape == ()


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_bad_h2d_share(share: float) -> None:
    with pytest.raises(ProfileError, match="h2d_share"):
        M0.service_time_s([1], [1], [1], [2], [1], share)


def test_negative_coefficient_rejected() -> None:
    with pytest.raises(ProfileError, match="t0_s"):
        LatencyModel(-1.0, 0, 0, 0, 0, 0, 4096, 1e12, 1e10, 1e-5)


def _lat(**kw: float | None) -> LatencyProfile:
    return LatencyProfile(
        name="x",
        gpu="a100-80g",
        model="gr-small",
        t0_s=1e-4,
        prefill_a_s=1e-8,
        prefill_b_s=1e-11,
        score_c_s=1e-8,
        score_d_s=1e-11,
        host_gather_s=3e-7,
        source="test",
        **kw,
    )


def test_build_uses_gpu_unless_measured_override() -> None:
    gpu, model = load_gpu("a100-80g"), load_model("gr-small")
    m = build_latency_model(gpu, model, _lat())
    assert (m.hbm_bw_Bps, m.h2d_bw_Bps, m.h2d_latency_s) == (2.039e12, 25.0e9, 10.0e-6)
    assert m.row_bytes == 8 * 128 * 4
    m2 = build_latency_model(gpu, model, _lat(hbm_bw_Bps=1e12, h2d_bw_Bps=2e10, h2d_latency_s=3e-6))
    assert (m2.hbm_bw_Bps, m2.h2d_bw_Bps, m2.h2d_latency_s) == (1e12, 2e10, 3e-6)
    assert m2.t0_s == 1e-4 and m2.host_gather_s == 3e-7


def test_resolve_latency_shipped_path_and_roofline(tmp_path) -> None:
    gpu, model = load_gpu("h100-80g"), load_model("gr-large")
    assert resolve_latency(gpu, model, None) == load_latency("h100-80g_gr-large")
    assert resolve_latency(gpu, model, "a100-80g_gr-small").name == "a100-80g_gr-small"
    # A user's own GPU has no shipped profile: derived on the fly by the roofline.
    mine = GpuProfile("my-gpu", 48 << 30, 1e12, 2e10, 5e-6, 200e12, 1.0, "mine")
    lat = resolve_latency(mine, model, None)
    assert lat.gpu == "my-gpu" and "DERIVED" in lat.source
    # 24 layers * 10 * 1024^2 FLOPs / (200e12 * 0.4)
    assert lat.prefill_a_s == pytest.approx(24 * 10 * 1024**2 / (200e12 * 0.4), rel=1e-12)
    with pytest.raises(ProfileError, match="unknown latency profile"):
        resolve_latency(gpu, model, "nope")
    assert profile_mismatch(gpu, model, load_latency("a100-80g_gr-small")) is not None
    assert profile_mismatch(gpu, model, load_latency("h100-80g_gr-large")) is None
