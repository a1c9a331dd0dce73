"""Amazon reviews: SASRec ``user item`` sequences and review CSV/JSON(L) with timestamps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from helm_plan.errors import IngestError
from helm_plan.ingest.movielens import interactions_with_ts
from helm_plan.ingest.readers import (
    factorize,
    field_count_error,
    first_line,
    open_text,
    read_lines,
    split_fields,
    to_float,
    to_int,
)
from helm_plan.ingest.sessions import Interactions

USER_FIELDS = ("reviewerid", "user_id", "userid", "user")
ITEM_FIELDS = ("parent_asin", "asin", "item_id", "itemid", "item")
TS_FIELDS = ("unixreviewtime", "timestamp", "sorttimestamp", "ts", "time")
#: Timestamps above this are taken as milliseconds (Amazon 2023 reviews use ms).
_MS_THRESHOLD = 1e11


def load(path: Path) -> Interactions:
    """Read any Amazon variant, detected from the suffix and the first line."""
    lines = read_lines(path)
    lineno, head = first_line(lines)
    stripped = head.lstrip()
    if path.suffix.lower() in (".json", ".jsonl", ".ndjson") or stripped[:1] in ("{", "["):
        return _reviews_json(path, stripped[:1] == "[")
    if "," in head:
        return _reviews_csv(path, lines, lineno, head)
    return _sequences(path, lines)


def _sequences(path: Path, lines: pl.DataFrame) -> Interactions:
    df = lines.filter(pl.col("line").is_not_null()).with_columns(
        pl.col("line").str.extract_all(r"\S+").alias("_f")
    )
    nf = df["_f"].list.len()
    if (nf < 2).any():
        i = int((nf < 2).arg_true()[0])
        variant = "user item pairs"
        raise field_count_error(path, df["lineno"][i], df["line"][i], int(nf[i]), 2, None, variant)
    variant = "pairs" if int(nf.max()) == 2 else "user-per-line"
    long = df.select(
        "lineno",
        pl.col("_f").list.first().alias("user"),
        pl.col("_f").list.slice(1).alias("item"),
    ).explode("item")
    user = to_int(long, "user", path=path, what="user id")
    item = to_int(long, "item", path=path, what="item id")
    return Interactions(
        user,
        item,
        None,
        np.arange(len(user), dtype=np.int64),
        variant,
        df.height if variant == "pairs" else len(user),
    )


def _pick(names: list[str], options: tuple[str, ...], role: str, path: Path) -> str:
    low = {n.lower(): n for n in names}
    for o in options:
        if o in low:
            return low[o]
    raise IngestError(
        f"{path}: no {role} field (looked for {', '.join(options)}; found {', '.join(names[:12])})",
        hint="rename the field, or use `ingest csv --map user=COL,item=COL,ts=COL`",
    )


def _reviews_json(path: Path, array: bool) -> Interactions:
    try:
        df = pl.read_json(path) if array else pl.read_ndjson(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, ValueError) as e:
        raise _json_problem(path, array, e) from e
    return _reviews_frame(path, df, "review JSON" if array else "review JSONL", first_row=1)


def _json_problem(path: Path, array: bool, err: Exception) -> IngestError:
    """Locate the first unparseable JSON line (error path only)."""
    if not array:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    return IngestError(
                        f"{path} line {lineno}: invalid JSON ({e.msg} at column {e.colno})",
                        hint="repair or delete the line (was the file cut off?)",
                    )
                if not isinstance(obj, dict):
                    return IngestError(
                        f"{path} line {lineno}: expected a JSON object per line",
                        hint="pass an Amazon reviews JSONL file or a `user item` pairs file",
                    )
    return IngestError(f"{path}: cannot read JSON: {err}", hint="pass JSON lines or one JSON array")


def _reviews_csv(path: Path, lines: pl.DataFrame, lineno: int, head: str) -> Interactions:
    if not _is_header(head):
        # headerless: user,item,rating,timestamp (ratings-only files) or user,item pairs
        n = len(head.split(","))
        if n == 2:
            df = split_fields(lines, ",", ["user", "item"], path=path, variant="user,item pairs")
            return _ids_frame(path, df, None, "pairs csv", df["lineno"].to_numpy())
        df = split_fields(
            lines, ",", ["user", "item", "rating", "ts"], path=path, variant="ratings csv"
        )
        ts = to_float(df, "ts", path=path, what="timestamp")
        return _ids_frame(path, df, ts, "ratings csv", df["lineno"].to_numpy())
    try:
        df = pl.read_csv(path, infer_schema=False, encoding="utf8-lossy")
    except pl.exceptions.PolarsError as e:
        raise IngestError(
            f"{path}: cannot parse review CSV: {str(e).splitlines()[0]}",
            hint="check quoting and that every line has as many fields as the header",
        ) from e
    return _reviews_frame(path, df, "review CSV", first_row=lineno + 1)


def _is_header(head: str) -> bool:
    low = [h.strip().lower() for h in head.split(",")]
    return any(h in USER_FIELDS + ITEM_FIELDS + TS_FIELDS for h in low)


def _reviews_frame(path: Path, df: pl.DataFrame, variant: str, *, first_row: int) -> Interactions:
    names = df.columns
    u, i, t = (
        _pick(names, USER_FIELDS, "user", path),
        _pick(names, ITEM_FIELDS, "item", path),
        _pick(names, TS_FIELDS, "timestamp", path),
    )
    df = df.select(
        (pl.int_range(pl.len(), dtype=pl.Int64) + first_row).alias("lineno"),
        pl.col(u).alias("user"),
        pl.col(i).alias("item"),
        pl.col(t).cast(pl.String).alias("ts"),
    )
    rows_read = df.height
    missing = df.filter(pl.any_horizontal(pl.all().is_null())).height
    df = df.drop_nulls()
    dropped = (("missing user, item or timestamp", missing),) if missing else ()
    if df.height == 0:
        raise IngestError(
            f"{path}: no row has a user, an item and a timestamp",
            hint="pass a reviews file with reviewerID, asin and unixReviewTime",
        )
    ts = to_float(df, "ts", path=path, what="timestamp")
    return _ids_frame(
        path, df, ts, variant, df["lineno"].to_numpy(), dropped=dropped, rows_read=rows_read
    )


def _ids_frame(
    path: Path,
    df: pl.DataFrame,
    ts: np.ndarray | None,
    variant: str,
    row: np.ndarray,
    *,
    dropped: tuple[tuple[str, int], ...] = (),
    rows_read: int | None = None,
) -> Interactions:
    """Integer ids are kept; string ids (reviewerID, asin) become dense ints by first appearance."""
    notes = []
    ids = []
    for col, what in (("user", "user id"), ("item", "item id")):
        s = df[col]
        if s.dtype.is_integer():
            ids.append(to_int(df, col, path=path, what=what))
            continue
        as_int = s.cast(pl.String).str.strip_chars().cast(pl.Int64, strict=False)
        if as_int.null_count() == 0 and (as_int >= 0).all():
            ids.append(as_int.to_numpy().astype(np.int64))
        else:
            ids.append(factorize(s.cast(pl.String).str.strip_chars()))
            notes.append(f"string {what}s mapped to dense integers by first appearance")
    if ts is None:
        return Interactions(ids[0], ids[1], None, row.astype(np.int64), variant, df.height)
    if len(ts) and np.nanmax(ts) > _MS_THRESHOLD:
        ts = ts / 1000.0
        notes.append("timestamps read as milliseconds")
    x = interactions_with_ts(ids[0], ids[1], ts, row, variant, dropped=dropped, rows_read=rows_read)
    return Interactions(
        x.user, x.item, x.ts_s, x.row, x.variant, x.rows_read, x.dropped, tuple(notes)
    )
