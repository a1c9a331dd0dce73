"""A trace prepared for node simulation: dense arrays, profiles, latency model and pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from helm_plan.arrays import TraceArrays, from_table, window_edges
from helm_plan.cache.footprint import footprint
from helm_plan.latency.model import LatencyModel, build_latency_model, resolve_latency
from helm_plan.profiles import GpuProfile, ModelProfile, load_gpu, load_model, resolve_pool


@dataclass(frozen=True, eq=False)
class NodeContext:
    """A trace prepared for node simulation: dense arrays, profiles, latency model, pool."""

    arrays: TraceArrays
    """Dense trace arrays."""
    gpu: GpuProfile
    """GPU profile."""
    model: ModelProfile
    """Model profile."""
    latency: LatencyModel
    """Resolved service-time model."""
    pool_bytes: int
    """HBM cache pool split between EMB and KV, bytes."""
    pool_source: str
    """How the pool was sized."""
    footprint_bytes: int
    """The trace's combined EMB+KV footprint, bytes."""
    notes: tuple[str, ...]
    """Warnings for the user (e.g. the whole footprint fits in the pool)."""
    n_cand: np.ndarray = field(repr=False)
    """Candidates per request, int64 (derived by prepare_context)."""
    ctx_len: np.ndarray = field(repr=False)
    """Context length L per request, capped at max_seq_len, int64 (derived)."""
    first_visit: np.ndarray = field(repr=False)
    """True where the request is its user's first in the trace (derived)."""

    def edges(self, window_s: float) -> np.ndarray:
        """Request index bounds of each ``window_s`` window (len = windows + 1)."""
        return window_edges(self.arrays.ts_s, window_s)

    def n_windows(self, window_s: float) -> int:
        """Number of ``window_s`` windows covering the trace."""
        return len(self.edges(window_s)) - 1


def prepare_context(
    arrays: TraceArrays,
    gpu: GpuProfile,
    model: ModelProfile,
    latency: LatencyModel,
    *,
    pool_bytes: int | None = None,
    pool_fraction: float | None = None,
) -> NodeContext:
    """Bundle arrays and profiles; size the pool (HBM default, bytes, or footprint share)."""
    fp = footprint(arrays, model).total_bytes
    pool = resolve_pool(
        gpu, model, pool_bytes_override=pool_bytes, pool_fraction=pool_fraction, footprint_bytes=fp
    )
    notes: list[str] = []
    if pool.pool_bytes >= fp:
        notes.append(
            f"the trace's whole EMB+KV footprint ({fp / 2**30:.3g} GiB) fits in the "
            f"{pool.pool_bytes / 2**30:.3g} GiB pool, so the caches do not compete; "
            "use --pool-fraction < 1 to study the split"
        )
    first_visit = np.zeros(arrays.n_requests, bool)
    first_visit[np.unique(arrays.user, return_index=True)[1]] = True
    return NodeContext(
        arrays=arrays,
        gpu=gpu,
        model=model,
        latency=latency,
        pool_bytes=pool.pool_bytes,
        pool_source=pool.source,
        footprint_bytes=fp,
        notes=tuple(notes),
        n_cand=np.diff(arrays.cand_offsets).astype(np.int64),
        ctx_len=np.minimum(arrays.hist_end, model.max_seq_len).astype(np.int64),
        first_visit=first_visit,
    )


def load_context(
    trace_path: str | Path,
    *,
    gpu: str = "a100-80g",
    model: str = "gr-small",
    latency: str | None = None,
    pool_bytes: int | None = None,
    pool_fraction: float | None = None,
    seed: int = 0,
) -> NodeContext:
    """Read a trace file and resolve profiles by name or path (what the CLI commands call)."""
    from helm_plan import trace

    g = load_gpu(gpu)
    m = load_model(model)
    lat = build_latency_model(g, m, resolve_latency(g, m, latency))
    arrays = from_table(trace.read(trace_path), seed=seed)
    return prepare_context(arrays, g, m, lat, pool_bytes=pool_bytes, pool_fraction=pool_fraction)
