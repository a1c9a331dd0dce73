"""MovieLens ratings in its four shapes: u.data, ratings.dat, ratings.csv, RecBole .inter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from helm_plan.errors import IngestError
from helm_plan.ingest.readers import first_line, read_lines, split_fields, to_float, to_int
from helm_plan.ingest.sessions import Interactions

VARIANTS = (
    "u.data (tab, no header)",
    "ratings.dat ('::')",
    "ratings.csv (header userId,movieId,rating,timestamp, any case)",
    "RecBole .inter (tab, header user_id:token item_id:token ...)",
)


def load(path: Path) -> Interactions:
    """Read a MovieLens ratings file of any variant (detected from its first line)."""
    lines = read_lines(path)
    lineno, head = first_line(lines)
    if ":token" in head or ":float" in head or path.suffix == ".inter":
        return _with_header(path, lines, lineno, head, "\t", "recbole-inter", strip_types=True)
    if "::" in head:
        return _positional(path, lines, "::", "ratings.dat")
    if "," in head:
        if not _is_numeric(head.split(",")[0]):
            return _with_header(path, lines, lineno, head, ",", "ratings.csv")
        return _positional(path, lines, ",", "ratings.csv (no header)")
    if "\t" in head:
        return _positional(path, lines, "\t", "u.data")
    raise IngestError(
        f"{path} line {lineno}: not a MovieLens ratings file: {head[:60]!r}",
        hint="expected one of " + "; ".join(VARIANTS),
    )


def _is_numeric(s: str) -> bool:
    try:
        float(s.strip())
    except ValueError:
        return False
    return True


def _positional(path: Path, lines: pl.DataFrame, sep: str, variant: str) -> Interactions:
    df = split_fields(lines, sep, ["user", "item", "rating", "ts"], path=path, variant=variant)
    return _finish(path, df, variant)


def _with_header(
    path: Path,
    lines: pl.DataFrame,
    header_line: int,
    head: str,
    sep: str,
    variant: str,
    *,
    strip_types: bool = False,
) -> Interactions:
    raw = [h.strip() for h in head.split(sep)]
    names = [(h.split(":")[0] if strip_types else h).lower() for h in raw]
    body = lines.filter(pl.col("lineno") > header_line)
    if body["line"].null_count() == body.height:
        raise IngestError(f"{path} has a header but no data rows", hint="pass a non-empty log")
    want = {"user": ("user_id", "userid"), "item": ("item_id", "movieid", "itemid")}
    want["ts"] = ("timestamp", "ts")
    cols = {}
    for role, options in want.items():
        hit = next((n for n in names if n in options), None)
        if hit is None:
            raise IngestError(
                f"{path} line {header_line}: header {head[:80]!r} has no {role} column "
                f"(looked for {', '.join(options)})",
                hint="expected one of " + "; ".join(VARIANTS),
            )
        cols[role] = hit
    uniq = [f"c{i}" for i in range(len(names))]
    df = split_fields(body, sep, uniq, path=path, variant=variant)
    df = df.select(
        "lineno", *[pl.col(uniq[names.index(c)]).alias(role) for role, c in cols.items()]
    )
    return _finish(path, df, variant)


def _finish(path: Path, df: pl.DataFrame, variant: str) -> Interactions:
    user = to_int(df, "user", path=path, what="user id")
    item = to_int(df, "item", path=path, what="item id")
    ts = to_float(df, "ts", path=path, what="timestamp")
    return interactions_with_ts(user, item, ts, df["lineno"].to_numpy(), variant)


def interactions_with_ts(
    user: np.ndarray,
    item: np.ndarray,
    ts: np.ndarray,
    row: np.ndarray,
    variant: str,
    *,
    dropped: tuple[tuple[str, int], ...] = (),
    rows_read: int | None = None,
) -> Interactions:
    """Interactions from a log with unix timestamps, dropping non-positive timestamps."""
    bad = ~(ts > 0)
    n_bad = int(bad.sum())
    n = len(user) if rows_read is None else rows_read
    if n_bad:
        keep = ~bad
        user, item, ts, row = user[keep], item[keep], ts[keep], row[keep]
        dropped = (*dropped, ("non-positive timestamp", n_bad))
    return Interactions(
        user.astype(np.int64, copy=False),
        item.astype(np.int64, copy=False),
        ts.astype(np.float64, copy=False),
        row.astype(np.int64, copy=False),
        variant,
        n,
        dropped,
    )
