"""The DuckDB run store: every table behind the report, in one file.

A run is a :class:`RunData`: named polars tables plus a flat ``meta`` dict of
JSON values (seed, trace hash, profile names, verdict inputs). The store
holds each table under its own name and the meta in ``run_meta(key,
value_json)``. It is written to a temporary file and renamed, so a reader
never sees a half-written store; ``helm-plan report`` rebuilds the HTML from
it without recomputing anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from helm_plan import io
from helm_plan.errors import InputFileError

STORE_SCHEMA_VERSION = "1"
"""Version of the table layout in helm.duckdb."""

META_TABLE = "run_meta"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class RunData:
    """Everything a report is built from: tables and scalar metadata."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    """Named tables (lower_snake names), e.g. ``labels``, ``policy_windows``."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Flat JSON-serialisable metadata, e.g. ``seed``, ``trace_sha256``."""

    def table(self, name: str) -> pl.DataFrame:
        """The table ``name``, or an empty frame when the run has none."""
        return self.tables.get(name, pl.DataFrame())


def write_store(path: str | os.PathLike[str], data: RunData) -> Path:
    """Write ``data`` to a DuckDB file at ``path`` atomically (temp file, then rename)."""
    for name in data.tables:
        if not _NAME.match(name) or name == META_TABLE:
            raise ValueError(f"bad table name {name!r}")
    meta = {"store_schema_version": STORE_SCHEMA_VERSION, **data.meta}
    meta_df = pl.DataFrame(
        {
            "key": list(meta),
            "value_json": [
                json.dumps(v, sort_keys=True, default=io._json_default) for v in meta.values()
            ],
        },
        schema={"key": pl.String, "value_json": pl.String},
    )
    with io.atomic_path(path, suffix=".duckdb.tmp") as tmp:
        tmp.unlink()  # duckdb creates its own file; an empty placeholder is not a database
        wal = Path(f"{tmp}.wal")
        try:
            con = duckdb.connect(str(tmp))
            try:
                for name, df in [(META_TABLE, meta_df), *sorted(data.tables.items())]:
                    arrow = df.to_arrow()
                    con.register("_src", arrow)
                    con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM _src')
                    con.unregister("_src")
                con.execute("CHECKPOINT")
            finally:
                con.close()
        except duckdb.Error as e:  # e.g. a full disk: DuckDB's own I/O errors, not OSError
            raise InputFileError(
                f"cannot write the run store {path}: {str(e).splitlines()[0]} (nothing was "
                "written; a previous store there is kept)",
                hint="free space on that disk, or pass another --out",
            ) from e
        finally:  # the write-ahead log of a failed write is no output either
            with contextlib.suppress(FileNotFoundError):
                wal.unlink()
    return Path(path)


def read_store(path: str | os.PathLike[str]) -> RunData:
    """Read a run store written by :func:`write_store`."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(
            f"run store {p} not found",
            hint="run `helm-plan analyze TRACE -o DIR` first; DIR must hold helm.duckdb",
        )
    try:
        con = duckdb.connect(str(p), read_only=True)
    except duckdb.Error as e:
        raise _unreadable(p, e) from e
    try:
        names = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables ORDER BY table_name"
            ).fetchall()
        ]
        if META_TABLE not in names:
            raise InputFileError(
                f"{p} has no {META_TABLE} table, so it is not a helm-plan run store",
                hint="pass a run directory written by `helm-plan analyze`",
            )
        meta = {
            k: json.loads(v)
            for k, v in con.execute(f"SELECT key, value_json FROM {META_TABLE}").fetchall()
        }
        tables = {n: con.table(n).pl() for n in names if n != META_TABLE}
    except duckdb.Error as e:  # a truncated or damaged file opens, then fails on its pages
        raise _unreadable(p, e) from e
    finally:
        con.close()
    version = str(meta.get("store_schema_version"))
    if version != STORE_SCHEMA_VERSION:
        raise InputFileError(
            f"{p} has store schema {version}, this helm-plan reads {STORE_SCHEMA_VERSION}",
            hint="rerun `helm-plan analyze` to rebuild the store",
        )
    meta.pop("store_schema_version", None)
    return RunData(tables=tables, meta=meta)


def _unreadable(p: Path, e: Exception) -> InputFileError:
    return InputFileError(
        f"{p} is not a readable DuckDB run store (truncated or damaged?): {str(e).splitlines()[0]}",
        hint="rerun `helm-plan analyze` to rebuild the run directory",
    )
