"""Small generated traces for the controller tests (fast: tens of windows of few requests)."""

from __future__ import annotations

import functools

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


@functools.cache
def small_ctx():
    """The burst trace as a node context (pool at 10% of the footprint), shared by the tests."""
    from helm_plan.sim import load_context

    return load_context(small_synth(), pool_fraction=0.1, seed=3)


@functools.cache
def small_label_trace():
    """The label trace of :func:`small_ctx` (coarse-grid carry oracle)."""
    from helm_plan.controller import dataset
    from helm_plan.oracle import OracleConfig

    return dataset.build(small_ctx(), NODE, OracleConfig(trials=0), "small-burst")


def write_small_trace(path):
    """Write the burst trace to ``path`` (a canonical parquet)."""
    from helm_plan import trace

    trace.write(small_synth(), path, {"source": "tests.controller", "seed": 3})
    return path


def recording_ghost(calls: list):
    """A stand-in for ``controller.features.Ghost`` that records its calls in ``calls``;
    ``observe`` answers ``"CURVES{window}"`` so a test can see the curves it forwarded."""

    class Ghost:
        def __init__(self, *a):
            calls.append(("ghost", *a))

        def observe(self, a, b, nc):
            calls.append(("observe", a, b, nc))
            return f"CURVES{a}"

        def reset(self):
            calls.append(("ghost.reset",))

    return Ghost
