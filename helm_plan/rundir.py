"""One run directory belongs to one run at a time, and to one trace (issue: mixed outputs).

:func:`claim` takes ``DIR/.lock`` with an exclusive create (the atomic
primitive every filesystem offers) before a run writes anything; a second run
into the same directory fails at once, naming the process that holds it. A
lock left by a process that no longer exists (killed, machine rebooted) is
taken over. ``DIR/run.json`` records which trace (its SHA-256) and which
configuration the directory holds; a run of a **different** trace into a
directory that already holds one is refused, so ``summary.json``,
``helm.duckdb`` and ``labels.parquet`` can never describe two traces. The
same trace with other settings may rerun there (its stages are keyed by their
inputs, and every output is replaced atomically).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helm_plan import io
from helm_plan.errors import ConfigError

LOCK = ".lock"
RECORD = "run.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _take_lock(path: Path) -> None:
    body = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode()
    for _ in range(2):
        try:
            io.create_exclusive(path, body)
        except FileExistsError:
            try:
                held = json.loads(path.read_text("utf-8"))
                pid, host = int(held["pid"]), str(held["host"])
            except (OSError, ValueError, KeyError, TypeError):
                pid, host = -1, ""
            if host == socket.gethostname() and pid > 0 and not _alive(pid):
                io.remove(path)  # stale: its process is gone
                continue
            raise ConfigError(
                f"run directory {path.parent} is in use by another run "
                f"(pid {pid} on {host or 'an unknown host'})",
                hint="wait for it to finish or pass another --out",
            ) from None
        return
    raise ConfigError(f"cannot take the lock {path}", hint="remove it if no run is using it")


@contextlib.contextmanager
def claim(out_dir: str | Path, trace_sha256: str, record: dict[str, Any]) -> Iterator[Path]:
    """Hold ``out_dir`` for one run of the trace with ``trace_sha256``; release it on exit."""
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create run directory {d}: {e.strerror}",
                          hint="pass a writable --out") from e  # fmt: skip
    if not d.is_dir():
        raise ConfigError(f"{d} is not a directory", hint="pass a directory to --out")
    lock = d / LOCK
    _take_lock(lock)
    try:
        rec = d / RECORD
        if rec.is_file():
            try:
                prev = json.loads(rec.read_text("utf-8")).get("trace_sha256")
            except (OSError, ValueError, AttributeError):
                prev = None
            if prev and prev != trace_sha256:
                raise ConfigError(
                    f"run directory {d} holds the run of another trace (sha256 {prev[:12]}...)",
                    hint="pass another --out, or remove the directory to reuse it",
                )
        io.write_json(rec, {"trace_sha256": trace_sha256, **record})
        yield d
    finally:
        io.remove(lock)
