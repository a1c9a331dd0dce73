"""Any CSV or parquet log with a column map ``user=COL,item=COL[,ts=COL]``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from helm_plan.errors import IngestError, InputFileError
from helm_plan.ingest.readers import head_line, to_float, to_int
from helm_plan.ingest.sessions import Interactions

_SEPARATORS = (",", "\t", ";", "|")


def load(path: Path, user_col: str, item_col: str, ts_col: str | None) -> Interactions:
    """Read the mapped columns; ids must be integers >= 0, ts numeric seconds (optional)."""
    wanted = [c for c in (user_col, item_col, ts_col) if c is not None]
    if path.suffix.lower() in (".parquet", ".pq"):
        df, variant, first_row = _parquet(path, wanted), "parquet", 1
    else:
        df, variant, first_row = _csv(path, wanted)
    if df.height == 0:
        raise IngestError(f"{path} has a header but no data rows", hint="pass a non-empty log")
    roles = {"user": user_col, "item": item_col} | ({"ts": ts_col} if ts_col else {})
    df = df.select(
        (pl.int_range(pl.len(), dtype=pl.Int64) + first_row).alias("lineno"),
        *[pl.col(c).cast(pl.String).alias(r) for r, c in roles.items()],
    )
    user = to_int(df, "user", path=path, what=f"user id (column {user_col!r})")
    item = to_int(df, "item", path=path, what=f"item id (column {item_col!r})")
    ts = to_float(df, "ts", path=path, what=f"timestamp (column {ts_col!r})") if ts_col else None
    row = df["lineno"].to_numpy().astype(np.int64)
    return Interactions(user, item, ts, row, variant, df.height)


def _parquet(path: Path, wanted: list[str]) -> pl.DataFrame:
    try:
        names = pl.read_parquet_schema(path)
    except (pl.exceptions.PolarsError, OSError, pa.ArrowException) as e:
        raise InputFileError(
            f"cannot read {path} as parquet: {e}", hint="pass a parquet or CSV file"
        ) from e
    _check_columns(path, list(names), wanted)
    return pl.read_parquet(path, columns=wanted)


def _csv(path: Path, wanted: list[str]) -> tuple[pl.DataFrame, str, int]:
    lineno, head = head_line(path)
    sep = next(
        (s for s in _SEPARATORS if set(wanted) <= {h.strip().strip('"') for h in head.split(s)}),
        None,
    )
    if sep is None:
        guess = max(_SEPARATORS, key=head.count)
        _check_columns(path, [h.strip() for h in head.split(guess)], wanted, lineno=lineno)
        sep = guess
    try:
        df = pl.read_csv(
            path,
            separator=sep,
            infer_schema=False,
            encoding="utf8-lossy",
            skip_rows=lineno - 1,
            columns=wanted,
        )
    except pl.exceptions.PolarsError as e:
        raise IngestError(
            f"{path}: cannot parse CSV: {str(e).splitlines()[0]}",
            hint="check quoting and that every line has as many fields as the header",
        ) from e
    name = {",": "csv", "\t": "tsv", ";": "csv (;)", "|": "csv (|)"}[sep]
    return df, name, lineno + 1


def _check_columns(path: Path, names: list[str], wanted: list[str], *, lineno: int = 0) -> None:
    where = f" line {lineno}" if lineno else ""
    for c in wanted:
        if c not in names:
            raise IngestError(
                f"{path}{where}: no column {c!r} (columns: {', '.join(names[:20])})",
                hint="fix --map user=COL,item=COL[,ts=COL] (names are case-sensitive)",
            )
