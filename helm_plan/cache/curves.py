"""EMB hit-rate and KV token-reuse curves over the whole pool, whole trace and per window.

Three curves, each at ``n_points`` capacities evenly spaced over ``[0, B]``
(``B`` = the cache pool):

- ``kv``: KV token-reuse rate (reused / context tokens) of a KV cache of
  ``capacity_bytes`` (``floor(bytes / kv_bytes_per_token)`` tokens). One pass of
  token-weighted stack distances, exact from the largest context length up;
  capacities below it are replayed exactly (:mod:`helm_plan.cache.kvcurve`).
- ``emb``: EMB hit rate of ``floor(bytes / row_bytes)`` rows, on the lookup
  stream produced with the KV cache fixed at ``(1 - ratio) * B`` -- the KV
  share at EMB share ``ratio``. The EMB stream depends on KV misses (the
  coupling), so the curve is exact only for that KV capacity; its value at
  ``pool_fraction == ratio`` is the EMB hit rate of the split ``ratio``.
- ``emb_kv0``: the same with KV capacity 0: every request recomputes its whole
  history (the worst-case EMB stream).

EMB curves come from exact LRU stack distances (:mod:`helm_plan.cache.stack`)
or, with ``sample_rate < 1`` or ``sample_size``, from SHARDS. Windows are
``window_s`` long; the caches are warm across windows (distances are
computed over the whole prefix and bucketed by the request's window).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from helm_plan import io
from helm_plan.arrays import TraceArrays, window_edges
from helm_plan.cache import core, kvcurve, stack
from helm_plan.cache.footprint import Footprint, footprint
from helm_plan.cache.knee import kneedle
from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError, InputFileError
from helm_plan.profiles import GpuProfile, ModelProfile, Pool

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
    """Capacities per curve, evenly spaced over [0, pool] inclusive."""
    sample_rate: float = 1.0
    """SHARDS sampling rate for the EMB curves (1 = exact stack distances)."""
    sample_size: int | None = None
    """Fixed-size SHARDS: at most this many distinct sampled items (None = fixed-rate)."""
    shards_adjust: bool = True
    """Apply SHARDS_adj (correct the sampled access count) when sampling."""
    seed: int = 0
    """Seed of the SHARDS id hash."""

    def __post_init__(self) -> None:
        require_positive("window_s", self.window_s)
        require_range("ratio", self.ratio, 0.0, 1.0)
        if self.n_points < 2:
            raise ConfigError(f"n_points must be >= 2, got {self.n_points}")
        require_range("sample_rate", self.sample_rate, 1.0 / stack.SHARDS_MODULUS, 1.0)
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
    tokens (NaN when the window has none); ``n_accesses`` is that denominator
    (lookups or context tokens); ``exact`` is False for SHARDS estimates.
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
    row_bytes: int
    """Bytes of one EMB row."""
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
            "row_bytes": self.row_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "emb_kv_tokens": self.emb_kv_tokens,
            "footprint": asdict(self.footprint),
            "config": asdict(self.config),
            "knees": self.knees.to_dicts(),
        }
        return {"helm_plan.curves": json.dumps(meta)}


def compute_curves(
    arrays: TraceArrays,
    gpu: GpuProfile,
    model: ModelProfile,
    pool: Pool,
    cfg: CurvesConfig,
    progress: Callable[[int, int], None] | None = None,
) -> Curves:
    """Measure the ``emb``, ``emb_kv0`` and ``kv`` curves over the pool, whole trace and per window."""
    report = progress or (lambda done, total: None)
    total_steps = 4
    if arrays.n_requests == 0:
        raise ConfigError("cannot measure curves of an empty trace")
    B = int(pool.pool_bytes)
    require_positive("pool_bytes", B)
    msl = model.max_seq_len
    frac = np.linspace(0.0, 1.0, cfg.n_points)
    cap_bytes = np.floor(frac * B).astype(np.int64)
    edges = window_edges(arrays.ts_s, cfg.window_s)
    n_win = len(edges) - 1
    req_win = np.repeat(np.arange(n_win, dtype=np.int32), np.diff(edges))
    report(0, total_steps)

    # KV: one pass, exact replay below the largest context length.
    grid_tok = cap_bytes // model.kv_bytes_per_token
    kd = kvcurve.kv_distances(arrays, max_seq_len=msl)
    kv_hits, kv_ctx = kvcurve.binned_reuse(kd, grid_tok, req_win, n_win)
    small = np.flatnonzero(grid_tok < kd.exact_from_tokens)
    if len(small):
        exact = kvcurve.kv_reuse_exact(
            arrays, grid_tok[small], max_seq_len=msl, request_window=req_win, n_windows=n_win
        )
        kv_hits[:, small] = exact.T
    report(1, total_steps)

    grid_rows = cap_bytes // model.row_bytes
    results = {"kv": (kv_hits.astype(np.float64), kv_ctx, True)}
    emb_kv = core.capacities(cfg.ratio, B, model)[1]
    for step, (kind, kv_tokens) in enumerate((("emb_kv0", 0), ("emb", emb_kv)), start=2):
        kvr = core.kv_pass(arrays, kv_tokens, max_seq_len=msl)
        ids, offs = core.lookup_stream(arrays, kvr.n_computed)
        if cfg.sampled:
            hits, n_acc = stack.shards_binned_hits(
                ids, grid_rows, sample_rate=cfg.sample_rate, sample_size=cfg.sample_size,
                seed=cfg.seed, adjust=cfg.shards_adjust, offsets=offs,
                request_window=req_win, n_windows=n_win, n_ids=arrays.n_items,
            )  # fmt: skip
        else:
            ih, n_acc = stack.binned_hits(
                ids, grid_rows, offsets=offs, request_window=req_win, n_windows=n_win,
                n_ids=arrays.n_items,
            )  # fmt: skip
            hits = ih.astype(np.float64)
        results[kind] = (hits, n_acc, not cfg.sampled)
        report(step, total_steps)

    w_start = np.arange(n_win, dtype=np.float64) * cfg.window_s
    w_end = w_start + cfg.window_s
    frames = []
    for kind in KINDS:
        hits, n_acc, is_exact = results[kind]
        all_hits = hits.sum(axis=0, keepdims=True)
        all_n = np.array([n_acc.sum()], np.int64)
        H = np.vstack([all_hits, hits])
        N = np.concatenate([all_n, n_acc])
        windows = np.concatenate([[WHOLE], np.arange(n_win)]).astype(np.int32)
        starts = np.concatenate([[0.0], w_start])
        ends = np.concatenate([[float(arrays.ts_s[-1])], w_end])
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(N[:, None] > 0, H / np.maximum(N, 1)[:, None], np.nan)
        k = len(windows)
        frames.append(
            pl.DataFrame(
                {
                    "kind": np.full(k * cfg.n_points, kind),
                    "window": np.repeat(windows, cfg.n_points),
                    "window_start_s": np.repeat(starts, cfg.n_points),
                    "window_end_s": np.repeat(ends, cfg.n_points),
                    "capacity_bytes": np.tile(cap_bytes, k),
                    "pool_fraction": np.tile(frac, k),
                    "hit_rate": rate.ravel(),
                    "n_accesses": np.repeat(N, cfg.n_points),
                    "exact": np.full(k * cfg.n_points, is_exact),
                },
                schema=SCHEMA,
            )
        )
    table = pl.concat(frames)
    knees = _knees(table)
    report(total_steps, total_steps)
    return Curves(
        table=table,
        knees=knees,
        gpu=gpu.name,
        model=model.name,
        pool_bytes=B,
        row_bytes=model.row_bytes,
        kv_bytes_per_token=model.kv_bytes_per_token,
        emb_kv_tokens=int(emb_kv),
        footprint=footprint(arrays, model),
        config=cfg,
    )


def _knees(table: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for (kind, window), g in table.group_by(["kind", "window"], maintain_order=True):
        k = kneedle(g["pool_fraction"].to_numpy(), g["hit_rate"].to_numpy())
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


def emb_stream(arrays: TraceArrays, model: ModelProfile, pool: Pool, ratio: float) -> pa.Table:
    """The EMB access stream behind the ``emb`` curve, for checking it with another simulator.

    KV is fixed at ``(1 - ratio) * pool`` (as for the curve), so each request
    looks up its computed history tokens, then its candidates. Columns:
    ``request`` (row of the trace), ``ts_s`` and ``item_id`` (the trace's ids).
    Replaying ``item_id`` through any unit-size LRU of ``c`` rows gives the
    curve's hit rate at ``c * row_bytes`` bytes.
    """
    kv_tokens = core.capacities(ratio, int(pool.pool_bytes), model)[1]
    kvr = core.kv_pass(arrays, kv_tokens, max_seq_len=model.max_seq_len)
    ids, offs = core.lookup_stream(arrays, kvr.n_computed)
    req = np.repeat(np.arange(arrays.n_requests, dtype=np.int64), np.diff(offs))
    return pa.table({"request": req, "ts_s": arrays.ts_s[req], "item_id": arrays.item_ids[ids]})


def write_stream(table: pa.Table, path: str | Path, provenance: dict[str, str]) -> Path:
    """Atomically write an :func:`emb_stream` table as parquet."""
    return io.write_parquet(
        path, table, metadata={"helm_plan.provenance": json.dumps(provenance, sort_keys=True)}
    )


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
        raise InputFileError(f"cannot read {p} as parquet: {e}") from e
    missing = [c for c in SCHEMA if c not in df.columns]  # type: ignore[union-attr]
    if missing:
        raise InputFileError(f"{p} is not a curves file: column {missing[0]!r} missing")
    return df  # type: ignore[return-value]
