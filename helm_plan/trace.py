"""The canonical request trace: schema, validation, reading and writing.

One row per inference request, sorted by ``ts_s``. See README "Trace schema".
Validation names the row and column of the first violation.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from helm_plan import io
from helm_plan.errors import TraceError

SCHEMA_VERSION = "1"

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


def validate(table: pa.Table, *, source: str = "trace", row_offset: int = 0) -> pa.Table:
    """Check ``table`` against the canonical schema; return it with exact column types.

    Integer columns of a narrower or unsigned type are cast losslessly. Raises
    TraceError naming the first offending row and column.
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
                raise TraceError(f"{source} row {row}, column {name!r}: null id inside the list")
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
        out[name] = col
    ts = out["ts_s"].to_numpy()
    if not np.all(np.isfinite(ts)):
        row = int(np.argmin(np.isfinite(ts))) + row_offset
        raise TraceError(f"{source} row {row}, column 'ts_s': non-finite timestamp")
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
                f"{source} row {row}, column 'candidates': {lens[bad[0]]} ids but n_candidates={nc[bad[0]]}"
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
        raise TraceError(f"{source} column {name!r}: values do not fit {want}: {e}") from e


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int:
    arr = np.asarray(mask.to_numpy(zero_copy_only=False) if hasattr(mask, "to_numpy") else mask)
    return int(np.argmax(arr))


def read(path: str | os.PathLike[str], *, columns: list[str] | None = None) -> pa.Table:
    """Read and validate a canonical trace parquet file."""
    p = Path(path)
    if not p.exists():
        raise TraceError(
            f"trace file {p} not found", hint="check the path, or create one with `helm-plan synth`"
        )
    try:
        pf = pq.ParquetFile(p)
        table = pf.read(columns=columns)
    except (pa.ArrowInvalid, OSError) as e:
        raise TraceError(
            f"cannot read {p} as parquet: {e}",
            hint="convert CSV or JSON logs with `helm-plan ingest`",
        ) from e
    return validate(table, source=str(p))


def write(table: pa.Table, path: str | os.PathLike[str], provenance: dict[str, Any]) -> Path:
    """Validate and atomically write ``table`` with provenance in the file metadata."""
    table = validate(table)
    meta = {
        "helm_plan.schema_version": SCHEMA_VERSION,
        "helm_plan.provenance": json.dumps(provenance, sort_keys=True, default=str),
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
