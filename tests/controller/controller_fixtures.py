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


def made_label_trace(seed: int, windows: int = 12):
    """A made-up label trace (no simulation: the fixture costs nothing): per window a P99
    valley over a 6-point grid around a drifting r*, one empty window."""
    import numpy as np

    from helm_plan.controller.dataset import ARRIVAL_KEYS, LabelTrace

    rng = np.random.default_rng(seed)
    g = np.linspace(0.0, 1.0, 6)
    r_star = np.clip(0.5 + 0.3 * np.sin(np.arange(windows) + seed), 0.05, 0.95)
    r_star[windows // 2] = np.nan
    p99 = 2.0 + 8.0 * (g[None, :] - np.nan_to_num(r_star, nan=0.5)[:, None]) ** 2
    s = np.linspace(0.0, 1.0, 101)
    return LabelTrace(
        name=f"made{seed}", window_s=5.0, slo_ms=4.0,
        arrival=rng.uniform(0.1, 2.0, (windows, len(ARRIVAL_KEYS))),
        grid_r=np.tile(g, (windows, 1)), grid_p99_ms=p99,
        grid_emb_hit=np.tile(g**0.5, (windows, 1)), grid_kv_reuse=np.tile(1.0 - g, (windows, 1)),
        r_star=r_star, p99_star_ms=np.where(np.isfinite(r_star), 2.0, np.nan),
        flat_lo=r_star - 0.1, flat_hi=r_star + 0.1, h2d_util_star=rng.uniform(0, 0.5, windows),
        ghost_emb=np.outer(rng.uniform(100, 900, windows), s**0.5),
        ghost_kv=np.outer(rng.uniform(50, 500, windows), 1.0 - s),
        ghost_lookup_bytes=np.full(windows, 1000.0), ghost_ctx_tokens=np.full(windows, 600.0),
        grid_slo_att=np.clip(1.2 - p99 / 8.0, 0.0, 1.0), busy_s=rng.uniform(1.0, 4.0, windows),
        gain=-np.abs(s[None, :] - np.nan_to_num(r_star, nan=0.5)[:, None]),
        sched_r=np.nan_to_num(r_star, nan=0.5),
        emb_s_per_byte=1e-4, kv_s_per_token=2e-4, slots=1, max_seq_len=2048,
    )  # fmt: skip
