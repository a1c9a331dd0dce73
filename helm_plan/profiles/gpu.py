"""GPU profiles: one accelerator's memory, bandwidths, compute and price."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from helm_plan.errors import ProfileError
from helm_plan.profiles.loading import _load

GiB = 1 << 30
"""Bytes in a GiB (the pool's messages quote HBM and pool sizes in it)."""
HOST_KEYS = ("sm_count", "host_dram_Bps", "gpus_per_host", "host_source")
"""GPU profile keys the roofline derivation needs beyond the datasheet (no GPU gets a default)."""
_HOST = {
    "group": "host",
    "hint": "add sm_count, host_dram_Bps, gpus_per_host and host_source as in "
    "profiles/gpu/a100-80g.toml (the SM count from the GPU whitepaper, the host's peak DRAM "
    "bandwidth and GPUs per host from its server's spec)",
}
DEFAULT_GPU = "a100-80g"
"""GPU profile every command uses when none is given."""


@dataclass(frozen=True)
class GpuProfile:
    """One accelerator: memory, bandwidths, compute and price."""

    name: str
    """Profile name."""
    hbm_bytes: int
    """Device memory capacity in bytes."""
    hbm_bw_Bps: float
    """Device memory bandwidth, bytes per second."""
    h2d_bw_Bps: float
    """Effective host-to-device copy bandwidth (PCIe), bytes per second."""
    h2d_latency_s: float
    """Fixed latency of one host-to-device copy, seconds."""
    peak_flops: float
    """Dense bf16 peak, FLOP per second."""
    cost_per_hour: float
    """On-demand price of one GPU, USD per hour."""
    source: str
    """Where the numbers come from."""
    # Host facts: only the roofline reads them; they sit here so a new GPU is one TOML file.
    sm_count: int = field(metadata=_HOST)
    """Streaming multiprocessors of the GPU (sets the roofline's mfu_half_tokens)."""
    host_dram_Bps: float = field(metadata=_HOST)
    """Peak DRAM bandwidth of the whole host the GPU sits in, bytes per second."""
    gpus_per_host: int = field(metadata=_HOST)
    """GPUs sharing that host DRAM."""
    host_source: str = field(metadata=_HOST)
    """Where sm_count, host_dram_Bps and gpus_per_host come from."""


def load_gpu(name_or_path: str | Path) -> GpuProfile:
    """Load a GPU profile by shipped name or path."""
    g = _load("gpu", GpuProfile, name_or_path)
    for k in ("hbm_bytes", "hbm_bw_Bps", "h2d_bw_Bps", "peak_flops", "sm_count", "host_dram_Bps",
              "gpus_per_host"):  # fmt: skip
        if not getattr(g, k) > 0:
            raise ProfileError(
                f"gpu profile {g.name}: {k} must be positive, got {getattr(g, k)}",
                hint=f"set {k} > 0 in the profile",
            )
    return g
