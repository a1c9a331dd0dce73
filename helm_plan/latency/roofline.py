"""Roofline latency profiles (v2) for GPUs we cannot measure: each coefficient from stated assumptions.

The model is HSTU-like (Zhai et al., "Actions Speak Louder than Words", ICML
2024, arXiv 2402.17152, Eqs. 1-3). Per layer and token it computes a d -> 4d
projection (U, V, Q, K; 4d² MACs) and a d -> d output projection (d² MACs),
and per (query, key) pair a pointwise SiLU attention (QKᵀ and AV, 2d MACs).
So, with 2 FLOPs per MAC (``ModelProfile.dense_flops_per_token`` and
``attn_flops_per_pair``):

- ``dense_s_per_token = layers·2·5·d² / (peak_flops·mfu_max)``;
- ``mfu_half_tokens``: the token count at which the UVQK GEMM's 128×128
  output tiles occupy half the SMs (one half-full wave), i.e. wave
  utilisation 1/2: ``sm_count·128·128 / (2·4d)`` (NVIDIA, Matrix
  Multiplication Background User's Guide, tile and wave quantization);
- ``attn_s_per_pair = layers·4·d / (peak_flops·attn_efficiency)``;
- ``weight_read_s = layers·5·d²·2 B / hbm_bw`` (bf16 weights streamed once per batch);
- ``t_launch_s = (layers·kernels_per_layer + kernels_fixed)·launch_s``;
- ``t_request_s``: an assumed host-side cost per request;
- ``host_gather_Bps = min(threads·per-thread bandwidth, the GPU's share of
  host DRAM bandwidth)``.

``sm_count``, ``host_dram_Bps`` and ``gpus_per_host`` come from the GPU profile
(with their ``host_source``), so a new GPU is one TOML file; a profile without
them refuses to load rather than borrowing another GPU's host.

Every assumption, number and source lands in the profile's ``[derivation]``
table. Run ``python -m helm_plan.latency.roofline DIR`` to (re)write the
shipped ``profiles/latency`` files; a test checks they equal this derivation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from helm_plan.config import require_int, require_positive, require_range
from helm_plan.io import write_text
from helm_plan.profiles import (
    GpuProfile,
    LatencyProfile,
    ModelProfile,
    available,
    default_latency_name,
    load_gpu,
    load_model,
    profile_to_dict,
)

SOURCE = "DERIVED (roofline estimate from the GPU and model profiles), not measured"


@dataclass(frozen=True)
class RooflineAssumptions:
    """Efficiencies and overheads the roofline uses; all stated in every derived file."""

    mfu_max: float = 0.6
    """Fraction of peak FLOP/s the dense GEMMs reach once the SMs are full."""
    attn_efficiency: float = 0.25
    """Fraction of peak FLOP/s reached by HSTU's pointwise attention (fused jagged kernel)."""
    kernels_per_layer: int = 6
    """Kernel launches per layer: UVQK GEMM, SiLU, fused attention, norm·gate, output GEMM, residual."""
    kernels_fixed: int = 4
    """Launches per forward outside the layers: feature concat, input projection, head, output copy."""
    launch_s: float = 5.0e-6
    """CPU-side cost of one kernel launch from an eager framework, seconds."""
    request_s: float = 10.0e-6
    """Host-side cost per request in a batch (ids into the batch buffer, offsets, result scatter), seconds."""
    weight_dtype_bytes: int = 2
    """Bytes per dense weight (bf16)."""
    tile_m: int = 128
    """GEMM output tile rows (tokens), cuBLAS's typical large tile."""
    tile_n: int = 128
    """GEMM output tile columns."""
    gather_threads: int = 8
    """Host threads gathering missed EMB rows for one GPU."""
    thread_gather_Bps: float = 8.0e9
    """Random multi-KiB row gather bandwidth of one host core, bytes per second."""
    dram_efficiency: float = 0.75
    """Share of peak host DRAM bandwidth a bandwidth-bound kernel reaches (STREAM-like)."""

    def __post_init__(self) -> None:
        require_range("mfu_max", self.mfu_max, 1e-6, 1.0)
        require_range("attn_efficiency", self.attn_efficiency, 1e-6, 1.0)
        require_range("dram_efficiency", self.dram_efficiency, 1e-6, 1.0)
        for k in ("kernels_per_layer", "launch_s", "weight_dtype_bytes", "tile_m", "tile_n",
                  "gather_threads", "thread_gather_Bps"):  # fmt: skip
            require_positive(k, getattr(self, k))
        require_int("kernels_fixed", self.kernels_fixed, 0)
        require_range("request_s", self.request_s, 0.0, 1.0)


SOURCES = {
    "mfu_max": "large bf16 GEMMs reach 60-80% of peak on A100/H100 (NVIDIA Matrix Multiplication "
    "Background User's Guide, 2023); the low end is taken because the elementwise SiLU/norm/gate "
    "work between them is not counted as FLOPs. Check: this roofline runs gr-prod's typical "
    "request (dense + attention FLOPs over its time) at ~28% of A100 peak, in line with the "
    "28.8% end-to-end inference MFU a production GR reports (OneRec Technical Report, "
    "arXiv 2506.13695)",
    "mfu_half_tokens": "wave quantization (NVIDIA Matrix Multiplication Background User's Guide, "
    "sec. 3.2): a GEMM whose output tiles fill k of the SMs runs at k/sm_count of its rate; "
    "h = tokens at which the UVQK GEMM ([X, 4d], 128x128 tiles) fills half the SMs",
    "attn_efficiency": "FlashAttention-2 reaches 50-73% of peak on A100 forward at head dim 64-128 "
    "(Dao, arXiv 2307.08691); HSTU's jagged pointwise kernel over variable-length rows and "
    "candidate-to-context pairs runs well below that: half of FA2's low end assumed",
    "launch_s": "CPU cost of launching one CUDA kernel from PyTorch eager, ~4-10 us per op; "
    "5 us assumed (CUDA graphs cut it to ~1 us: calibrate measures it)",
    "request_s": "assumed: per-request host work in the batcher (copy ids, build jagged offsets, "
    "scatter scores), order of one framework dispatch; calibrate measures it",
    "thread_gather_Bps": "one server core copies ~8-12 GB/s (single-thread STREAM copy, Intel MLC); "
    "rows of 0.25-4 KiB are long enough for the prefetchers",
    "gather_threads": "8 of the 16 host cores a GPU gets on an 8-GPU, 128-core node",
    "dram_efficiency": "STREAM reaches ~75% of peak DRAM bandwidth on server CPUs",
}
"""Why each assumption has its value (copied into every derived file)."""


def derivation(
    gpu: GpuProfile, model: ModelProfile, assume: RooflineAssumptions | None = None
) -> dict[str, Any]:
    """Every intermediate number of the roofline, with formulas and sources (``[derivation]``)."""
    a = assume or RooflineAssumptions()
    d, layers = model.d_model, model.layers
    dense_flops = model.dense_flops_per_token
    attn_flops = model.attn_flops_per_pair
    launches = layers * a.kernels_per_layer + a.kernels_fixed
    weight_bytes = layers * 5 * d * d * a.weight_dtype_bytes
    uvqk_tiles_per_row_block = max(1, (4 * d) // a.tile_n)
    half_wave_tokens = gpu.sm_count * a.tile_m / (2 * uvqk_tiles_per_row_block)
    dram_share = gpu.host_dram_Bps * a.dram_efficiency / gpu.gpus_per_host
    threads_bw = a.gather_threads * a.thread_gather_Bps
    return {
        "method": "roofline: FLOPs / (peak_flops * efficiency); bytes / bandwidth",
        "reference": "HSTU, Zhai et al. ICML 2024 (arXiv 2402.17152), Eqs. 1-3",
        "t_launch": "(layers*kernels_per_layer + kernels_fixed) * launch_s",
        "t_request": "request_s (assumed host-side cost per request)",
        "weight_read": "layers*5*d^2*weight_dtype_bytes / hbm_bw_Bps (bf16 weights read once per batch)",
        "dense_s_per_token": "layers*2*5*d^2 FLOPs (UVQK 4d^2 + output d^2 MACs) / (peak_flops*mfu_max)",
        "mfu_half_tokens": "sm_count*tile_m / (2*(4d/tile_n)): UVQK tiles fill half the SMs",
        "attn_s_per_pair": "layers*4*d FLOPs (QK^T + AV) / (peak_flops*attn_efficiency)",
        "host_gather": "min(gather_threads*thread_gather_Bps, host_dram_Bps*dram_efficiency/gpus_per_host)",
        "bandwidths": "hbm_bw_Bps, h2d_bw_Bps and h2d_latency_s come from the GPU profile (datasheet)",
        "layers": layers,
        "d_model": d,
        "dense_flops_per_token": dense_flops,
        "attn_flops_per_pair": attn_flops,
        "peak_flops": gpu.peak_flops,
        "mfu_max": a.mfu_max,
        "attn_efficiency": a.attn_efficiency,
        "kernels_per_layer": a.kernels_per_layer,
        "kernels_fixed": a.kernels_fixed,
        "kernel_launches": launches,
        "launch_s": a.launch_s,
        "request_s": a.request_s,
        "weight_bytes_read": weight_bytes,
        "hbm_bw_Bps": gpu.hbm_bw_Bps,
        "sm_count": gpu.sm_count,
        "tile_m": a.tile_m,
        "tile_n": a.tile_n,
        "uvqk_tiles_per_row_block": uvqk_tiles_per_row_block,
        "gather_threads": a.gather_threads,
        "thread_gather_Bps": a.thread_gather_Bps,
        "host_dram_Bps": gpu.host_dram_Bps,
        "dram_efficiency": a.dram_efficiency,
        "gpus_per_host": gpu.gpus_per_host,
        "host_dram_share_Bps": dram_share,
        "host_threads_Bps": threads_bw,
        "host_gather_bound": "threads" if threads_bw <= dram_share else "dram",
        "host": gpu.host_source,
        "h2d_bw_Bps": gpu.h2d_bw_Bps,
        "h2d_latency_s": gpu.h2d_latency_s,
        "half_wave_tokens": half_wave_tokens,
        "sources": dict(SOURCES),
    }


def derive_profile(
    gpu: GpuProfile, model: ModelProfile, assume: RooflineAssumptions | None = None
) -> LatencyProfile:
    """A roofline latency profile for ``gpu`` running ``model``."""
    a = assume or RooflineAssumptions()
    x = derivation(gpu, model, a)
    return LatencyProfile(
        name=default_latency_name(gpu.name, model.name),
        gpu=gpu.name,
        model=model.name,
        t_launch_s=x["kernel_launches"] * a.launch_s,
        t_request_s=a.request_s,
        weight_read_s=x["weight_bytes_read"] / gpu.hbm_bw_Bps,
        dense_s_per_token=x["dense_flops_per_token"] / (gpu.peak_flops * a.mfu_max),
        mfu_half_tokens=x["half_wave_tokens"],
        attn_s_per_pair=x["attn_flops_per_pair"] / (gpu.peak_flops * a.attn_efficiency),
        host_gather_Bps=min(x["host_threads_Bps"], x["host_dram_share_Bps"]),
        source=SOURCE,
    )


def typical_request(model: ModelProfile) -> dict[str, float]:
    """The request the default SLOs are scaled to: a cold user at half the history cap.

    Full prefill (no KV reuse) of ``L = max_seq_len/2`` tokens, the model's
    ``n_candidates``, every EMB lookup a hit in HBM. Arguments of
    ``LatencyModel.service_time_s`` by name.
    """
    L = model.max_seq_len // 2
    M = model.n_candidates
    return {
        "n_computed": L,
        "ctx_len": L,
        "n_cand": M,
        "lookup_bytes": L * model.token_lookup_bytes + M * model.candidate_lookup_bytes,
        "miss_bytes": 0.0,
    }


def profile_text(
    gpu: GpuProfile, model: ModelProfile, assume: RooflineAssumptions | None = None
) -> str:
    """The TOML text of a derived profile, with a comment header and a ``[derivation]`` table."""
    prof = derive_profile(gpu, model, assume)
    header = (
        f"# Latency profile {prof.name}: DERIVED by roofline, NOT measured.\n"
        "# Generated by `python -m helm_plan.latency.roofline profiles/latency`; do not edit by hand.\n"
        "# Measure your own with `helm-plan calibrate --device cuda -o latency.toml`.\n"
    )
    return header + tomli_w.dumps(profile_to_dict(prof, derivation(gpu, model, assume)))


def shipped_texts() -> dict[str, str]:
    """File name -> TOML text for every shipped GPU x model pair."""
    out = {}
    for g in available("gpu"):
        for m in available("model"):
            gpu, model = load_gpu(g), load_model(m)
            out[f"{default_latency_name(g, m)}.toml"] = profile_text(gpu, model)
    return out


def write_shipped(folder: str | Path) -> list[Path]:
    """Write the derived profiles for every shipped GPU x model pair into ``folder``."""
    return [write_text(Path(folder) / name, text) for name, text in shipped_texts().items()]


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    if len(sys.argv) != 2:
        sys.exit("usage: python -m helm_plan.latency.roofline DIR")
    write_shipped(sys.argv[1])
