"""The canonical request trace: schema, validation, reading and writing.

One row per inference request, sorted by ``ts_s``. See README "Trace schema".
Validation names the row and column of the first violation.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from helm_plan import io
from helm_plan.errors import HelmPlanNote, TraceError

SCHEMA_VERSION = "1"
#: Largest ``n_candidates`` of one request. A ranking stage scores thousands of
#: candidates; a bound keeps a corrupt value (2^31 - 1) from allocating gigabytes.
MAX_N_CANDIDATES = 1 << 20
#: Rows a streamed pass over a trace file reads at a time (:func:`iter_batches`,
#: :func:`validate_file`): on a 1.24M-request trace (64 candidates, 111M history tokens)
#: validating in 2^20-row batches took 5.9 s and 2.0 GB, in 2^16 1.6 s and 0.5 GB.
STREAM_BATCH_ROWS = 1 << 16
#: A trace whose first request is at least this many seconds after 0 carries absolute
#: (e.g. unix-epoch) times; it is rebased to start at 0 on read, with a note.
REBASE_MIN_S = 1e6
#: Parquet metadata key recording the offset subtracted from ``ts_s`` on read.
TS_OFFSET_KEY = b"helm_plan.ts_offset_s"

#: Required columns and their arrow types.
REQUIRED: dict[str, pa.DataType] = {
    "ts_s": pa.float64(),
    "user_id": pa.int64(),
    "new_items": pa.list_(pa.int64()),
    "n_candidates": pa.int32(),
}
#: Optional columns and their arrow types.
OPTIONAL: dict[str, pa.DataType] = {
    "candidates": pa.list_(pa.int64()),
    "latency_ms": pa.float64(),
}
SCHEMA = pa.schema([pa.field(k, v, nullable=False) for k, v in REQUIRED.items()])


def empty_table(with_candidates: bool = False) -> pa.Table:
    """An empty table with the canonical schema."""
    fields = dict(REQUIRED)
    if with_candidates:
        fields["candidates"] = OPTIONAL["candidates"]
    return pa.table({k: pa.array([], type=t) for k, t in fields.items()})


def make_table(
    ts_s: np.ndarray,
    user_id: np.ndarray,
    new_items_offsets: np.ndarray,
    new_items_values: np.ndarray,
    n_candidates: np.ndarray,
    *,
    candidates_offsets: np.ndarray | None = None,
    candidates_values: np.ndarray | None = None,
    latency_ms: np.ndarray | None = None,
) -> pa.Table:
    """Build a canonical table from flat numpy arrays (offsets have len = rows + 1)."""
    cols: dict[str, pa.Array] = {
        "ts_s": pa.array(np.asarray(ts_s, dtype=np.float64)),
        "user_id": pa.array(np.asarray(user_id, dtype=np.int64)),
        "new_items": pa.ListArray.from_arrays(
            pa.array(np.asarray(new_items_offsets, dtype=np.int32)),
            pa.array(np.asarray(new_items_values, dtype=np.int64)),
        ),
        "n_candidates": pa.array(np.asarray(n_candidates, dtype=np.int32)),
    }
    if candidates_offsets is not None and candidates_values is not None:
        cols["candidates"] = pa.ListArray.from_arrays(
            pa.array(np.asarray(candidates_offsets, dtype=np.int32)),
            pa.array(np.asarray(candidates_values, dtype=np.int64)),
        )
    if latency_ms is not None:
        cols["latency_ms"] = pa.array(np.asarray(latency_ms, dtype=np.float64))
    return pa.table(cols)


def validate(
    table: pa.Table,
    *,
    source: str = "trace",
    row_offset: int = 0,
    prev_ts_s: float | None = None,
) -> pa.Table:
    """Check ``table`` against the canonical schema; return it with exact column types.

    Integer columns of a narrower or unsigned type are cast losslessly. Raises
    TraceError naming the first offending row and column. This is the one
    validation every command uses (:func:`read` for whole tables,
    :func:`validate_file` streaming a file in batches: ``row_offset`` and
    ``prev_ts_s`` carry the position and the last timestamp of earlier batches).
    """
    if table.num_rows == 0 and row_offset == 0:
        raise TraceError(
            f"{source} is empty (0 requests)",
            hint="ingest or synth a trace with at least one request",
        )
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise TraceError(
            f"{source} is missing column {missing[0]!r}",
            hint=f"a trace needs columns {', '.join(REQUIRED)}; convert logs with `helm-plan ingest`",
        )
    out: dict[str, pa.Array] = {}
    for name, want in {**REQUIRED, **OPTIONAL}.items():
        if name not in table.column_names:
            continue
        col = table.column(name)
        col = _cast(col, want, name, source)
        nulls = col.null_count
        if nulls:
            row = _first_true(pc.is_null(col)) + row_offset
            raise TraceError(
                f"{source} row {row}, column {name!r}: null value", hint="fill or drop null rows"
            )
        if pa.types.is_list(want):
            flat = pc.list_flatten(col)
            if flat.null_count:
                idx = _first_true(pc.is_null(flat))
                row = pc.list_parent_indices(col)[idx].as_py() + row_offset
                raise TraceError(
                    f"{source} row {row}, column {name!r}: null id inside the list",
                    hint="drop null ids from the lists",
                )
            if len(flat) and pc.min(flat).as_py() < 0:
                parents = pc.list_parent_indices(col)
                idx = _first_true(pc.less(flat, 0))
                row = parents[idx].as_py() + row_offset
                raise TraceError(
                    f"{source} row {row}, column {name!r}: negative id {flat[idx].as_py()}",
                    hint="ids must be >= 0",
                )
        elif name in ("user_id", "n_candidates") and len(col) and pc.min(col).as_py() < 0:
            row = _first_true(pc.less(col, 0)) + row_offset
            raise TraceError(
                f"{source} row {row}, column {name!r}: negative value {col[row - row_offset].as_py()}",
                hint=f"{name} must be >= 0",
            )
        if name == "n_candidates" and len(col) and pc.max(col).as_py() > MAX_N_CANDIDATES:
            row = _first_true(pc.greater(col, MAX_N_CANDIDATES)) + row_offset
            raise TraceError(
                f"{source} row {row}, column 'n_candidates': {col[row - row_offset].as_py()} "
                f"exceeds the bound {MAX_N_CANDIDATES:,}",
                hint="a request scores at most about a million candidates; fix the column",
            )
        out[name] = col
    ts = out["ts_s"].to_numpy()
    if not np.all(np.isfinite(ts)):
        row = int(np.argmin(np.isfinite(ts))) + row_offset
        raise TraceError(
            f"{source} row {row}, column 'ts_s': non-finite timestamp {ts[row - row_offset]}",
            hint="timestamps are finite seconds from trace start; fix or drop the row",
        )
    if len(ts) and ts.min() < 0:
        row = int(np.argmax(ts < 0)) + row_offset
        raise TraceError(
            f"{source} row {row}, column 'ts_s': negative timestamp {ts[row - row_offset]}",
            hint="timestamps are seconds from trace start (>= 0); shift them to start at 0",
        )
    if prev_ts_s is not None and len(ts) and ts[0] < prev_ts_s:
        raise TraceError(
            f"{source} row {row_offset}, column 'ts_s': timestamps not sorted ({ts[0]} after {prev_ts_s})",
            hint="sort the trace by ts_s",
        )
    if len(ts) > 1:
        bad = np.flatnonzero(np.diff(ts) < 0)
        if len(bad):
            row = int(bad[0]) + 1 + row_offset
            raise TraceError(
                f"{source} row {row}, column 'ts_s': timestamps not sorted ({ts[row - row_offset]} after {ts[row - row_offset - 1]})",
                hint="sort the trace by ts_s",
            )
    if "candidates" in out:
        lens = pc.list_value_length(out["candidates"]).to_numpy(zero_copy_only=False)
        nc = out["n_candidates"].to_numpy()
        bad = np.flatnonzero(lens != nc)
        if len(bad):
            row = int(bad[0]) + row_offset
            raise TraceError(
                f"{source} row {row}, column 'candidates': {lens[bad[0]]} ids but n_candidates={nc[bad[0]]}",
                hint="make each candidates list as long as its n_candidates",
            )
    return pa.table(out)


def _cast(col: pa.ChunkedArray, want: pa.DataType, name: str, source: str) -> pa.ChunkedArray:
    have = col.type
    if have == want:
        return col
    ok = False
    if pa.types.is_list(want):
        ok = (pa.types.is_list(have) or pa.types.is_large_list(have)) and pa.types.is_integer(
            have.value_type
        )
    elif pa.types.is_integer(want):
        ok = pa.types.is_integer(have)
    elif pa.types.is_floating(want):
        ok = pa.types.is_floating(have) or pa.types.is_integer(have)
    if not ok:
        raise TraceError(
            f"{source} column {name!r} has type {have}, expected {want}",
            hint="rewrite the trace with `helm-plan ingest csv` or fix the column type",
        )
    try:
        return col.cast(want, safe=True)
    except (pa.ArrowInvalid, OverflowError) as e:
        raise TraceError(
            f"{source} column {name!r}: values do not fit {want}: {e}",
            hint=f"rewrite {name} with values that fit {want}",
        ) from e


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int:
    arr = np.asarray(mask.to_numpy(zero_copy_only=False) if hasattr(mask, "to_numpy") else mask)
    return int(np.argmax(arr))


def _open(p: Path, *, stream: bool = False) -> pq.ParquetFile:
    if not p.exists():
        raise TraceError(
            f"trace file {p} not found", hint="check the path, or create one with `helm-plan synth`"
        )
    if p.is_dir():
        raise TraceError(f"trace path {p} is a folder", hint="pass the trace's .parquet file")
    try:
        if stream:
            # unbuffered, a reader loads a whole column chunk (a row group's hundreds of MiB
            # of tokens) before the first batch; buffered, memory follows the batch
            return pq.ParquetFile(p, pre_buffer=False, buffer_size=1 << 20)
        return pq.ParquetFile(p)
    except (pa.ArrowInvalid, OSError) as e:
        raise _unreadable(p, e) from e


def rebase_offset(first_ts_s: float) -> float:
    """Seconds to subtract so a trace with absolute times starts at 0 (0.0 if it need not)."""
    return float(first_ts_s) if first_ts_s >= REBASE_MIN_S else 0.0


def _note_rebase(source: str, offset: float) -> None:
    if offset:
        warnings.warn(
            f"{source}: timestamps start at {offset:.0f} s (absolute, e.g. unix epoch); "
            "rebased to start at 0",
            HelmPlanNote,
            stacklevel=3,
        )


def read(path: str | os.PathLike[str], *, columns: list[str] | None = None) -> pa.Table:
    """Read and validate a canonical trace parquet file.

    A trace whose first ``ts_s`` is at least :data:`REBASE_MIN_S` (absolute
    times, e.g. unix epoch) comes back rebased to start at 0; the offset is
    recorded in the table's schema metadata under :data:`TS_OFFSET_KEY` and
    stated in a :class:`~helm_plan.errors.HelmPlanNote` warning (the CLI
    prints it as a ``note:`` line).
    """
    p = Path(path)
    pf = _open(p)
    try:
        # row group by row group, kept as chunks: ``pf.read`` joins each column into one
        # array, which held the read's buffers and the join at once (the 1.49M-request trace:
        # 2,069 MiB peak and 1,435 MiB allocated for a 1,070 MiB table; by row group 1,287
        # and 1,080)
        n_groups = pf.metadata.num_row_groups
        table = (pa.concat_tables([pf.read_row_group(i, columns=columns) for i in range(n_groups)])
                 if n_groups > 1 else pf.read(columns=columns))  # fmt: skip
    except (pa.ArrowInvalid, OSError) as e:
        raise _unreadable(p, e) from e
    table = validate(table, source=str(p))
    if "ts_s" not in table.column_names or table.num_rows == 0:
        return table
    offset = rebase_offset(table.column("ts_s")[0].as_py())
    _note_rebase(str(p), offset)
    return _rebased(table, offset)


def _rebased(table: pa.Table, offset: float) -> pa.Table:
    """``table`` with ``offset`` subtracted from ``ts_s`` and recorded in its metadata."""
    if not offset:
        return table
    i = table.column_names.index("ts_s")
    table = table.set_column(i, "ts_s", pc.subtract(table.column("ts_s"), offset))
    meta = dict(table.schema.metadata or {})
    meta[TS_OFFSET_KEY] = repr(offset).encode()
    return table.replace_schema_metadata(meta)


def _unreadable(p: Path, e: Exception) -> TraceError:
    return TraceError(
        f"cannot read {p} as parquet: {e}",
        hint="convert CSV or JSON logs with `helm-plan ingest`",
    )


def ts_offset(table: pa.Table) -> float:
    """The offset :func:`read` subtracted from ``ts_s`` (0.0 if none)."""
    raw = (table.schema.metadata or {}).get(TS_OFFSET_KEY)
    return float(raw) if raw else 0.0


def iter_batches(
    path: str | os.PathLike[str],
    *,
    columns: list[str] | None = None,
    batch_rows: int = STREAM_BATCH_ROWS,
    check: bool = True,
) -> Iterator[pa.Table]:
    """Stream a trace file in batches of ``batch_rows`` rows (memory bounded by a batch).

    With ``check`` each batch is validated (:func:`validate`, row numbers and the
    sort order carried across batches), cast to the canonical types and rebased
    like :func:`read` (a :class:`~helm_plan.errors.HelmPlanNote` states the offset
    once). Without it the batches come as stored: for a second pass over columns
    a checked pass has already read.
    """
    p = Path(path)
    pf = _open(p, stream=True)
    rows, last, offset = 0, None, 0.0
    try:
        # one decoding thread: on 2 cores it is faster, and per-column decoders running
        # side by side held about 70 MiB more (1.2M-request trace)
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False):
            if batch.num_rows == 0:
                continue
            t = pa.Table.from_batches([batch])
            if check:
                t = validate(t, source=str(p), row_offset=rows, prev_ts_s=last)
                ts = t.column("ts_s")
                if rows == 0:
                    offset = rebase_offset(ts[0].as_py())
                    _note_rebase(str(p), offset)
                last = ts[len(ts) - 1].as_py()
                t = _rebased(t, offset)
            rows += batch.num_rows
            yield t
    except (pa.ArrowInvalid, OSError) as e:
        raise _unreadable(p, e) from e
    if rows == 0 and check:
        validate(pf.schema_arrow.empty_table(), source=str(p))  # names the missing column, or empty


def column_names(path: str | os.PathLike[str]) -> list[str]:
    """The columns a trace file holds (read from its footer)."""
    return list(_open(Path(path)).schema_arrow.names)


@dataclass(frozen=True)
class FileCheck:
    """What :func:`validate_file` learnt while streaming a trace file."""

    rows: int
    """Requests in the file."""
    ts_offset_s: float
    """Seconds to subtract from ``ts_s`` to start at 0 (absolute times), else 0.0."""


def validate_file(
    path: str | os.PathLike[str], *, batch_rows: int = STREAM_BATCH_ROWS
) -> FileCheck:
    """Validate a trace file with :func:`validate`, batch by batch (memory bounded by a batch:
    ``analyze``'s inspect stage runs this beside the loaded trace, where a 2^20-row batch was
    the run's peak)."""
    rows, offset = 0, 0.0
    for t in iter_batches(path, batch_rows=batch_rows):
        offset = offset if rows else ts_offset(t)
        rows += t.num_rows
    return FileCheck(rows=rows, ts_offset_s=offset)


def write(
    table: pa.Table,
    path: str | os.PathLike[str],
    provenance: dict[str, Any],
    *,
    metadata: dict[str, str] | None = None,
) -> Path:
    """Validate and atomically write ``table`` with provenance (and ``metadata``, e.g. the
    regime spans) in the file metadata."""
    table = validate(table)
    meta = {
        "helm_plan.schema_version": SCHEMA_VERSION,
        "helm_plan.provenance": json.dumps(provenance, sort_keys=True, default=str),
        **(metadata or {}),
    }
    return io.write_parquet(path, table, metadata=meta, row_group_size=1 << 20)


def provenance(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The provenance dict stored in a trace file ({} if none)."""
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(b"helm_plan.provenance")
    return json.loads(raw) if raw else {}


def sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes (streamed)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
