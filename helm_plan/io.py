"""Atomic file output: every file helm-plan writes goes through here.

A crash or SIGINT mid-write leaves either the old file or none, never a
half-written one: data goes to a temporary sibling, is fsynced, then renamed.
The one other file is a spill (:func:`spill_array`): an array that lives in an
unlinked file instead of memory, so nothing is left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import mmap
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
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


PathArg = str | os.PathLike[str]


def check_outputs(outputs: Mapping[str, PathArg | None], inputs: Iterable[PathArg | None]) -> None:
    """Refuse outputs that would lose data or fail late, before any work is done.

    ``outputs`` maps each output's name (its option, e.g. ``-o``) to its path (None: not
    asked for). Raises InputFileError when an output is one of ``inputs`` (resolved paths,
    symlinks and hard links included), cannot be written (a folder, a path under a file, no
    permission), or is the same file as another output. Inputs that do not exist (e.g. a
    profile given by name) are skipped.
    """
    ins = [Path(i) for i in inputs if i is not None]
    given = [(name, Path(o)) for name, o in outputs.items() if o is not None]
    for name, o in given:
        for i in ins:
            if i.exists() and _same_file(o, i):
                raise InputFileError(
                    f"{name} {o} is the input file {i}",
                    hint="write the output to a different path; helm-plan never overwrites its inputs",
                )
        ensure_writable(o)
    for k, (name, o) in enumerate(given):
        for other, p in given[:k]:
            if _same_file(o, p):
                raise InputFileError(f"{other} and {name} are the same file {o}",
                                     hint="give each output its own path")  # fmt: skip


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


FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""Errors of a disk (or quota, or file size limit) that cannot take the output."""


def _write_error(dest: Path, e: OSError) -> InputFileError:
    if e.errno in FULL_DISK:
        return InputFileError(
            f"no room to write {dest}: {e.strerror or os.strerror(e.errno or 0)} (nothing was "
            "written; a previous file there is kept)",
            hint=f"free space on the disk holding {dest.parent}, or write the output to "
            "another disk",
        )
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
        try:
            yield tmp
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        except OSError as e:
            if e.errno in FULL_DISK:  # a full disk while writing: one line, not a traceback
                raise _write_error(dest, e) from e
            raise
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


# ---------------------------------------------------------------- arrays spilled to disk
#
# A trace's history tokens (4 bytes each: 3.7 GB at 10M requests) are read a
# user's recent slice at a time, so they can live in a file mapping: the
# kernels read them as any array, and release_spilled() drops the mapped pages
# between windows, so the process holds a window's pages, not the trace's
# (the page cache keeps them while memory allows, and re-reads them after).


class _File:
    """An open spill file: its fd names it for other processes while any mapping of it lives."""

    def __init__(self, fd: int) -> None:
        self.path = f"/proc/{os.getpid()}/fd/{fd}"
        weakref.finalize(self, os.close, fd)


@dataclasses.dataclass(frozen=True)
class _Spill:
    mm: weakref.ref[mmap.mmap]
    address: int
    size: int
    path: str  # how another process of this user maps it: /proc/PID/fd/N of this one


_SPILLS: list[_Spill] = []
_FILES: weakref.WeakValueDictionary[tuple[int, int], _File] = weakref.WeakValueDictionary()
"""Open spill files by (device, inode): every mapping of one file names it by one fd."""
_SPILL_LOCK = threading.Lock()


def _hold(_: object) -> None:
    """A finalizer that only holds its argument until it runs."""


def _register(mm: mmap.mmap, fd: int) -> np.ndarray:
    """Register ``mm`` (a mapping of ``fd``'s file); ``fd`` is kept open or closed here."""
    st = os.fstat(fd)
    with _SPILL_LOCK:
        f = _FILES.get((st.st_dev, st.st_ino))
        if f is None:
            f = _FILES[(st.st_dev, st.st_ino)] = _File(fd)
        else:
            os.close(fd)  # the file is open already: its first fd names it
        weakref.finalize(mm, _hold, f)  # f (its fd) stays while mm lives
        buf = np.frombuffer(mm, np.uint8)
        _SPILLS[:] = [x for x in _SPILLS if x.mm() is not None]
        _SPILLS.append(_Spill(weakref.ref(mm), int(buf.ctypes.data), len(mm), f.path))
    return buf


def spill_array(n: int, dtype: Any, directory: str | os.PathLike[str]) -> np.ndarray:
    """An uninitialised array of ``n`` items of ``dtype`` in a file under ``directory``.

    The file is unlinked at once (the mapping keeps it until the last array over
    it goes, so a crash leaves nothing), and its blocks are reserved up front: a
    full disk is this error, not a SIGBUS on the first write past the room.
    Other processes map it by :func:`spill_mappings`' path (Linux ``/proc``).
    """
    dt = np.dtype(dtype)
    size = int(n) * dt.itemsize
    if size == 0:
        return np.empty(0, dt)
    d = Path(directory)
    if not Path("/proc/self/fd").is_dir():
        raise InputFileError(
            "spilling arrays to disk needs Linux's /proc (workers map the file through it)",
            hint="run without spilling the tokens to disk",
        )
    try:
        fd, p = tempfile.mkstemp(prefix=".helm-plan-spill-", suffix=".bin", dir=d)
    except OSError as e:
        raise _spill_error(d, e) from e
    try:
        os.unlink(p)
        free = shutil.disk_usage(d).free
        if size > free:
            raise InputFileError(
                f"spilling {size / 2**20:,.0f} MiB to {d} but it has {free / 2**20:,.0f} MiB free",
                hint="point the spill at a disk with room, or free some",
            )
        os.posix_fallocate(fd, 0, size)
        mm = _random_access(mmap.mmap(fd, size))
    except OSError as e:
        os.close(fd)
        raise _spill_error(d, e) from e
    except BaseException:
        os.close(fd)
        raise
    return _register(mm, fd).view(dt)


def _spill_error(d: Path, e: OSError) -> InputFileError:
    return InputFileError(f"cannot spill to {d}: {e.strerror or e}",
                          hint="point the spill at a writable folder with free space")  # fmt: skip


def _random_access(mm: mmap.mmap) -> mmap.mmap:
    """``mm`` with read-ahead off: a fault maps its own page, not the read-ahead's folio."""
    # the kernels touch a user's slice here and there; a fault's read-ahead (8 MiB on some
    # disks) fills large folios that the fault then maps whole, and writes back whole
    mm.madvise(mmap.MADV_RANDOM)
    return mm


def map_spill(path: str) -> mmap.mmap:
    """Map a spill another process created (its :func:`spill_mappings` path), registered for
    :func:`release_spilled` in this process too."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as e:
        raise InputFileError(f"cannot map the spilled array {path}: {e.strerror}",
                             hint="the process that spilled it has ended") from e  # fmt: skip
    try:
        mm = _random_access(mmap.mmap(fd, 0))
    except BaseException:
        os.close(fd)
        raise
    # the file stays open while this mapping lives: the driver drops its load's arrays once
    # they are shared, and a publication that named the file by then must still open
    _register(mm, fd)
    return mm


def spill_mappings() -> list[tuple[int, int, str]]:
    """(address, bytes, path) of every live spill mapping of this process."""
    with _SPILL_LOCK:
        return [(x.address, x.size, x.path) for x in _SPILLS if x.mm() is not None]


def release_spilled() -> None:
    """Drop this process's mapped pages of every spilled array (their data stays in the file)."""
    with _SPILL_LOCK:
        live = [m for x in _SPILLS if (m := x.mm()) is not None]
    for m in live:  # a shared file mapping: dirty pages go to the page cache, not away
        with contextlib.suppress(ValueError):  # closed meanwhile
            m.madvise(mmap.MADV_DONTNEED)


def spans(start: int, stop: int, size: int) -> Iterator[tuple[int, int]]:
    """``[start, stop)`` in consecutive pieces of at most ``size``; after each piece's work
    (when the loop asks for the next) the spilled arrays' mapped pages are dropped."""
    for i in range(start, stop, max(int(size), 1)):
        yield i, min(i + size, stop)
        release_spilled()


def is_spilled(a: np.ndarray) -> bool:
    """Whether ``a`` lies in a spill mapping of this process."""
    if a.size == 0:
        return False
    lo = int(a.ctypes.data)
    return any(s <= lo < s + n for s, n, _ in spill_mappings())
