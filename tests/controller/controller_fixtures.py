"""Small generated traces for the controller tests (fast: tens of windows of few requests)."""

from __future__ import annotations

from helm_plan.sim import NodeConfig
from helm_plan.synth import SynthConfig, synthesize

NODE = NodeConfig(window_s=5.0)
"""Node config of the controller tests."""


def small_synth(regime: str = "burst", seed: int = 3, duration_s: float = 60.0):
    """A small synthetic trace: 30 QPS, 16 candidates, 5000 items."""
    return synthesize(
        SynthConfig(
            regime=regime, qps=30.0, duration_s=duration_s, items=5000, candidates=16,
            returning_history_mean=200.0, seed=seed,
        )
    )  # fmt: skip
