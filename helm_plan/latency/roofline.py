"""Roofline latency profiles for GPUs we cannot measure: FLOPs and bytes over stated efficiencies.

The model is HSTU-like (Zhai et al., "Actions Speak Louder than Words", ICML
2024, arXiv 2402.17152, Eqs. 1-3). One layer per token computes

- ``U, V, Q, K = Split(SiLU(f1(X)))``: a d -> 4d projection, 4d² MACs;
- ``A = SiLU(Q Kᵀ) V`` (pointwise attention, no softmax): 2·d MACs per
  (query, key) pair, d for QKᵀ and d for AV;
- ``Y = f2(Norm(A) ⊙ U)``: a d -> d projection, d² MACs.

So, with 2 FLOPs per MAC:

- prefill ``a`` (per computed token) = layers·2·5·d² FLOPs at the dense MFU;
- prefill ``b`` (per computed token per context token) = layers·4·d FLOPs at
  the attention efficiency (the model charges n·L pairs, an upper bound on
  the causal n·L − n²/2);
- scoring: candidates go through the same stack as HSTU's target items,
  attending to the user's context but not to each other, so ``c`` = a and
  ``d`` = b (the final dot-product head, 2·d FLOPs per candidate, is
  negligible);
- ``t0`` = kernel launches (layers × kernels per layer × launch overhead)
  plus one read of the dense block weights (layers·5·d² bf16 values) from HBM,
  which bounds small, memory-bound requests;
- ``host_gather_s`` = one random DRAM access (~100 ns, the idle load-to-use
  latency of server DDR4/DDR5 as measured by Intel MLC) plus the row copied
  at single-thread memcpy speed (~10 GB/s).

Run ``python -m helm_plan.latency.roofline DIR`` to (re)write the shipped
``profiles/latency`` files; a test checks they equal this derivation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from helm_plan.config import require_positive, require_range
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
    """Efficiencies and overheads the roofline divides by; all stated in every derived file."""

    dense_mfu: float = 0.4
    """Fraction of peak FLOP/s reached by the projection GEMMs (typical large-GEMM MFU)."""
    attn_efficiency: float = 0.25
    """Fraction of peak FLOP/s reached by the pointwise attention (HSTU's fused Triton kernel is below GEMM MFU)."""
    kernels_per_layer: int = 6
    """Kernel launches per layer: UVQK GEMM, SiLU, fused attention, norm·gate, output GEMM, residual."""
    launch_s: float = 5.0e-6
    """Overhead of one kernel launch on the critical path, seconds (CUDA launch latency, typical)."""
    weight_dtype_bytes: int = 2
    """Bytes per dense weight (bf16), for the once-per-request weight read."""
    dram_latency_s: float = 1.0e-7
    """One random host DRAM access, seconds (Intel MLC idle latency, server DDR4/DDR5 ~80-120 ns)."""
    host_copy_bw_Bps: float = 10.0e9
    """Single-thread host memcpy bandwidth for a gathered row, bytes per second."""

    def __post_init__(self) -> None:
        require_range("dense_mfu", self.dense_mfu, 1e-6, 1.0)
        require_range("attn_efficiency", self.attn_efficiency, 1e-6, 1.0)
        require_positive("kernels_per_layer", self.kernels_per_layer)
        require_positive("launch_s", self.launch_s)
        require_positive("weight_dtype_bytes", self.weight_dtype_bytes)
        require_positive("dram_latency_s", self.dram_latency_s)
        require_positive("host_copy_bw_Bps", self.host_copy_bw_Bps)


def derivation(
    gpu: GpuProfile, model: ModelProfile, assume: RooflineAssumptions | None = None
) -> dict[str, Any]:
    """Every intermediate number of the roofline, as a flat dict (the ``[derivation]`` table)."""
    a = assume or RooflineAssumptions()
    d, layers = model.d_model, model.layers
    dense_flops = layers * 2 * 5 * d * d
    attn_flops = layers * 4 * d
    launches = layers * a.kernels_per_layer
    weight_bytes = layers * 5 * d * d * a.weight_dtype_bytes
    launch_time = launches * a.launch_s
    weight_time = weight_bytes / gpu.hbm_bw_Bps
    return {
        "method": "roofline: FLOPs / (peak_flops * efficiency); bytes / bandwidth",
        "reference": "HSTU, Zhai et al. ICML 2024 (arXiv 2402.17152), Eqs. 1-3",
        "prefill_a": "layers*2*5*d^2 FLOPs per computed token (UVQK 4d^2 + output d^2 MACs) / (peak_flops*dense_mfu)",
        "prefill_b": "layers*4*d FLOPs per (computed token, context token) (QK^T + AV) / (peak_flops*attn_efficiency)",
        "score_c": "same per-token stack as prefill_a: candidates are HSTU target items",
        "score_d": "same as prefill_b: each candidate attends to the L context tokens",
        "t0": "layers*kernels_per_layer*launch_s + layers*5*d^2*weight_dtype_bytes / hbm_bw_Bps",
        "host_gather": "dram_latency_s + row_bytes / host_copy_bw_Bps",
        "layers": layers,
        "d_model": d,
        "row_bytes": model.row_bytes,
        "dense_flops_per_token": dense_flops,
        "attn_flops_per_pair": attn_flops,
        "peak_flops": gpu.peak_flops,
        "dense_mfu": a.dense_mfu,
        "attn_efficiency": a.attn_efficiency,
        "kernel_launches": launches,
        "launch_s": a.launch_s,
        "launch_time_s": launch_time,
        "weight_bytes_read": weight_bytes,
        "hbm_bw_Bps": gpu.hbm_bw_Bps,
        "weight_read_time_s": weight_time,
        "dram_latency_s": a.dram_latency_s,
        "host_copy_bw_Bps": a.host_copy_bw_Bps,
        "h2d_bw_Bps": gpu.h2d_bw_Bps,
        "h2d_latency_s": gpu.h2d_latency_s,
        "bandwidths": "hbm_bw_Bps, h2d_bw_Bps and h2d_latency_s come from the GPU profile (datasheet)",
    }


def derive_profile(
    gpu: GpuProfile, model: ModelProfile, assume: RooflineAssumptions | None = None
) -> LatencyProfile:
    """A roofline latency profile for ``gpu`` running ``model``."""
    x = derivation(gpu, model, assume)
    a = assume or RooflineAssumptions()
    prefill_a = x["dense_flops_per_token"] / (gpu.peak_flops * a.dense_mfu)
    prefill_b = x["attn_flops_per_pair"] / (gpu.peak_flops * a.attn_efficiency)
    return LatencyProfile(
        name=default_latency_name(gpu.name, model.name),
        gpu=gpu.name,
        model=model.name,
        t0_s=x["launch_time_s"] + x["weight_read_time_s"],
        prefill_a_s=prefill_a,
        prefill_b_s=prefill_b,
        score_c_s=prefill_a,
        score_d_s=prefill_b,
        host_gather_s=a.dram_latency_s + model.row_bytes / a.host_copy_bw_Bps,
        source=SOURCE,
    )


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
