"""Atomic file output: every file helm-plan writes goes through here.

A crash or SIGINT mid-write leaves either the old file or none, never a
half-written one: data goes to a temporary sibling, is fsynced, then renamed.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import tomli_w

from helm_plan.errors import InputFileError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success."""
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputFileError(
            f"cannot create output folder {dest.parent}: {e.strerror}",
            hint="choose a writable output path",
        ) from e
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{dest.name}.", suffix=suffix or ".tmp", dir=dest.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600; give the final file the usual umask-derived mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Atomically write ``data`` to ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Atomically write UTF-8 ``text`` to ``path``."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON."""
    return write_text(
        path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"
    )


def write_toml(path: str | os.PathLike[str], obj: dict[str, Any]) -> Path:
    """Atomically write ``obj`` as TOML."""
    return write_text(path, tomli_w.dumps(obj))


def write_parquet(
    path: str | os.PathLike[str],
    table: pa.Table,
    *,
    metadata: dict[str, str] | None = None,
    row_group_size: int | None = None,
) -> Path:
    """Atomically write an arrow table as parquet, merging ``metadata`` into its schema."""
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    with atomic_path(path, suffix=".parquet.tmp") as tmp:
        pq.write_table(table, tmp, row_group_size=row_group_size, compression="zstd")
    return Path(path)


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@contextlib.contextmanager
def parquet_writer(
    path: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    metadata: dict[str, str] | None = None,
    compression: str = "zstd",
) -> Iterator[pq.ParquetWriter]:
    """Stream row groups to ``path`` atomically: write a temporary sibling, rename on success.

    ``metadata`` is merged into the schema's file-level key-value metadata.
    """
    if metadata:
        merged = dict(schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        schema = schema.with_metadata(merged)
    with atomic_path(path, suffix=".parquet.tmp") as tmp:
        writer = pq.ParquetWriter(tmp, schema, compression=compression)
        try:
            yield writer
        finally:
            writer.close()
