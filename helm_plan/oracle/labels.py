"""The oracle's label table: schema, observable window features, parquet read/write.

One row per window (DESIGN.md, Oracle). Columns, in order:

- bounds: ``window`` (int), ``start_s``, ``end_s``, ``requests`` (int),
  ``warmup_start_s`` (start of the span the caches were warmed on);
- observable features (what a server measures online; computed from the
  trace, independent of ``r`` unless noted):
  (:func:`helm_plan.sim.metrics.window_features`) ``arrival_rate_rps``; ``rate_trend`` (rate / previous window's rate - 1,
  0 for window 0); ``burst_score`` (rate / mean rate of up to
  ``BURST_TRAILING`` (6) previous windows, 1 for window 0); ``interarrival_cv``
  (std/mean of inter-arrival gaps, NaN under 3 requests);
  ``cold_user_share`` (share of requests that are their user's first in the
  trace); ``hist_len_mean``, ``hist_len_p95`` (context length L, tokens);
  ``emb_hit_rate``, ``kv_reuse_rate``, ``h2d_util`` (at ``r_star``; h2d_util
  = demand-miss bytes / (h2d_bw · window_s)); ``emb_hit_prev``,
  ``kv_reuse_prev`` (the previous window's at its ``r_star``: what a server
  running the oracle schedule saw last window; NaN for window 0);
- the label: ``r_star``, ``p99_ms``, ``p50_ms``, ``slo_attainment`` (at
  r_star), ``flatness`` (max - min of the evaluated r whose P99 is within
  ``flat_tol`` (2%) of the best), ``r_flat_lo``, ``r_flat_hi``, ``n_evals``
  (distinct r simulated);
- the coarse grid (wide float64 columns, one per grid ratio, named by the
  ratio in percent with 3 digits: ``r000`` = 0.0, ``r010`` = 0.1, ...,
  ``r100`` = 1.0): ``p99_ms_rXXX``, ``slo_att_rXXX``, ``emb_hit_rXXX``,
  ``kv_reuse_rXXX``. The grid itself is in the file metadata.

Labels made for ``analyze`` (``label_windows(..., grid=False)``) carry no grid:
their coarse grid is empty and, in place of the wide columns, five list columns
hold every point the window's search evaluated, in ratio order: ``evals_r``,
``evals_p99_ms``, ``evals_slo_att``, ``evals_emb_hit``, ``evals_kv_reuse``
(list<float64>, one entry per evaluated r; empty for a window without requests).
:meth:`Labels.points` reads either kind as one long table. ``helm-plan train``
labels its traces itself, with the grid.

A window without requests has NaN label and grid values. The parquet file
metadata holds ``helm_plan.labels_schema_version``, ``helm_plan.window_s``,
``helm_plan.coarse_grid`` (JSON list) and ``helm_plan.oracle`` (JSON of the
node and oracle configs).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from helm_plan import io
from helm_plan.errors import InputFileError

LABELS_SCHEMA_VERSION = "1"
GRID_METRICS = ("p99_ms", "slo_att", "emb_hit", "kv_reuse")
"""Prefixes of the coarse-grid columns."""
REQUIRED_COLUMNS = ("window", "start_s", "end_s", "requests", "r_star", "p99_ms", "slo_attainment")
EVAL_RATIOS = "evals_r"
"""List column of labels without a grid: the ratios a window's search evaluated."""
EVAL_METRICS = {"evals_p99_ms": "p99_ms", "evals_slo_att": "slo_attainment",
                "evals_emb_hit": "emb_hit_rate", "evals_kv_reuse": "kv_reuse_rate"}  # fmt: skip
"""List columns of labels without a grid, and the figure each holds (its name in
:meth:`Labels.points`, an attribute of a window's evaluation)."""
EVAL_SCHEMA = {c: pl.List(pl.Float64) for c in (EVAL_RATIOS, *EVAL_METRICS)}


def grid_suffix(r: float) -> str:
    """Column suffix of grid ratio ``r``: ``r`` + percent with 3 digits (0.1 -> r010)."""
    return f"r{round(r * 100):03d}"


@dataclass(frozen=True, eq=False)
class Labels:
    """Per-window oracle labels (see the module docstring for the columns)."""

    table: pl.DataFrame
    """One row per window."""
    window_s: float
    """Window length the labels were made for, seconds."""
    coarse_grid: tuple[float, ...]
    """Ratios of the wide grid columns."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Configs and provenance (JSON-able)."""
    schedule_run: Any = None
    """In memory only (not written): the carry oracle's own run on its schedule with lazy
    refill (a compact ``NodeResult``), so the pooled oracle figures need no replay."""

    @property
    def r_star(self) -> np.ndarray:
        return self.table["r_star"].to_numpy()

    def grid(self, metric: str = "p99_ms") -> np.ndarray:
        """(windows, grid points) array of one grid metric (no columns: labels without a grid)."""
        cols = [f"{metric}_{grid_suffix(r)}" for r in self.coarse_grid]
        if not cols:
            return np.empty((self.table.height, 0))
        return self.table.select(cols).to_numpy()

    def points(self) -> pl.DataFrame:
        """The evaluated points per window: window, ratio, p99_ms, slo_attainment,
        emb_hit_rate, kv_reuse_rate, sorted by window and ratio.

        The coarse grid of labels that have one (not the search's other points, as the
        grid columns store them), else every point the search evaluated.
        """
        t = self.table
        if EVAL_RATIOS in t.columns:
            return (
                t.select(pl.col("window").cast(pl.Int64), pl.col(EVAL_RATIOS).alias("ratio"),
                         *(pl.col(c).alias(n) for c, n in EVAL_METRICS.items()))
                .explode(["ratio", *EVAL_METRICS.values()])
                .drop_nulls("ratio")
                .sort(["window", "ratio"])
            )  # fmt: skip
        rows = [
            t.select(
                pl.col("window").cast(pl.Int64),
                pl.lit(float(r)).alias("ratio"),
                *(pl.col(f"{m}_{grid_suffix(r)}").alias(n) for m, n in
                  zip(GRID_METRICS, EVAL_METRICS.values(), strict=True)),
            )
            for r in self.coarse_grid
        ]  # fmt: skip
        if not rows:
            return pl.DataFrame(schema={"window": pl.Int64, "ratio": pl.Float64,
                                        **dict.fromkeys(EVAL_METRICS.values(), pl.Float64)})  # fmt: skip
        return pl.concat(rows).sort(["window", "ratio"])


def write_labels(labels: Labels, path: str | os.PathLike[str]) -> Path:
    """Atomically write ``labels`` as parquet with its metadata (via helm_plan.io)."""
    meta = {
        "helm_plan.labels_schema_version": LABELS_SCHEMA_VERSION,
        "helm_plan.window_s": repr(float(labels.window_s)),
        "helm_plan.coarse_grid": json.dumps(list(labels.coarse_grid)),
        "helm_plan.oracle": json.dumps(labels.meta, sort_keys=True, default=str),
    }
    return io.write_parquet(path, labels.table.to_arrow(), metadata=meta)


def read_labels(path: str | os.PathLike[str]) -> Labels:
    """Read a labels file written by :func:`write_labels`, with precise errors."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(
            f"labels file {p} not found", hint="make one with `helm-plan oracle TRACE -o FILE`"
        )
    try:
        tbl = pq.read_table(p)
    except (pa.ArrowInvalid, OSError) as e:
        raise InputFileError(
            f"cannot read {p} as parquet: {e}",
            hint="check the file is a labels parquet written by `helm-plan oracle`",
        ) from e
    md = tbl.schema.metadata or {}
    hint = "make the labels file with `helm-plan oracle TRACE -o FILE`"
    version = md.get(b"helm_plan.labels_schema_version")
    if version is None:
        raise InputFileError(
            f"{p} is not a helm-plan labels file (no labels schema version in its metadata)",
            hint="make one with `helm-plan oracle TRACE -o FILE`",
        )
    if version.decode(errors="replace") != LABELS_SCHEMA_VERSION:
        raise InputFileError(f"{p} has labels schema {version.decode(errors='replace')}, this "
                             f"helm-plan reads {LABELS_SCHEMA_VERSION}", hint=hint)  # fmt: skip
    df = pl.from_arrow(tbl)
    assert isinstance(df, pl.DataFrame)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputFileError(f"labels file {p} is missing column {missing[0]!r}", hint=hint)
    try:
        window_s = float(md[b"helm_plan.window_s"])
        grid = tuple(float(r) for r in json.loads(md[b"helm_plan.coarse_grid"]))
        meta = json.loads(md.get(b"helm_plan.oracle", b"{}"))
        r_star = df["r_star"].cast(pl.Float64).to_numpy()
    except (KeyError, ValueError, TypeError, pl.exceptions.PolarsError) as e:
        raise InputFileError(f"labels file {p} has unreadable metadata or r_star: {e}",
                             hint=hint) from e  # fmt: skip
    ok = r_star[~np.isnan(r_star)]
    if not (np.isfinite(window_s) and window_s > 0) or not all(0 <= r <= 1 for r in grid):
        raise InputFileError(f"labels file {p}: window_s {window_s} or coarse grid {grid} is "
                             "out of range", hint=hint)  # fmt: skip
    if ok.size and not (ok.min() >= 0.0 and ok.max() <= 1.0):
        raise InputFileError(f"labels file {p}: r_star holds ratios outside [0, 1] "
                             f"({ok.min():g} .. {ok.max():g})", hint=hint)  # fmt: skip
    return Labels(table=df, window_s=window_s, coarse_grid=grid, meta=meta)
