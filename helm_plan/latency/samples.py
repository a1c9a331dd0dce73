"""The timings of one calibration run, the grid that produces them, and synthetic timings for tests.

Nothing here imports torch: ``calibrate`` fills :class:`Samples` from torch
microbenchmarks, :func:`synthetic_samples` fills it from known coefficients
(so the fit in :mod:`helm_plan.latency.fit` is tested without a device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

StackPoint = tuple[int, int, int, int]
"""One stack benchmark point: (requests B, computed tokens n, context L, candidates M) per request."""


@dataclass(frozen=True)
class Samples:
    """Raw microbenchmark timings (fastest repeat per grid point, seconds)."""

    tiny_batch: np.ndarray
    """Requests per batch of the tiny-width stack (launch and per-request overhead)."""
    tiny_s: np.ndarray
    """Tiny-stack time per batch, seconds."""
    weight_sets: np.ndarray
    """Distinct copies of the dense weights read by one-token GEMVs per point."""
    weight_s: np.ndarray
    """GEMV-chain time per point, seconds."""
    stack_batch: np.ndarray
    """Requests B per stack point."""
    stack_tokens: np.ndarray
    """Tokens X = B·(n + M) through the dense stack per point."""
    stack_pairs: np.ndarray
    """(query, key) pairs the benchmark's attention computes: B·(n + M)·L."""
    stack_s: np.ndarray
    """Stack time per point, seconds."""
    gather_bytes: np.ndarray
    """Bytes gathered from the device table per point."""
    gather_s: np.ndarray
    """Device gather time per point, seconds."""
    host_bytes: np.ndarray
    """Bytes gathered from the host table per point."""
    host_s: np.ndarray
    """Host gather time per point, seconds."""
    h2d_bytes: np.ndarray
    """Bytes copied host-to-device per point."""
    h2d_s: np.ndarray
    """Copy time per point, seconds."""


def stack_points(
    token_grid: tuple[int, ...],
    n_grid: tuple[int, ...],
    ctx_grid: tuple[int, ...],
    cand_grid: tuple[int, ...],
    batch_grid: tuple[int, ...],
) -> list[StackPoint]:
    """The stack benchmark's points (B, n, L, M), in a fixed order.

    - dense: one request of one history token and ``X − 1`` candidates over a
      one-token context (almost no attention), ``X`` in ``token_grid``;
    - prefill: ``n`` of ``L`` context tokens computed, no candidates (``n <= L``);
    - scoring: one computed token and ``M`` candidates over ``L`` context tokens;
    - batches: ``B`` identical mid-grid requests, ``B`` in ``batch_grid``.
    """
    pts: list[StackPoint] = [(1, 1, 1, x - 1) for x in token_grid if x >= 2]
    pts += [(1, n, L, 0) for L in ctx_grid for n in n_grid if n <= L]
    pts += [(1, 1, L, m) for L in ctx_grid for m in cand_grid]
    L_mid = sorted(ctx_grid)[len(ctx_grid) // 2]
    n_mid = max([n for n in n_grid if n <= L_mid] or [1])
    m_mid = sorted(cand_grid)[len(cand_grid) // 2]
    pts += [(b, n_mid, L_mid, m_mid) for b in batch_grid if b > 1]
    return list(dict.fromkeys(pts))  # drop duplicates, keep order


def point_sums(points: list[StackPoint]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, X, computed pairs) per point: ``X = B(n + M)``, pairs ``= B(n + M)L``.

    The benchmark's masked attention computes the full ``(n + M) × L``
    rectangle per request, so that is the pair count its time follows; a
    production kernel that skips masked tiles computes the causal count
    the model charges.
    """
    a = np.asarray(points, np.float64).reshape(-1, 4)
    B, n, L, M = a.T
    return B, B * (n + M), B * (n + M) * L


def synthetic_samples(
    coeffs: dict[str, float],
    cfg: Any,
    *,
    row_bytes: int,
    intercepts: dict[str, float] | None = None,
    noise: float = 0.01,
    seed: int = 0,
) -> Samples:
    """Timings generated from known coefficients with multiplicative noise (tests the fit).

    ``coeffs`` holds the profile coefficients (``t_launch_s`` ... ``h2d_latency_s``);
    ``cfg`` is a ``CalibrateConfig`` (its grids); ``row_bytes`` sizes the lookups;
    ``intercepts`` gives ``t_weight_call_s``, ``t_gather_call_s`` and
    ``t_host_call_s`` (default 0).
    """
    ic = {"t_weight_call_s": 0.0, "t_gather_call_s": 0.0, "t_host_call_s": 0.0,
          **(intercepts or {})}  # fmt: skip
    rng = np.random.default_rng(seed)
    c = coeffs

    def noisy(x: np.ndarray) -> np.ndarray:
        return x * (1.0 + noise * rng.standard_normal(len(x)))

    k = np.asarray(cfg.tiny_batch_grid, np.float64)
    w = np.asarray(cfg.weight_sets_grid, np.float64)
    pts = stack_points(cfg.token_grid, cfg.n_grid, cfg.ctx_grid, cfg.cand_grid, cfg.batch_grid)
    B, X, P = point_sums(pts)
    work = c["dense_s_per_token"] * (X + c["mfu_half_tokens"]) + c["attn_s_per_pair"] * P
    stack = c["t_launch_s"] + B * c["t_request_s"] + np.maximum(work, c["weight_read_s"])
    nb = np.asarray(cfg.lookup_grid, np.float64) * row_bytes
    return Samples(
        tiny_batch=k,
        tiny_s=noisy(c["t_launch_s"] + k * c["t_request_s"]),
        weight_sets=w,
        weight_s=noisy(ic["t_weight_call_s"] + w * c["weight_read_s"]),
        stack_batch=B,
        stack_tokens=X,
        stack_pairs=P,
        stack_s=noisy(stack),
        gather_bytes=nb,
        gather_s=noisy(ic["t_gather_call_s"] + nb / c["hbm_bw_Bps"]),
        host_bytes=nb,
        host_s=noisy(ic["t_host_call_s"] + nb / c["host_gather_Bps"]),
        h2d_bytes=nb,
        h2d_s=noisy(c["h2d_latency_s"] + nb / c["h2d_bw_Bps"]),
    )
