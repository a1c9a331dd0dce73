"""Fast, line-exact reading of delimited logs with polars.

Every file is read as one string per line (the row index is the line number
minus one), split into fields and cast with polars expressions. A problem is
reported with the file, the 1-based line number, the offending text and a fix.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO

import numpy as np
import polars as pl

from helm_plan.errors import IngestError, InputFileError

_SEP_NAMES = {"\t": "tab", ",": "comma", "::": "'::'", ";": "semicolon", "|": "pipe", None: "space"}


def check_readable(path: str | os.PathLike[str]) -> Path:
    """Raise InputFileError unless ``path`` is a readable, non-empty regular file."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(f"file {p} not found", hint="check the path")
    if p.is_dir():
        raise InputFileError(f"{p} is a folder, not a file", hint="pass the log file itself")
    try:
        with open(p, "rb") as fh:
            fh.read(1)
    except OSError as e:
        raise InputFileError(
            f"cannot read {p}: {e.strerror}", hint="check the file's permissions"
        ) from e
    if p.stat().st_size == 0:
        raise IngestError(f"{p} is empty (0 bytes)", hint="pass a log with at least one row")
    return p


def is_gzip(path: Path) -> bool:
    """Whether ``path`` starts with the gzip magic bytes (polars reads such files transparently)."""
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_text(path: Path) -> IO[str]:
    """``path`` opened as text: gunzipped if compressed, a UTF-8 BOM dropped, bad bytes replaced."""
    if is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="replace")
    return open(path, encoding="utf-8-sig", errors="replace")


def ensure_text(path: Path) -> None:
    """Raise IngestError if the start of ``path`` (decompressed) is binary, not a text log."""
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as fh:
            head = fh.read(4096)
    except (OSError, EOFError) as e:
        raise IngestError(
            f"{path} is a damaged gzip file: {e}", hint="re-download or re-compress the log"
        ) from e
    bad = sum(1 for b in head if b < 9 or 13 < b < 32 or b == 127)
    if b"\x00" in head or bad > len(head) // 20:
        raise IngestError(
            f"{path} is not a text log: its first bytes are binary data",
            hint="pass the log itself as plain text (or gzip of plain text), not another format",
        )


def read_lines(path: Path) -> pl.DataFrame:
    """All lines of ``path`` as columns ``line`` (str, null if blank) and ``lineno`` (1-based)."""
    ensure_text(path)
    try:
        df = pl.read_csv(
            path,
            has_header=False,
            separator="\x1f",
            quote_char=None,
            schema={"line": pl.String},
            encoding="utf8-lossy",
        )
    except (pl.exceptions.PolarsError, OSError) as e:
        raise InputFileError(
            f"cannot read {path}: {str(e).splitlines()[0]}",
            hint="pass a text log file (plain or gzip)",
        ) from e
    df = df.with_columns(
        pl.col("line").str.strip_chars_end("\r\n").alias("line"),
        (pl.int_range(pl.len(), dtype=pl.Int64) + 1).alias("lineno"),
    )
    df = df.with_columns(
        pl.when(pl.col("line").str.strip_chars() == "")
        .then(None)
        .otherwise(pl.col("line"))
        .alias("line")
    )
    if df["line"].null_count() == df.height:
        raise IngestError(
            f"{path} is empty (no data lines)", hint="pass a log with at least one row"
        )
    return df


def head_line(path: Path) -> tuple[int, str]:
    """The first non-blank line of ``path`` as (lineno, text), reading only that far."""
    ensure_text(path)
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                return lineno, line.rstrip("\r\n")
    raise IngestError(f"{path} is empty (no data lines)", hint="pass a log with at least one row")


def first_line(lines: pl.DataFrame) -> tuple[int, str]:
    """The first non-blank line as (lineno, text)."""
    row = lines.filter(pl.col("line").is_not_null()).row(0)
    return int(row[1]), str(row[0])


def split_fields(
    lines: pl.DataFrame,
    sep: str | None,
    names: list[str],
    *,
    path: Path,
    variant: str,
    exact: bool = True,
) -> pl.DataFrame:
    """Split non-blank lines on ``sep`` (None: any whitespace) into string columns ``names``.

    Raises IngestError on a line with too few fields (truncated line or wrong
    delimiter) or, when ``exact``, too many.
    """
    df = lines.filter(pl.col("line").is_not_null())
    if sep is None:
        parts = pl.col("line").str.extract_all(r"\S+")
    else:
        parts = pl.col("line").str.strip_chars(" ").str.split(sep)
    df = df.with_columns(parts.alias("_f")).with_columns(pl.col("_f").list.len().alias("_n"))
    n = len(names)
    bad = df.filter((pl.col("_n") < n) | (pl.col("_n") > n) if exact else (pl.col("_n") < n))
    if bad.height:
        lineno, text, got = bad.row(0, named=True)["lineno"], bad["line"][0], bad["_n"][0]
        raise field_count_error(path, lineno, text, got, n, sep, variant)
    return df.select(
        "lineno",
        *[pl.col("_f").list.get(i).str.strip_chars().alias(c) for i, c in enumerate(names)],
    )


def field_count_error(
    path: Path, lineno: int, text: str, got: int, want: int, sep: str | None, variant: str
) -> IngestError:
    """The message for a line with the wrong number of fields."""
    sname = _SEP_NAMES.get(sep, repr(sep))
    shown = _show(text)
    if got < want:
        other = [s for s in ("\t", ",", "::", ";", "|", " ") if s != sep and s in text]
        if got == 1 and other:
            found = _SEP_NAMES.get(other[0], "space") if other[0] != " " else "space"
            return IngestError(
                f"{path} line {lineno}: wrong delimiter: expected {want} {sname}-separated "
                f"fields for {variant}, the line {shown} looks {found}-separated",
                hint=f"rewrite the file with {sname} delimiters or use the matching kind/variant",
            )
        return IngestError(
            f"{path} line {lineno}: truncated line: {got} of {want} {sname}-separated fields for {variant} in {shown}",
            hint="repair or delete the incomplete line (was the file cut off?)",
        )
    return IngestError(
        f"{path} line {lineno}: {got} {sname}-separated fields, expected {want} for {variant} in {shown}",
        hint="check the delimiter and remove stray separators",
    )


def _show(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def to_int(
    df: pl.DataFrame, col: str, *, path: Path, what: str, allow_negative: bool = False
) -> np.ndarray:
    """Cast string column ``col`` to int64; non-numeric or negative values raise IngestError."""
    s = df[col]
    v = s.cast(pl.Int64, strict=False)
    bad = v.is_null()
    if bad.any():
        i = int(bad.arg_true()[0])
        raw = s[i]
        raise IngestError(
            f"{path} line {df['lineno'][i]}: non-numeric {what} {raw!r}"
            if raw is not None and raw != ""
            else f"{path} line {df['lineno'][i]}: missing {what}",
            hint=f"{what}s must be integers; check the delimiter and the column order",
        )
    arr = v.to_numpy()
    if not allow_negative and len(arr) and arr.min() < 0:
        i = int(np.argmax(arr < 0))
        raise IngestError(
            f"{path} line {df['lineno'][i]}: negative {what} {int(arr[i])}",
            hint=f"{what}s must be >= 0",
        )
    return arr.astype(np.int64, copy=False)


def to_float(df: pl.DataFrame, col: str, *, path: Path, what: str) -> np.ndarray:
    """Cast string column ``col`` to float64; non-numeric values raise IngestError."""
    s = df[col]
    v = s.cast(pl.Float64, strict=False)
    bad = v.is_null() | ~v.is_finite().fill_null(True)
    if bad.any():
        i = int(bad.arg_true()[0])
        raise IngestError(
            f"{path} line {df['lineno'][i]}: non-numeric {what} {s[i]!r}",
            hint=f"{what} must be a number (unix seconds)",
        )
    return v.to_numpy().astype(np.float64, copy=False)


def factorize(values: pl.Series) -> np.ndarray:
    """Dense int64 codes of ``values`` in order of first appearance."""
    codes = values.to_frame("v").select(pl.col("v").rank("dense").alias("r"))["r"]
    # rank gives sorted order; remap to first-appearance order
    r = codes.to_numpy().astype(np.int64) - 1
    first = np.full(int(r.max()) + 1 if len(r) else 0, len(r), np.int64)
    np.minimum.at(first, r, np.arange(len(r)))
    remap = np.empty_like(first)
    remap[np.argsort(first, kind="stable")] = np.arange(len(first))
    return remap[r]
