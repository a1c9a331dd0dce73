"""EMB hit-rate and KV token-reuse curves over the whole pool, whole trace and per window.

Three curves over the capacities of :func:`capacity_grid` from 0 to ``B``
(``B`` = the cache pool): 0, then ``n_points - 1`` capacities spaced evenly
in log(bytes) from one EMB row (or one KV token, if smaller) to ``B``, plus
the split point ``ratio * B`` and the trace's EMB and KV footprints when they
are below ``B``. The log axis resolves real traces whose footprint is a small
share of the pool (a linear axis put their knees on its first point), and
each knee is found on it (Kneedle on log bytes). The curves:

- ``kv``: KV token-reuse rate (reused / context tokens) of a KV cache of
  ``capacity_bytes`` (``floor(bytes / kv_bytes_per_token)`` tokens). One pass of
  token-weighted LRU distances, exact from the largest admitted context up;
  capacities below it are replayed exactly (:mod:`helm_plan.cache.kvcurve`).
- ``emb``: EMB hit rate *by bytes* (hit bytes / looked-up bytes, the
  simulator's ``emb_hit_rate``) of an LRU of ``capacity_bytes`` over the
  model's (table, row) keys, on the lookup stream produced with the KV cache
  fixed at ``(1 - ratio) * B``, the KV share at EMB share ``ratio``. The EMB
  stream depends on KV misses (the coupling), so the curve is exact only for
  that KV capacity; its value at ``pool_fraction == ratio`` is the EMB hit
  rate of the split ``ratio``.
- ``emb_kv0``: the same with KV capacity 0: every request recomputes its whole
  context (the worst-case EMB stream).

EMB curves come from byte-weighted LRU stack distances, exact at every
capacity (:mod:`helm_plan.cache.stack`), or with ``sample_rate < 1`` or
``sample_size`` from SHARDS (:mod:`helm_plan.cache.shards`); the lookup stream
is generated chunk by chunk as the pass consumes it, sampled at generation
under SHARDS (:mod:`helm_plan.cache.embstream`). Windows are ``window_s``
long; the caches are warm across windows.

**Schema (v2).** Columns :data:`SCHEMA` as before; for EMB rows
``hit_rate`` is weighted by bytes and ``n_accesses`` counts keys looked up
(all tables; the denominator of ``hit_rate`` is their bytes). File metadata
``helm_plan.curves``: the former ``row_bytes`` (one row size) is replaced by
``tables``, one entry per embedding table of the model (``name``, ``key``,
``rows``, ``row_bytes``, ``per_history_token``, ``per_candidate``,
``n_keys`` = distinct (table, row) keys the trace's items reach), and
``footprint`` has ``n_keys`` instead of ``n_items``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from helm_plan import io
from helm_plan._densify import release_memory
from helm_plan.arrays import TraceArrays, window_edges
from helm_plan.cache import core, embstream, kvcurve
from helm_plan.cache.core import Workload
from helm_plan.cache.footprint import Footprint, footprint
from helm_plan.cache.knee import kneedle
from helm_plan.cache.sampled import SampledWorkload
from helm_plan.cache.shards import SHARDS_MODULUS
from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError, InputFileError
from helm_plan.pool import Pool
from helm_plan.profiles import GpuProfile, ModelProfile

KINDS = ("emb", "emb_kv0", "kv")
"""Curve kinds, in table order."""
WHOLE = -1
"""The ``window`` value of the whole-trace curve."""
SCHEMA = {
    "kind": pl.String,
    "window": pl.Int32,
    "window_start_s": pl.Float64,
    "window_end_s": pl.Float64,
    "capacity_bytes": pl.Int64,
    "pool_fraction": pl.Float64,
    "hit_rate": pl.Float64,
    "n_accesses": pl.Int64,
    "exact": pl.Boolean,
}
"""Columns of the curves table (and parquet), see :class:`Curves`."""
KNEE_SCHEMA = {
    "kind": pl.String,
    "window": pl.Int32,
    "capacity_bytes": pl.Int64,
    "pool_fraction": pl.Float64,
    "hit_rate": pl.Float64,
}
"""Columns of the knees table (nulls where a curve has no knee)."""


@dataclass(frozen=True)
class CurvesConfig:
    """How hit-rate curves are measured."""

    window_s: float = 10.0
    """Window length in seconds for the per-window curves."""
    ratio: float = 0.5
    """EMB share r of the pool whose KV capacity (1 - r) * pool fixes the `emb` curve's stream."""
    n_points: int = 101
    """0 plus this many - 1 capacities log-spaced from one row (or KV token) to the pool."""
    sample_rate: float = 1.0
    """SHARDS sampling rate for the EMB curves (1 = exact stack distances)."""
    sample_size: int | None = None
    """Fixed-size SHARDS: at most this many distinct sampled keys (None = fixed-rate)."""
    shards_adjust: bool = True
    """Apply SHARDS_adj (correct the sampled access count) when sampling."""
    seed: int = 0
    """Seed of the SHARDS id hash."""
    worst_case: bool = True
    """Measure the ``emb_kv0`` curve (no KV cache: every request looks up its whole context),
    the longest of the three streams (``analyze`` leaves it out unless asked: its
    ``CURVES_DEFAULTS`` says why)."""

    def __post_init__(self) -> None:
        require_positive("window_s", self.window_s)
        require_range("ratio", self.ratio, 0.0, 1.0)
        if self.n_points < 2:
            raise ConfigError(
                f"n_points must be >= 2, got {self.n_points}",
                hint="set [curves] n_points >= 2 in the plan file",
            )
        require_range("sample_rate", self.sample_rate, 1.0 / SHARDS_MODULUS, 1.0)
        if self.sample_size is not None:
            require_positive("sample_size", self.sample_size)

    @property
    def sampled(self) -> bool:
        """True when the EMB curves are SHARDS estimates."""
        return self.sample_rate < 1.0 or self.sample_size is not None


@dataclass(frozen=True)
class Curves:
    """Measured curves: ``table`` has columns :data:`SCHEMA`, ``knees`` :data:`KNEE_SCHEMA`.

    ``table`` holds one row per (kind, window, capacity). ``window`` is -1 for
    the whole trace, else the window index (``window_start_s`` to
    ``window_end_s``); ``hit_rate`` is EMB hits / lookups or KV reused / context
    tokens (NaN when the window has none), EMB weighted by bytes;
    ``n_accesses`` counts EMB keys looked up or KV context tokens; ``exact``
    is False for SHARDS estimates.
    """

    table: pl.DataFrame
    """The curves, one row per kind x window x capacity."""
    knees: pl.DataFrame
    """Knee (Kneedle) of each kind x window curve."""
    gpu: str
    """GPU profile name."""
    model: str
    """Model profile name."""
    pool_bytes: int
    """Cache pool B the capacities span."""
    tables: tuple[dict[str, object], ...]
    """Per embedding table: name, key, rows, row_bytes, lookups per token/candidate, n_keys."""
    kv_bytes_per_token: int
    """Bytes of KV per token."""
    emb_kv_tokens: int
    """KV capacity (tokens) that fixed the `emb` curve's lookup stream."""
    footprint: Footprint
    """The trace's EMB+KV footprint."""
    config: CurvesConfig
    """The settings used."""

    def curve(self, kind: str, window: int = WHOLE) -> pl.DataFrame:
        """Rows of one curve, by capacity."""
        if kind not in KINDS:
            raise ConfigError(f"unknown curve kind {kind!r}", hint=f"one of {', '.join(KINDS)}")
        if kind == "emb_kv0" and not self.config.worst_case:
            raise ConfigError(
                "the emb_kv0 curve was not measured",
                hint="measure it with worst_case = true ([curves] section)",
            )
        return self.table.filter((pl.col("kind") == kind) & (pl.col("window") == window))

    def hit_rate_at(self, kind: str, pool_fraction: float, window: int = WHOLE) -> float:
        """Hit rate of a curve at a share of the pool (linear between sampled capacities)."""
        c = self.curve(kind, window)
        return float(np.interp(pool_fraction, c["pool_fraction"], c["hit_rate"]))

    def metadata(self) -> dict[str, str]:
        """File-level parquet metadata: profiles, pool, config and footprint."""
        meta = {
            "gpu": self.gpu,
            "model": self.model,
            "pool_bytes": self.pool_bytes,
            "tables": list(self.tables),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "emb_kv_tokens": self.emb_kv_tokens,
            "footprint": asdict(self.footprint),
            "config": asdict(self.config),
            "knees": self.knees.to_dicts(),
        }
        return {"helm_plan.curves": json.dumps(meta)}


def compute_curves(
    data: TraceArrays | Workload | SampledWorkload,
    gpu: GpuProfile,
    model: ModelProfile,
    pool: Pool,
    cfg: CurvesConfig,
    progress: Callable[[int, int], None] | None = None,
    *,
    sink: embstream.Sink | None = None,
    kv_first: bool = False,
) -> Curves:
    """Measure the ``emb``, ``emb_kv0`` and ``kv`` curves over the pool, whole trace and per window.

    ``sink`` (e.g. a :class:`StreamWriter`) receives the ``emb`` curve's
    lookup stream chunk by chunk while its pass runs. A :class:`SampledWorkload`
    (:func:`helm_plan.cache.sampled.load` at ``cfg``'s rate and seed) gives the
    same curves as its full trace in a fraction of the memory. ``kv_first`` measures the KV
    curve before the EMB ones (the compile-ahead process, :mod:`helm_plan.analyze.warm`: where
    it and the run meet here, each compiles the other's kernels); the curves are the same.
    """
    report = progress or (lambda done, total: None)
    total_steps = 4
    if isinstance(data, SampledWorkload):
        emb_data: Workload | SampledWorkload = data
        wl = data.workload
    else:
        wl = data if isinstance(data, Workload) else Workload.of(data, model)
        emb_data = wl
    arrays = wl.arrays
    if arrays.n_requests == 0:
        raise ConfigError("cannot measure curves of an empty trace", hint="pass a non-empty trace")
    B = int(pool.pool_bytes)
    require_positive("pool_bytes", B)
    fp = footprint(wl, model)
    cap_bytes = capacity_grid(B, model, cfg, fp)
    frac = cap_bytes / B
    edges = window_edges(arrays.ts_s, cfg.window_s)
    n_win = len(edges) - 1
    report(0, total_steps)

    # EMB first, so a sink's writer overlaps the passes after it.
    emb_kv = core.capacities(cfg.ratio, B, model)[1]
    sampling = (
        embstream.Sampling(cfg.sample_rate, cfg.sample_size, cfg.seed, cfg.shards_adjust)
        if cfg.sampled
        else None
    )
    results = {}
    passes = (("emb", emb_kv), ("emb_kv0", 0)) if cfg.worst_case else (("emb", emb_kv),)

    def emb() -> None:
        for step, (kind, kv_tokens) in enumerate(passes, start=1):
            eh = embstream.emb_hits(
                emb_data, kv_tokens, cap_bytes, edges, sampling=sampling,
                sink=sink if kind == "emb" else None,
            )  # fmt: skip
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = eh.hit_bytes / np.maximum(eh.lookup_bytes, 1)[:, None]
            whole = eh.hit_bytes.sum(axis=0) / max(int(eh.lookup_bytes.sum()), 1)
            results[kind] = (rate, whole, eh.lookup_bytes > 0, eh.lookups, eh.exact)
            release_memory()  # the pass's state and buffers: the next pass would build on them
            report(step, total_steps)

    def kv() -> None:  # one pass, exact replay below the largest admitted context
        grid_tok = cap_bytes // model.kv_bytes_per_token
        kd = kvcurve.kv_distances(wl)
        kv_hits, kv_ctx = kvcurve.binned_reuse(kd, grid_tok, edges)
        small = np.flatnonzero(grid_tok < kd.exact_from_tokens)
        del kd  # per-request arrays (24 bytes a request)
        release_memory()
        if len(small):
            kv_hits[:, small] = kvcurve.kv_reuse_exact(wl, grid_tok[small], edges).T
        rate = kv_hits / np.maximum(kv_ctx, 1)[:, None]
        whole = kv_hits.sum(axis=0) / max(int(kv_ctx.sum()), 1)
        results["kv"] = (rate, whole, kv_ctx > 0, kv_ctx, True)
        report(3, total_steps)

    for part in (kv, emb) if kv_first else (emb, kv):
        part()

    w_start = np.arange(n_win, dtype=np.float64) * cfg.window_s
    frames = [
        _frame(kind, *results[kind], cap_bytes, frac, w_start, cfg.window_s, arrays)
        for kind in KINDS
        if kind in results
    ]
    table = pl.concat(frames)
    knees = _knees(table)
    report(total_steps, total_steps)
    return Curves(
        table=table,
        knees=knees,
        gpu=gpu.name,
        model=model.name,
        pool_bytes=B,
        tables=table_info(wl, model),
        kv_bytes_per_token=model.kv_bytes_per_token,
        emb_kv_tokens=int(emb_kv),
        footprint=fp,
        config=cfg,
    )


def capacity_grid(B: int, model: ModelProfile, cfg: CurvesConfig, fp: Footprint) -> np.ndarray:
    """The curves' capacities in bytes, sorted and distinct (see the module docstring)."""
    lo = min(min(t.row_bytes for t in model.tables), model.kv_bytes_per_token, B)
    logspaced = np.floor(np.geomspace(lo, B, cfg.n_points - 1)).astype(np.int64)
    marks = [int(cfg.ratio * B)] + [int(b) for b in (fp.emb_bytes, fp.kv_bytes) if 0 < b < B]
    grid = np.unique(np.concatenate([[0], logspaced, marks, [B]]).astype(np.int64))
    return grid[(grid >= 0) & (grid <= B)]


def table_info(wl: Workload, model: ModelProfile) -> tuple[dict[str, object], ...]:
    """Per-table metadata of the curves (module docstring, schema v2)."""
    counts = np.bincount(wl.keys.key_table, minlength=len(model.tables))
    return tuple(
        {
            "name": t.name,
            "key": t.key,
            "rows": int(t.rows),
            "row_bytes": int(t.row_bytes),
            "per_history_token": int(t.per_history_token),
            "per_candidate": int(t.per_candidate),
            "n_keys": int(counts[i]),
        }
        for i, t in enumerate(model.tables)
    )


def _frame(kind, rate, whole, has, n_acc, is_exact, cap_bytes, frac, w_start, window_s, arrays):
    """Rows of one curve kind: the whole trace (window -1), then each window."""
    n_cap = len(cap_bytes)
    R = np.vstack([whole[None, :], np.where(has[:, None], rate, np.nan)])
    N = np.concatenate([[int(np.sum(n_acc))], n_acc]).astype(np.int64)
    windows = np.concatenate([[WHOLE], np.arange(len(w_start))]).astype(np.int32)
    starts = np.concatenate([[0.0], w_start])
    ends = np.concatenate([[float(arrays.ts_s[-1])], w_start + window_s])
    k = len(windows)
    return pl.DataFrame(
        {
            "kind": np.full(k * n_cap, kind),
            "window": np.repeat(windows, n_cap),
            "window_start_s": np.repeat(starts, n_cap),
            "window_end_s": np.repeat(ends, n_cap),
            "capacity_bytes": np.tile(cap_bytes, k),
            "pool_fraction": np.tile(frac, k),
            "hit_rate": R.ravel(),
            "n_accesses": np.repeat(N, n_cap),
            "exact": np.full(k * n_cap, is_exact),
        },
        schema=SCHEMA,
    )


def _knees(table: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for (kind, window), g in table.group_by(["kind", "window"], maintain_order=True):
        # Kneedle on log bytes, the axis the grid is spaced on (capacity 0 has no log).
        pos = np.flatnonzero(g["capacity_bytes"].to_numpy() > 0)
        kp = kneedle(np.log(g["capacity_bytes"].to_numpy()[pos]), g["hit_rate"].to_numpy()[pos])
        k = None if kp is None else int(pos[kp])
        if k is None:
            rows.append((kind, window, None, None, None))
        else:
            rows.append(
                (kind, window, g["capacity_bytes"][k], g["pool_fraction"][k], g["hit_rate"][k])
            )
    return pl.DataFrame(rows, schema=KNEE_SCHEMA, orient="row")


def write(curves: Curves, path: str | Path, provenance: dict[str, str] | None = None) -> Path:
    """Atomically write ``curves.table`` as parquet with :meth:`Curves.metadata`."""
    meta = curves.metadata()
    if provenance:
        meta["helm_plan.provenance"] = json.dumps(provenance)
    return io.write_parquet(path, curves.table.to_arrow(), metadata=meta)


def read_table(path: str | Path) -> pl.DataFrame:
    """Read a curves parquet written by :func:`write`, checking its columns."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(
            f"curves file {p} not found", hint="create it with `helm-plan profile`"
        )
    try:
        df = pl.from_arrow(pq.read_table(p))
    except Exception as e:  # pyarrow raises several types for a non-parquet file
        raise InputFileError(
            f"cannot read {p} as parquet: {e}", hint="pass a curves file from `helm-plan profile`"
        ) from e
    missing = [c for c in SCHEMA if c not in df.columns]  # type: ignore[union-attr]
    if missing:
        raise InputFileError(
            f"{p} is not a curves file: column {missing[0]!r} missing",
            hint="pass a curves file from `helm-plan profile`",
        )
    return df  # type: ignore[return-value]
