"""The GPU kinds a plan compares: each with its latency model and price per GPU-hour."""

from __future__ import annotations

from dataclasses import dataclass

from helm_plan.errors import ConfigError
from helm_plan.latency.model import LatencyModel, build_latency_model, resolve_latency
from helm_plan.plan.config import DEFAULT_POLICIES, PlanConfig
from helm_plan.policies import POLICIES
from helm_plan.profiles import GpuProfile, LatencyProfile, ModelProfile, load_gpu


@dataclass(frozen=True)
class GpuSetup:
    """One GPU kind as the plan uses it."""

    gpu: GpuProfile
    """GPU profile."""
    latency: LatencyModel
    """Its service-time model for the plan's model."""
    latency_profile: LatencyProfile | None
    """The latency profile behind it (provenance)."""
    price_per_hour: float
    """USD per GPU-hour (profile, or the plan's override)."""


def default_policies() -> tuple[str, ...]:
    """DEFAULT_POLICIES that this build's catalogue knows."""
    return tuple(p for p in DEFAULT_POLICIES if p.partition(":")[0] in POLICIES)


def gpu_setups(cfg: PlanConfig, model: ModelProfile) -> list[GpuSetup]:
    """Each GPU of ``cfg`` with its latency model and price."""
    prices = cfg.price_overrides
    out = []
    for name in dict.fromkeys(cfg.gpus):
        g = load_gpu(name)
        prof = resolve_latency(g, model, cfg.latency)
        out.append(GpuSetup(g, build_latency_model(g, model, prof), prof,
                            prices.get(g.name, prices.get(name, g.cost_per_hour))))  # fmt: skip
    unknown = set(prices) - {s.gpu.name for s in out} - set(cfg.gpus)
    if unknown:
        raise ConfigError(f"--cost-per-hour names GPUs not planned: {', '.join(sorted(unknown))}",
                          hint="use the names given to --gpus")  # fmt: skip
    return out
