"""Latency profiles: the coefficients of the batch service-time formula for a GPU/model pair."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helm_plan.profiles.loading import _load


@dataclass(frozen=True)
class LatencyProfile:
    """Coefficients of the batch service-time formula (spec v2 §5, ``helm_plan.latency.kernel``).

    ``T(B) = t_launch_s + n_req·t_request_s
    + max(weight_read_s, dense_s_per_token·(X + mfu_half_tokens) + attn_s_per_pair·P)
    + lookup_bytes/hbm_bw_Bps + [miss_bytes > 0]·h2d_latency_s
    + Σ miss_bytes_i/(h2d_bw_Bps·share_i) + miss_bytes/host_gather_Bps``, with ``X`` the
    tokens through the dense stack and ``P`` the attention (query, key) pairs of the batch.
    """

    name: str
    """Profile name."""
    gpu: str
    """GPU profile these coefficients were derived or measured for."""
    model: str
    """Model profile these coefficients were derived or measured for."""
    t_launch_s: float
    """Kernel launches of one forward pass, paid once per batch, seconds."""
    t_request_s: float
    """Host/runtime overhead per request in a batch (input assembly, result scatter), seconds."""
    weight_read_s: float
    """Streaming the dense weights from HBM once per batch (the memory-bound floor), seconds."""
    dense_s_per_token: float
    """Dense-stack time per token at full efficiency (FLOPs per token / (peak·mfu_max)), seconds."""
    mfu_half_tokens: float
    """Tokens at which the dense efficiency X/(X + h) is half its maximum, tokens."""
    attn_s_per_pair: float
    """Attention time per (query, key) pair over all layers, seconds."""
    host_gather_Bps: float
    """Host DRAM gather bandwidth of missed EMB rows into the staging buffer, bytes per second."""
    source: str
    """Derived (roofline) or measured (device, date, tool version)."""
    hbm_bw_Bps: float | None = None
    """Measured EMB gather bandwidth in device memory; None uses the GPU profile, bytes per second."""
    h2d_bw_Bps: float | None = None
    """Measured host-to-device copy bandwidth; None uses the GPU profile, bytes per second."""
    h2d_latency_s: float | None = None
    """Measured fixed latency of one H2D transfer; None uses the GPU profile, seconds."""


def load_latency(name_or_path: str | Path) -> LatencyProfile:
    """Load a latency profile by shipped name or path."""
    return _load("latency", LatencyProfile, name_or_path)


def default_latency_name(gpu: str, model: str) -> str:
    """Shipped latency profile name for a GPU/model pair."""
    return f"{gpu}_{model}"


def profile_to_dict(
    profile: LatencyProfile, derivation: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A latency profile as a TOML-ready dict (None fields dropped, optional [derivation] table)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(profile):
        v = getattr(profile, f.name)
        if v is not None:
            out[f.name] = v
    if derivation:
        out["derivation"] = derivation
    return out
