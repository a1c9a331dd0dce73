"""Finished analyze stages, stored atomically and keyed by a hash of their inputs.

A rerun with the same trace, profiles and settings finds each stage's key
and reuses its output; an interrupted run leaves only finished stage files.
"""

from __future__ import annotations

import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

from helm_plan import io
from helm_plan._version import __version__
from helm_plan.analyze.stages import StageOutput

VERSION_PACKAGES = ("numpy", "numba", "polars", "duckdb", "pyarrow", "optuna", "scipy", "torch",
                    "plotly")  # fmt: skip


def versions() -> dict[str, str]:
    """Versions of Python, helm-plan and the numeric stack (without importing them)."""

    out = {"python": platform.python_version(), "helm-plan": __version__}
    for p in VERSION_PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def stable_hash(obj: Any) -> str:
    """A short SHA-256 of ``obj``'s canonical JSON: the key of a stage's inputs."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class StageCache:
    """Finished stage outputs in ``DIR/.stages``, each file written atomically."""

    def __init__(self, out_dir: Path) -> None:
        self.dir = out_dir / ".stages"

    def path(self, stage: str, key: str, ext: str) -> Path:
        return self.dir / f"{stage}-{key}.{ext}"

    def load(self, stage: str, key: str) -> StageOutput | None:
        p = self.path(stage, key, "json")
        if not p.is_file():
            return None
        try:
            obj = json.loads(p.read_text("utf-8"))
            if obj.get("stage") != stage or obj.get("key") != key:
                return None
            meta = obj["meta"]
            tables = {
                n: pl.DataFrame(
                    t["columns"], schema={c: _DTYPES[d] for c, d in t["schema"].items()}
                )
                for n, t in obj["tables"].items()
            }
            if not isinstance(meta, dict) or not tables:
                return None
        except (
            OSError,
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            pl.exceptions.PolarsError,
        ):
            # unreadable, or valid JSON of the wrong shape: recompute and overwrite
            return None
        return StageOutput(tables=tables, meta=meta)

    def save(self, stage: str, key: str, out: StageOutput) -> None:
        tables = {}
        for n, df in out.tables.items():
            schema = {c: _dtype_name(t) for c, t in df.schema.items()}
            tables[n] = {"schema": schema, "columns": {c: df[c].to_list() for c in df.columns}}
        io.write_json(self.path(stage, key, "json"), {"stage": stage, "key": key,
                                                      "meta": out.meta, "tables": tables})  # fmt: skip


_DTYPES = {"Int64": pl.Int64, "Float64": pl.Float64, "String": pl.String, "Boolean": pl.Boolean,
           "Int32": pl.Int32}  # fmt: skip


def _dtype_name(t: pl.DataType) -> str:
    if t.is_integer():
        return "Int64"
    if t.is_float():
        return "Float64"
    if t == pl.Boolean:
        return "Boolean"
    return "String"
