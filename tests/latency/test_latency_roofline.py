"""Shipped latency profiles equal the roofline derivation, and the derivation is right by hand."""

from __future__ import annotations

import tomllib

import pytest

from helm_plan.errors import ProfileError
from helm_plan.latency.model import build_latency_model
from helm_plan.latency.roofline import (
    RooflineAssumptions,
    derivation,
    derive_profile,
    shipped_texts,
    typical_request,
)
from helm_plan.profiles import (
    GpuProfile,
    _data_root,
    available,
    load_gpu,
    load_latency,
    load_model,
)

GPUS = ["a100-40g", "a100-80g", "h100-80g", "h200-141g"]
MODELS = ["gr-large", "gr-prod", "gr-small"]


def test_all_pairs_shipped_and_equal_to_derivation() -> None:
    names = available("latency")
    assert names == sorted(f"{g}_{m}" for g in GPUS for m in MODELS)
    texts = shipped_texts()
    for g in GPUS:
        for m in MODELS:
            name = f"{g}_{m}"
            path = _data_root() / "latency" / f"{name}.toml"
            text = path.read_text()
            assert text == texts[f"{name}.toml"], f"regenerate {name}"
            assert "DERIVED by roofline, NOT measured" in text
            assert "python -m helm_plan.latency.roofline profiles/latency" in text
            lat = load_latency(name)
            assert lat == derive_profile(load_gpu(g), load_model(m))
            data = tomllib.loads(text)
            assert "DERIVED" in data["source"] and "not measured" in data["source"]
            der = data["derivation"]
            assert der["mfu_max"] == 0.6 and der["peak_flops"] == load_gpu(g).peak_flops
            # Every coefficient keeps its formula, every assumption its source.
            for k in ("t_launch", "t_request", "weight_read", "dense_s_per_token",
                      "mfu_half_tokens", "attn_s_per_pair", "host_gather"):  # fmt: skip
                assert isinstance(der[k], str) and der[k], k
            assert set(der["sources"]) >= {"mfu_max", "mfu_half_tokens", "attn_efficiency",
                                           "launch_s", "request_s", "thread_gather_Bps"}  # fmt: skip


def test_hand_computed_a100_80g_gr_small() -> None:
    lat = load_latency("a100-80g_gr-small")
    # gr-small: 4 layers, d=256; A100: 312 TFLOP/s, 2.039 TB/s, 108 SMs.
    assert lat.t_launch_s == pytest.approx((4 * 6 + 4) * 5e-6, rel=1e-12)  # 28 launches: 140 us
    assert lat.t_request_s == 10e-6
    assert lat.weight_read_s == pytest.approx(4 * 5 * 256**2 * 2 / 2.039e12, rel=1e-12)  # 1.29 us
    # 2,621,440 FLOPs per token at 0.6 * 312 TFLOP/s = 14.0 ns
    assert lat.dense_s_per_token == pytest.approx(2_621_440 / 187.2e12, rel=1e-12)
    assert lat.dense_s_per_token == pytest.approx(1.40034188e-8, rel=1e-8)
    # UVQK output is 4d = 1024 wide: 8 tiles per 128 tokens; half of 108 SMs at 864 tokens.
    assert lat.mfu_half_tokens == 864.0 == 108 * 128 / (2 * 8)
    assert lat.attn_s_per_pair == pytest.approx(4 * 4 * 256 / (312e12 * 0.25), rel=1e-12)
    # min(8 threads * 8 GB/s = 64 GB/s, 409.6 GB/s * 0.75 / 8 GPUs = 38.4 GB/s): DRAM-bound.
    assert lat.host_gather_Bps == pytest.approx(38.4e9, rel=1e-12)
    assert lat.hbm_bw_Bps is None  # bandwidths come from the GPU profile
    d = derivation(load_gpu("a100-80g"), load_model("gr-small"))
    assert d["host_gather_bound"] == "dram" and d["kernel_launches"] == 28


def test_hand_computed_h100_gr_prod() -> None:
    lat = load_latency("h100-80g_gr-prod")
    # gr-prod: 16 layers, d=512; H100: 989 TFLOP/s, 132 SMs, DGX H100 host DDR5.
    assert lat.dense_s_per_token == pytest.approx(16 * 10 * 512**2 / (989e12 * 0.6), rel=1e-12)
    assert lat.mfu_half_tokens == 132 * 128 / (2 * 16)  # 528 tokens
    assert lat.attn_s_per_pair == pytest.approx(16 * 4 * 512 / (989e12 * 0.25), rel=1e-12)
    assert lat.t_launch_s == pytest.approx((16 * 6 + 4) * 5e-6, rel=1e-12)
    assert lat.host_gather_Bps == pytest.approx(2 * 8 * 38.4e9 * 0.75 / 8, rel=1e-12)  # 57.6 GB/s


@pytest.mark.parametrize("gpu", GPUS)
def test_large_model_costs_more_per_token(gpu: str) -> None:
    small, large = load_latency(f"{gpu}_gr-small"), load_latency(f"{gpu}_gr-large")
    # 24*1024^2 / (4*256^2) = 96x the dense FLOPs; 24*1024 / (4*256) = 24x the attention.
    assert large.dense_s_per_token / small.dense_s_per_token == pytest.approx(96.0)
    assert large.attn_s_per_pair / small.attn_s_per_pair == pytest.approx(24.0)
    assert large.t_launch_s > small.t_launch_s and large.weight_read_s > small.weight_read_s
    # Wider GEMMs fill the SMs with fewer tokens.
    assert large.mfu_half_tokens == small.mfu_half_tokens / 4


def test_faster_gpu_is_faster() -> None:
    a100, h100 = load_latency("a100-80g_gr-large"), load_latency("h100-80g_gr-large")
    assert h100.dense_s_per_token == pytest.approx(a100.dense_s_per_token * 312 / 989)


def test_a_users_gpu_brings_its_host_facts_and_assumptions_apply() -> None:
    mine = GpuProfile(
        "my-gpu", 48 << 30, 1e12, 2e10, 5e-6, 200e12, 1.0, "mine", 96, 300e9, 4, "my host"
    )
    d = derivation(mine, load_model("gr-small"))
    assert (d["host"], d["sm_count"], d["host_dram_Bps"], d["gpus_per_host"]) == (
        "my host",
        96,
        300e9,
        4,
    )
    # 96 SMs * 128 rows / (2 * (4*256/128) tiles per row block)
    assert d["half_wave_tokens"] == 96 * 128 / (2 * 8)
    lat = derive_profile(mine, load_model("gr-small"), RooflineAssumptions(launch_s=1e-6))
    assert lat.t_launch_s == pytest.approx(28e-6, rel=1e-12)


@pytest.mark.parametrize("model", MODELS)
def test_default_slo_is_ten_typical_requests_on_an_a100(model: str) -> None:
    # Each model's SLO is ~10x the roofline time of its typical request (a cold user at half
    # the history cap) on an A100-80G, rounded: the SLO scales with the model's latency.
    m = load_model(model)
    gpu = load_gpu("a100-80g")
    lat = build_latency_model(gpu, m, load_latency(f"a100-80g_{model}"))
    typical_ms = float(lat.service_time_s(**typical_request(m))) * 1e3
    assert 8.0 <= m.default_slo_ms / typical_ms <= 12.0, (m.default_slo_ms, typical_ms)
    assert "typical request" in m.slo_source and "DeepRecSys" in m.slo_source


def test_gr_prod_tables() -> None:
    m = load_model("gr-prod")
    item = m.tables[0]
    assert (item.name, item.rows, item.key) == ("item", 100_000_000, "hash")
    side = {t.name: t for t in m.tables[1:]}
    assert set(side) == {"category", "seller", "action", "time_bucket"}
    assert 10**4 <= side["category"].rows <= 10**5 and side["seller"].rows == 10**6
    assert side["action"].rows <= 16 and side["time_bucket"].rows == 1024
    assert side["action"].per_candidate == 0 and side["time_bucket"].per_candidate == 0
    # 512 + 128 + 128 + 64 + 64 bytes per history token, 512 + 128 + 128 per candidate.
    assert (m.token_lookup_bytes, m.candidate_lookup_bytes) == (896, 768)
    assert m.max_seq_len == 8192 and m.kv_slide_chunk == 512 and m.layers == 16
    assert "HSTU" in m.source and "ICML 2024" in m.source


def test_a_gpu_profile_without_host_facts_refuses_to_load(tmp_path) -> None:
    # No GPU silently borrows an A100's host: the error names every missing key and the fix.
    src = (_data_root() / "gpu" / "a100-80g.toml").read_text()
    kept = [ln for ln in src.splitlines() if not ln.startswith(("sm_count", "gpus_per_host"))]
    p = tmp_path / "no-host.toml"
    p.write_text("\n".join(kept) + "\n")
    with pytest.raises(ProfileError, match="missing host keys 'sm_count', 'gpus_per_host'") as ei:
        load_gpu(p)
    assert "\n" not in ei.value.one_line() and "profiles/gpu/a100-80g.toml" in ei.value.hint


def test_host_facts_live_in_the_gpu_profiles() -> None:
    for g in available("gpu"):
        gpu = load_gpu(g)
        assert gpu.sm_count > 0 and gpu.host_dram_Bps > 0 and gpu.gpus_per_host > 0
        assert (
            gpu.host_source and derivation(gpu, load_model("gr-small"))["host"] == gpu.host_source
        )
