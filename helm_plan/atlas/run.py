"""Running the atlas: every cell of the grid, cached by content, over the executor seam.

Each cell's result is stored in ``DIR/.cells/<key>.json``, ``key`` a hash of
the cell's settings and of what else decides its result
(:meth:`AtlasConfig.run_key`, :data:`CELL_VERSION`); a rerun, or another grid
sharing cells, loads them instead of measuring again, and an interrupted run
keeps every cell it finished. Cells are independent, so they are mapped over
the executor (:mod:`helm_plan.exec`: local processes or Ray) a batch at a
time, each batch cached as it lands; the answer does not depend on the
backend or the worker count.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from helm_plan import io
from helm_plan._version import __version__
from helm_plan.analyze.stage_cache import stable_hash, versions
from helm_plan.atlas.cell import measure
from helm_plan.atlas.config import AtlasConfig, Cell, grid
from helm_plan.exec import Executor, SerialExecutor
from helm_plan.profiles import load_gpu

CELL_VERSION = "1"
"""Bump when what a cell measures changes: every cached cell is then measured again."""
CELLS_DIR = ".cells"
"""Folder of the cached cells inside the atlas directory."""


def cell_key(cell: Cell, cfg: AtlasConfig) -> str:
    """Content hash of a cell's result: its settings and the run settings that matter."""
    gpu = dataclasses.asdict(load_gpu(cfg.gpu))  # a profile file's contents, not its name
    return stable_hash({"v": CELL_VERSION, "cell": dataclasses.asdict(cell), **cfg.run_key(),
                        "gpu": gpu})  # fmt: skip


def cell_task(shared: AtlasConfig, cell: Cell) -> dict[str, Any]:
    """One cell measured (an executor task)."""
    return measure(cell, shared)


@dataclass(frozen=True)
class AtlasResult:
    """The measured grid."""

    config: AtlasConfig
    """The grid."""
    cells: pl.DataFrame
    """One row per distinct cell (:func:`helm_plan.atlas.cell.measure`'s columns, plus
    ``key``, ``panels``: where it sits, as JSON, and ``cached``)."""
    cached: int
    """Cells loaded from the cache."""
    measured: int
    """Cells measured in this run."""
    seconds: float
    """Wall time of this run."""


def run_atlas(
    cfg: AtlasConfig,
    out_dir: str | Path,
    *,
    executor: Executor | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> AtlasResult:
    """Measure every cell of ``cfg``'s grid not cached under ``out_dir`` (module docstring)."""
    import time

    t0 = time.perf_counter()
    ex = executor or SerialExecutor()
    cache = Path(out_dir) / CELLS_DIR
    cells = grid(cfg)
    keys = [cell_key(c, cfg) for c, _ in cells]
    rows: dict[str, dict[str, Any]] = {}
    for k in keys:
        hit = _load(cache / f"{k}.json", k)
        if hit is not None:
            rows[k] = hit
    cached = len(rows)
    todo = [(c, k) for (c, _), k in zip(cells, keys, strict=True) if k not in rows]
    done = cached
    tick = progress or (lambda d, t: None)
    tick(done, len(cells))
    batch = max(ex.workers, 1) * 2
    for i in range(0, len(todo), batch):
        part = todo[i : i + batch]
        res = ex.map(cell_task, [c for c, _ in part], shared=cfg,
                     label=lambda c: f"atlas cell {_describe(c, cfg)}")  # fmt: skip
        for (_, k), row in zip(part, res, strict=True):
            io.write_json(cache / f"{k}.json", {"key": k, "version": CELL_VERSION, "row": row},
                          strict=True)  # fmt: skip
            rows[k] = row
        done += len(part)
        tick(done, len(cells))
    fresh = {k for _, k in todo}
    out = [{"key": k, **rows[k], "panels": json.dumps(where), "cached": k not in fresh}
           for (_, where), k in zip(cells, keys, strict=True)]  # fmt: skip
    df = pl.DataFrame(out, infer_schema_length=None)
    return AtlasResult(cfg, df, cached, len(todo), time.perf_counter() - t0)


def _load(path: Path, key: str) -> dict[str, Any] | None:
    """A cached cell's row, or None (absent, unreadable or another key: measure again)."""
    if not path.is_file():
        return None
    try:
        obj = json.loads(path.read_text("utf-8"))
        if obj.get("key") != key or obj.get("version") != CELL_VERSION:
            return None
        row = obj["row"]
        return {k: (float("nan") if v is None else v) for k, v in row.items()}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None


def _describe(cell: Cell, cfg: AtlasConfig) -> str:
    """The cell's settings that differ from the base, e.g. ``pool_fraction=0.01``."""
    base = dataclasses.asdict(cfg.base)
    diff = [f"{k}={v}" for k, v in dataclasses.asdict(cell).items() if base[k] != v]
    return ", ".join(diff) or "base"


OUTPUTS = {
    "csv": "cells.csv",
    "parquet": "cells.parquet",
    "json": "atlas.json",
    "html": "atlas.html",
}
"""The files an atlas run writes into its folder (the CLI guards them before any work)."""


def write_outputs(res: AtlasResult, out_dir: str | Path, page: str) -> dict[str, Path]:
    """Write ``cells.csv``, ``cells.parquet``, ``atlas.json`` (grid and provenance) and the
    page (``atlas.html``) into ``out_dir``, each atomically."""
    d = Path(out_dir)
    df = res.cells
    paths = {k: d / name for k, name in OUTPUTS.items()}
    io.write_text(paths["csv"], df.write_csv())
    io.write_parquet(paths["parquet"], df.to_arrow())
    io.write_json(paths["json"], {
        "schema": "helm-plan/atlas", "schema_version": "1", "config": dataclasses.asdict(res.config),
        "cells": df.height, "cached": res.cached, "measured": res.measured,
        "seconds": res.seconds, "versions": versions(), "helm_plan": __version__,
    }, strict=True)  # fmt: skip
    io.write_text(paths["html"], page)
    return paths


__all__ = ["CELLS_DIR", "CELL_VERSION", "AtlasResult", "cell_key", "cell_task", "run_atlas",
           "write_outputs"]  # fmt: skip
