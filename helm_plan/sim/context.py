"""A trace prepared for node simulation: dense arrays, profiles, latency model and pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from helm_plan._densify import first_requests
from helm_plan.arrays import TraceArrays, from_file, from_table, window_edges
from helm_plan.cache.core import Workload
from helm_plan.cache.footprint import final_context, footprint
from helm_plan.errors import ConfigError
from helm_plan.latency.model import LatencyModel, build_latency_model, resolve_latency
from helm_plan.pool import Pool, resolve_pool
from helm_plan.profiles import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    GpuProfile,
    LatencyProfile,
    ModelProfile,
    load_gpu,
    load_model,
)


@dataclass(frozen=True, eq=False)
class NodeContext:
    """A trace prepared for node simulation: dense arrays, profiles, latency model, pool."""

    workload: Workload
    """The trace under the model: dense arrays, EMB keys, context rules."""
    gpu: GpuProfile
    """GPU profile."""
    model: ModelProfile
    """Model profile."""
    latency: LatencyModel
    """Resolved service-time model."""
    latency_profile: LatencyProfile | None
    """The latency profile it was built from (None when built from a bare model)."""
    pool_bytes: int
    """HBM cache pool split between EMB and KV, bytes."""
    pool_source: str
    """How the pool was sized."""
    footprint_bytes: int
    """The trace's combined EMB+KV footprint, bytes."""
    emb_footprint_bytes: int
    """Its EMB part (every reachable key's row), bytes; the rest is the peak KV held."""
    notes: tuple[str, ...]
    """Warnings for the user (e.g. the whole footprint fits in the pool)."""
    ctx_len: np.ndarray = field(repr=False)
    """Context length L per request (chunked slide past max_seq_len), int64 (derived)."""
    first_visit: np.ndarray = field(repr=False)
    """True where the request is its user's first in the trace (derived)."""

    @property
    def fit_band(self) -> tuple[float, float] | None:
        """The EMB shares r at which neither cache ever evicts, ``(emb / pool, 1 - kv / pool)``
        with the footprint's two parts, or None when the footprint exceeds the pool.

        Outside it one cache is short of its footprint, and with a cyclic reuse pattern an
        LRU cache a little short hits on nothing: a footprint that fits does not make the
        split irrelevant unless the band is wide (the ``flat`` scenario's band is
        [0.0001, 0.015]: r = 0.01 serves it at P99 0.60 ms, every r from 0.02 up at 2.22).
        """
        if self.footprint_bytes > self.pool_bytes or self.pool_bytes <= 0:
            return None
        kv = self.footprint_bytes - self.emb_footprint_bytes
        return self.emb_footprint_bytes / self.pool_bytes, 1.0 - kv / self.pool_bytes

    def fit_ratio(self, step: float | None = 0.01) -> float | None:
        """A ratio inside :attr:`fit_band`: its middle on the ``step`` lattice when a lattice
        point lies in the band (the one nearest the middle), else the middle itself."""
        band = self.fit_band
        if band is None:
            return None
        lo, hi = band
        mid = (lo + hi) / 2
        st = step or 0.01
        k = round(mid / st)
        for j in sorted(range(k - 2, k + 3), key=lambda j: abs(j * st - mid)):
            r = round(j * st, 9)
            if lo <= r <= hi:
                return r
        return round(mid, 9)

    @property
    def arrays(self) -> TraceArrays:
        """Dense trace arrays."""
        return self.workload.arrays

    @property
    def n_cand(self) -> np.ndarray:
        """Candidates per request, int64."""
        return self.workload.arrays.n_cand

    def edges(self, window_s: float) -> np.ndarray:
        """Request index bounds of each ``window_s`` window (len = windows + 1)."""
        return window_edges(self.arrays.ts_s, window_s)

    def n_windows(self, window_s: float) -> int:
        """Number of ``window_s`` windows covering the trace."""
        return len(self.edges(window_s)) - 1


def prepare_context(
    arrays: TraceArrays | Workload,
    gpu: GpuProfile,
    model: ModelProfile,
    latency: LatencyModel,
    *,
    pool_bytes: int | None = None,
    pool_fraction: float | None = None,
    latency_profile: LatencyProfile | None = None,
    pool: Pool | None = None,
) -> NodeContext:
    """Bundle arrays and profiles; size the pool (HBM default, bytes, or footprint share).

    A :class:`Workload` must be ``model``'s (its keys are reused). ``pool``, a pool already
    resolved for ``gpu`` (e.g. from the input trace's footprint for a scaled copy of it:
    :mod:`helm_plan.pool`), replaces ``pool_bytes`` and ``pool_fraction``.
    """
    wl = arrays if isinstance(arrays, Workload) else Workload.of(arrays, model)
    if (wl.max_seq_len, wl.kv_slide_chunk, wl.keys.table_bytes.tolist()) != (
        model.max_seq_len, model.kv_slide_chunk, [t.row_bytes for t in model.tables]
    ):  # fmt: skip
        raise ConfigError(
            f"the workload was loaded under another model than {model.name!r}",
            hint="load the trace under the model you simulate",
        )
    arrays = wl.arrays
    fpt = footprint(wl, model)
    fp = fpt.total_bytes
    if pool is None:
        pool = resolve_pool(gpu, model, pool_bytes_override=pool_bytes,
                            pool_fraction=pool_fraction, footprint_bytes=fp)  # fmt: skip
    notes: list[str] = []
    if pool.pool_bytes >= fp:
        notes.append(
            f"the trace's whole EMB+KV footprint ({fp / 2**30:.3g} GiB) fits in the "
            f"{pool.pool_bytes / 2**30:.3g} GiB pool: neither cache evicts at an EMB share "
            f"between {fpt.emb_bytes / pool.pool_bytes:.4f} and "
            f"{1 - fpt.kv_bytes / pool.pool_bytes:.4f}, and the caches compete only outside "
            "it; use --pool-fraction < 1, --scale or synth --like --scale to study a larger "
            "workload"
        )
    first_visit = first_requests(arrays.user, arrays.n_users)
    return NodeContext(
        workload=wl,
        gpu=gpu,
        model=model,
        latency=latency,
        latency_profile=latency_profile,
        pool_bytes=pool.pool_bytes,
        pool_source=pool.source,
        footprint_bytes=fp,
        emb_footprint_bytes=fpt.emb_bytes,
        notes=tuple(notes),
        ctx_len=final_context(arrays.hist_end, model.max_seq_len, model.kv_slide_chunk),
        first_visit=first_visit,
    )


def load_context(
    trace: str | Path | pa.Table | Workload,
    *,
    gpu: str = DEFAULT_GPU,
    model: str = DEFAULT_MODEL,
    latency: str | None = None,
    pool_bytes: int | None = None,
    pool_fraction: float | None = None,
    seed: int = 0,
    spill_dir: str | Path | None = None,
) -> NodeContext:
    """The one place a trace becomes a node context: profiles, dense arrays, footprint, pool.

    ``trace`` is a canonical trace file (validated on read) or an already
    validated table, or a workload already loaded under ``model`` (e.g. a SHARDS
    load's columns, :mod:`helm_plan.cache.sampled`); profiles are named by
    shipped name or TOML path; ``seed`` drives the implicit candidate draws.
    ``spill_dir`` keeps a file's history tokens on disk there
    (:func:`helm_plan.arrays.from_file`).
    """
    g = load_gpu(gpu)
    m = load_model(model)
    lat_prof = resolve_latency(g, m, latency)
    lat = build_latency_model(g, m, lat_prof)
    # a file is streamed into the dense arrays, never held as an Arrow table as well
    arrays: TraceArrays | Workload
    if isinstance(trace, Workload):
        arrays = trace
    elif isinstance(trace, pa.Table):
        arrays = from_table(trace, seed=seed)
    else:
        arrays = from_file(trace, seed=seed, spill_dir=spill_dir)
    return prepare_context(
        arrays, g, m, lat, pool_bytes=pool_bytes, pool_fraction=pool_fraction,
        latency_profile=lat_prof,
    )  # fmt: skip
