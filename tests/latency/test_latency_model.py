"""The batch formula: hand-worked batches, the max() switch, causal pairs, numpy == numba, profiles."""

from __future__ import annotations

import numpy as np
import pytest

from helm_plan.errors import ConfigError, ProfileError
from helm_plan.latency import kernel
from helm_plan.latency.model import (
    TERMS,
    LatencyModel,
    attention_pairs,
    batch_sums,
    build_latency_model,
    profile_mismatch,
    resolve_latency,
)
from helm_plan.profiles import GpuProfile, LatencyProfile, load_gpu, load_latency, load_model

M0 = LatencyModel(
    t_launch_s=100e-6,
    t_request_s=10e-6,
    weight_read_s=50e-6,
    dense_s_per_token=1e-8,
    mfu_half_tokens=200.0,
    attn_s_per_pair=1e-11,
    hbm_bw_Bps=1e12,
    h2d_bw_Bps=25e9,
    h2d_latency_s=10e-6,
    host_gather_Bps=50e9,
)
# Request A: n=100 of L=1000 computed, M=50, 150 lookups of 4 KiB, 20 of them missed.
A = {"n": 100, "L": 1000, "M": 50, "look": 150 * 4096, "miss": 20 * 4096}
# Request B: full prefill of L=2000, M=500, 2.5 MB looked up, no miss.
B = {"n": 2000, "L": 2000, "M": 500, "look": 2_500_000, "miss": 0}


def _us(x: np.ndarray) -> np.ndarray:
    return np.asarray(x) * 1e6


def test_one_request_weight_bound_by_hand() -> None:
    # X = 150; P = 100*1000 - 100*99/2 + 50*1000 = 145,050 pairs.
    # dense 1e-8*(150+200) = 3.5 us, attention 1.4505 us: 4.9505 us < weight read 50 us.
    # launch 100 + request 10 + compute 50 + emb 614,400 B / 1e12 = 0.6144
    # + h2d: latency 10 + 81,920 B / 25e9 = 3.2768 + host 81,920 / 50e9 = 1.6384 -> 175.5296 us
    a = A
    t = M0.terms_s(a["n"], a["L"], a["M"], a["look"], a["miss"])
    assert set(t) == set(TERMS)
    want = {"launch": 100.0, "request": 10.0, "compute": 50.0, "emb_hbm": 0.6144,
            "h2d": 13.2768, "host_gather": 1.6384}  # fmt: skip
    for k, v in want.items():
        assert _us(t[k]) == pytest.approx(v, rel=1e-12), k
    s = M0.service_time_s(a["n"], a["L"], a["M"], a["look"], a["miss"])
    assert s.dtype == np.float64 and s.shape == ()
    assert _us(s) == pytest.approx(175.5296, rel=1e-12)


def test_one_request_compute_bound_by_hand() -> None:
    # Full prefill: P = 2000*2001/2 + 500*2000 = 3,001,000; X = 2500.
    # dense 1e-8*2700 = 27 us + attention 30.01 us = 57.01 us > 50 us.
    # 100 + 10 + 57.01 + 2.5 (2.5 MB / 1e12) = 169.51 us, no miss terms.
    b = B
    assert attention_pairs(b["n"], b["L"], b["M"]) == 3_001_000
    s = M0.service_time_s(b["n"], b["L"], b["M"], b["look"], b["miss"])
    assert _us(s) == pytest.approx(169.51, rel=1e-12)


def test_two_requests_with_and_without_misses_by_hand() -> None:
    # Batch {A (link share 0.5), B}: n_req 2, X 2650, P 3,146,050.
    # compute = 1e-8*2850 + 1e-11*3,146,050 = 28.5 + 31.4605 = 59.9605 us (> 50)
    # emb = 3,114,400 B / 1e12 = 3.1144 us; one H2D latency 10 us;
    # link 81,920 / (25e9*0.5) = 6.5536 us; host 81,920 / 50e9 = 1.6384 us
    # T = 100 + 2*10 + 59.9605 + 3.1144 + 10 + 6.5536 + 1.6384 = 201.2669 us
    n, L, M = [A["n"], B["n"]], [A["L"], B["L"]], [A["M"], B["M"]]
    look, miss = [A["look"], B["look"]], [A["miss"], B["miss"]]
    sums, inv = batch_sums(*map(np.asarray, (n, L, M, look, miss, [0.5, 1.0], [7, 7])))
    assert [float(x[0]) for x in sums] == [2, 2650, 3_146_050, 3_114_400, 81_920, 163_840]
    assert list(inv) == [0, 0]
    assert _us(M0.batch_time_s(*sums)[0]) == pytest.approx(201.2669, rel=1e-12)
    # Without the miss: no latency, link or host terms: 100 + 20 + 59.9605 + 3.1144.
    sums0, _ = batch_sums(*map(np.asarray, (n, L, M, look, [0, 0], [1.0, 1.0], [0, 0])))
    assert _us(M0.batch_time_s(*sums0)[0]) == pytest.approx(183.0749, rel=1e-12)
    # Batched, the two cost 201.27 us together against 175.53 + 169.51 = 345.04 us apart.
    apart = M0.service_time_s(n, L, M, look, miss, [0.5, 1.0]).sum()
    assert _us(apart) == pytest.approx(175.5296 + 3.2768 + 169.51, rel=1e-12)


def test_max_switches_from_weight_read_to_compute() -> None:
    # One history token over a one-token context plus M candidates: X = 1 + M, P = 1 + M.
    # compute = 1e-8*(1 + M + 200) + 1e-11*(1 + M) crosses 50 us near M = 4794.
    t = M0.terms_s(1, 1, [100, 4000, 4794, 4795, 6000], 0, 0)["compute"]
    np.testing.assert_allclose(_us(t[:3]), 50.0, rtol=1e-12)
    assert _us(t[3]) == pytest.approx(1e-2 * 4996 + 1e-5 * 4796, rel=1e-12)  # 50.00796 us
    assert _us(t[4]) == pytest.approx(62.07001, rel=1e-12)


@pytest.mark.parametrize("L", [1, 2, 7, 100, 2048])
def test_causal_pairs(L: int) -> None:
    assert attention_pairs(L, L, 0) == L * (L + 1) / 2  # full prefill
    for n in {1, L // 2, L}:
        if n:
            # Token j of the n new ones (0-based) sees L - n + j + 1 keys.
            assert attention_pairs(n, L, 0) == sum(L - n + j + 1 for j in range(n))
    assert attention_pairs(0, L, 5) == 5 * L  # candidates see the whole context
    assert kernel.attention_pairs(3.0, float(L + 3), 2.0) == attention_pairs(3, L + 3, 2)


def test_share_slows_only_the_link() -> None:
    a = A
    full = M0.terms_s(a["n"], a["L"], a["M"], a["look"], a["miss"], 1.0)
    quarter = M0.terms_s(a["n"], a["L"], a["M"], a["look"], a["miss"], 0.25)
    # Link: 3.2768 us at the full link, 4x at a quarter; latency and host gather unchanged.
    assert _us(quarter["h2d"] - full["h2d"]) == pytest.approx(3 * 3.2768, rel=1e-12)
    assert quarter["host_gather"] == full["host_gather"]


def _random_batches(seed: int, k: int = 400) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    n_req = rng.integers(1, 64, k).astype(float)
    tokens = rng.integers(1, 200_000, k).astype(float)
    pairs = rng.integers(0, 10**9, k).astype(float)
    look = rng.integers(0, 10**8, k).astype(float)
    miss = np.where(rng.random(k) < 0.3, 0.0, rng.integers(1, 10**7, k).astype(float))
    mos = miss / rng.uniform(0.1, 1.0, k)
    return n_req, tokens, pairs, look, miss, mos


@pytest.mark.parametrize("seed", [0, 1])
def test_numpy_equals_numba_kernel(seed: int) -> None:
    from helm_plan.profiles import load_gpu, load_model

    for model in (M0, build_latency_model(load_gpu("h100-80g"), load_model("gr-prod"),
                                          load_latency("h100-80g_gr-prod"))):  # fmt: skip
        args = _random_batches(seed)
        np_t = model.batch_time_s(*args)
        nb_t = np.array(
            [kernel.batch_time_s(model.coeffs, *row) for row in zip(*args, strict=True)]
        )
        # the model's T(B) is the kernel's, so they agree bit for bit
        np.testing.assert_array_equal(np_t, nb_t)
        assert isinstance(model.batch_time_s(*(a[0] for a in args)), np.float64)
        np.testing.assert_array_equal(model.batch_time_s(*(a.reshape(5, -1) for a in args)),
                                      np_t.reshape(5, -1))  # fmt: skip
        bt = model.batch_terms_s(*args)
        np.testing.assert_allclose(sum(bt[k] for k in TERMS), np_t, rtol=1e-12)


def test_coeffs_follow_kernel_order() -> None:
    c = M0.coeffs
    assert c.dtype == np.float64 and c.shape == (len(kernel.COEFFS),)
    assert list(c) == [getattr(M0, k) for k in kernel.COEFFS]
    c[0] = 123.0  # a copy: the model is not changed through it
    assert M0.t_launch_s == 100e-6


def test_terms_sum_and_batch_attribution() -> None:
    rng = np.random.default_rng(3)
    k = 300
    L = rng.integers(1, 3000, k)
    n = np.minimum(L, rng.integers(1, 3000, k))
    M = rng.integers(0, 600, k)
    look = (n + M) * 896.0
    miss = np.where(rng.random(k) < 0.5, 0.0, look * rng.random(k))
    share = rng.uniform(0.2, 1.0, k)
    alone = M0.terms_s(n, L, M, look, miss, share)
    np.testing.assert_allclose(sum(alone.values()), M0.service_time_s(n, L, M, look, miss, share),
                               rtol=1e-12)  # fmt: skip
    labels = rng.integers(0, 40, k)
    t = M0.terms_s(n, L, M, look, miss, share, batch=labels)
    per_req = sum(t.values())
    sums, inv = batch_sums(n, L, M, look, miss, share, labels)
    T = M0.batch_time_s(*sums)
    # Every batch's attributed terms add up to its time.
    np.testing.assert_allclose(np.bincount(inv, weights=per_req), T, rtol=1e-12)
    # Shared terms split evenly; per-request terms stay with their request.
    size = np.bincount(inv)[inv]
    np.testing.assert_allclose(t["launch"], M0.t_launch_s / size, rtol=1e-12)
    np.testing.assert_allclose(t["emb_hbm"], alone["emb_hbm"], rtol=1e-12)
    np.testing.assert_allclose(t["host_gather"], alone["host_gather"], rtol=1e-12)


def test_input_errors() -> None:
    with pytest.raises(ProfileError, match="h2d_share"):
        M0.service_time_s([1], [1], [1], [2], [1], 0.0)
    with pytest.raises(ConfigError, match="exceed its context"):
        M0.service_time_s([5], [4], [0], [0], [0])
    with pytest.raises(ConfigError, match="miss_bytes"):
        M0.service_time_s([1], [4], [0], [0], [-1])
    with pytest.raises(ConfigError, match="labels"):
        M0.terms_s([1, 1], [4, 4], [0, 0], [0, 0], [0, 0], batch=[0])


def test_bad_coefficients_rejected() -> None:
    import dataclasses

    with pytest.raises(ProfileError, match="t_launch_s"):
        dataclasses.replace(M0, t_launch_s=-1.0)
    with pytest.raises(ProfileError, match="host_gather_Bps must be positive"):
        dataclasses.replace(M0, host_gather_Bps=0.0)
    with pytest.raises(ProfileError, match="dense_s_per_token"):
        dataclasses.replace(M0, dense_s_per_token=float("inf"))


def _lat(**kw: float | None) -> LatencyProfile:
    return LatencyProfile(
        name="x", gpu="a100-80g", model="gr-small", t_launch_s=1e-4, t_request_s=1e-5,
        weight_read_s=2e-6, dense_s_per_token=1e-8, mfu_half_tokens=300.0,
        attn_s_per_pair=1e-11, host_gather_Bps=4e10, source="test", **kw,
    )  # fmt: skip


def test_build_uses_gpu_unless_measured_override() -> None:
    gpu, model = load_gpu("a100-80g"), load_model("gr-small")
    m = build_latency_model(gpu, model, _lat())
    assert (m.hbm_bw_Bps, m.h2d_bw_Bps, m.h2d_latency_s) == (2.039e12, 25.0e9, 10.0e-6)
    assert (m.t_launch_s, m.mfu_half_tokens, m.host_gather_Bps) == (1e-4, 300.0, 4e10)
    m2 = build_latency_model(gpu, model, _lat(hbm_bw_Bps=1e12, h2d_bw_Bps=2e10, h2d_latency_s=3e-6))
    assert (m2.hbm_bw_Bps, m2.h2d_bw_Bps, m2.h2d_latency_s) == (1e12, 2e10, 3e-6)


def test_resolve_latency_shipped_path_and_roofline() -> None:
    gpu, model = load_gpu("h100-80g"), load_model("gr-large")
    assert resolve_latency(gpu, model, None) == load_latency("h100-80g_gr-large")
    assert resolve_latency(gpu, model, "a100-80g_gr-small").name == "a100-80g_gr-small"
    # A user's own GPU has no shipped profile: derived on the fly by the roofline.
    mine = GpuProfile(
        "my-gpu", 48 << 30, 1e12, 2e10, 5e-6, 200e12, 1.0, "mine", 108, 409.6e9, 8, "mine"
    )
    lat = resolve_latency(mine, model, None)
    assert lat.gpu == "my-gpu" and "DERIVED" in lat.source
    # 24 layers * 10 * 1024^2 FLOPs / (200e12 * 0.6)
    assert lat.dense_s_per_token == pytest.approx(24 * 10 * 1024**2 / (200e12 * 0.6), rel=1e-12)
    with pytest.raises(ProfileError, match="unknown latency profile"):
        resolve_latency(gpu, model, "nope")
    assert profile_mismatch(gpu, model, load_latency("a100-80g_gr-small")) is not None
    assert profile_mismatch(gpu, model, load_latency("h100-80g_gr-large")) is None


def test_v1_profile_is_a_clear_error(tmp_path) -> None:
    old = tmp_path / "old.toml"
    old.write_text('name = "old"\ngpu = "a100-80g"\nmodel = "gr-small"\nt0_s = 1e-4\n'
                   'prefill_a_s = 2e-8\nprefill_b_s = 5e-11\nscore_c_s = 2e-8\n'
                   'score_d_s = 5e-11\nhost_gather_s = 5e-7\nsource = "v1"\n')  # fmt: skip
    with pytest.raises(ProfileError, match="v1 per-request profile") as e:
        resolve_latency(load_gpu("a100-80g"), load_model("gr-small"), str(old))
    assert "t0_s" in str(e.value) and "helm-plan calibrate" in e.value.hint
    # Other broken files keep their own message.
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "b"\ngpu = "g"\nmodel = "m"\nsource = "s"\n')
    with pytest.raises(ProfileError, match="missing key 't_launch_s'"):
        resolve_latency(load_gpu("a100-80g"), load_model("gr-small"), str(bad))
