"""Atomic file output: every file helm-plan writes goes through here.

A crash or SIGINT mid-write leaves either the old file or none, never a
half-written one: data goes to a temporary sibling, is fsynced, then renamed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import tomli_w

from helm_plan.errors import InputFileError


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: same resolved path (symlinks followed) or inode."""
    if a.resolve() == b.resolve():
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def ensure_not_input(
    out: str | os.PathLike[str] | None, *inputs: str | os.PathLike[str] | None
) -> None:
    """Raise InputFileError if output ``out`` is one of ``inputs`` (symlinks and hard links too).

    Every command calls this before it computes anything, so a run never
    writes over the file it reads (and fails at once, not after the work).
    Inputs that do not exist (e.g. a profile given by name) are skipped.
    """
    if out is None:
        return
    o = Path(out)
    for i in inputs:
        if i is not None and Path(i).exists() and _same_file(o, Path(i)):
            raise InputFileError(
                f"output {o} is the input file {i}",
                hint="write the output to a different path; helm-plan never overwrites its inputs",
            )


def ensure_writable(out: str | os.PathLike[str] | None) -> None:
    """Raise InputFileError now if ``out`` cannot be written (a folder, or no permission).

    The atomic write checks again; checking first fails a long run before its work.
    """
    if out is None:
        return
    dest = Path(out)
    if dest.is_dir():
        raise _write_error(dest, IsADirectoryError(21, "Is a directory"))
    parent = dest.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputFileError(
            f"cannot write {dest}: {parent} is a file, not a folder",
            hint="choose an output path inside a folder",
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _write_error(dest, PermissionError(13, "Permission denied"))


def check_output(
    out: str | os.PathLike[str] | None, *inputs: str | os.PathLike[str] | None
) -> None:
    """:func:`ensure_not_input` and :func:`ensure_writable`: what every writer checks first."""
    ensure_not_input(out, *inputs)
    ensure_writable(out)


def ensure_distinct_outputs(*outs: str | os.PathLike[str] | None) -> None:
    """Raise InputFileError if two outputs of one command are the same file."""
    seen: list[Path] = []
    for out in outs:
        if out is None:
            continue
        o = Path(out)
        for s in seen:
            if _same_file(o, s):
                raise InputFileError(
                    f"two outputs of this command are the same file {o}",
                    hint="give each output its own path",
                )
        seen.append(o)


def _write_error(dest: Path, e: OSError) -> InputFileError:
    if isinstance(e, IsADirectoryError) or dest.is_dir():
        return InputFileError(
            f"output path {dest} is a folder", hint="pass a file path (e.g. out.parquet) as -o"
        )
    return InputFileError(
        f"cannot write {dest}: {e.strerror or e}",
        hint="choose a writable output path (check the folder's permissions and free space)",
    )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success.

    File-system problems (a folder at ``path``, no write permission, a busy
    target) raise InputFileError naming the path; nothing is left behind.
    """
    dest = Path(path)
    if dest.is_dir():
        raise _write_error(dest, IsADirectoryError(21, "Is a directory"))
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputFileError(
            f"cannot create output folder {dest.parent}: {e.strerror}",
            hint="choose a writable output path",
        ) from e
    try:
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{dest.name}.", suffix=suffix or ".tmp", dir=dest.parent
        )
    except OSError as e:
        raise _write_error(dest, e) from e
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
        try:
            os.replace(tmp, dest)
        except OSError as e:
            raise _write_error(dest, e) from e
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


def jsonable(v: Any) -> Any:
    """``v`` with NaN/inf as None, numpy scalars and arrays as Python values, paths as strings.

    ``json.dumps`` would write the invalid tokens ``NaN``/``Infinity``; every JSON
    helm-plan writes or prints goes through this first.
    """
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        v = dataclasses.asdict(v)
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if hasattr(v, "tolist") and not isinstance(v, str | bytes):  # numpy scalar or array
        return jsonable(v.tolist())
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_json(path: str | os.PathLike[str], obj: Any, *, strict: bool = False) -> Path:
    """Atomically write ``obj`` as indented JSON (``strict``: valid JSON, NaN as null)."""
    if strict:
        return write_text(path, json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")
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


def create_exclusive(path: str | os.PathLike[str], data: bytes) -> None:
    """Create ``path`` holding ``data``; FileExistsError if it exists (an atomic claim)."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def remove(path: str | os.PathLike[str]) -> None:
    """Delete ``path`` if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
