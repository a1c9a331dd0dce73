"""Taobao UserBehavior CSV: ``user,item,category,behavior,unix_ts``, no header."""

from __future__ import annotations

from pathlib import Path

from helm_plan.ingest.config import TAOBAO_BEHAVIORS
from helm_plan.ingest.movielens import interactions_with_ts
from helm_plan.ingest.readers import read_lines, split_fields, to_float, to_int
from helm_plan.ingest.sessions import Interactions

VARIANT = "UserBehavior.csv"


def load(path: Path, behaviors: tuple[str, ...] = TAOBAO_BEHAVIORS) -> Interactions:
    """Read UserBehavior rows, keeping only ``behaviors`` (others are counted as dropped)."""
    lines = read_lines(path)
    df = split_fields(
        lines, ",", ["user", "item", "category", "behavior", "ts"], path=path, variant=VARIANT
    )
    user = to_int(df, "user", path=path, what="user id")
    item = to_int(df, "item", path=path, what="item id")
    to_int(df, "category", path=path, what="category id")
    ts = to_float(df, "ts", path=path, what="timestamp")
    beh = df["behavior"].str.to_lowercase()
    known = beh.is_in(list(TAOBAO_BEHAVIORS)).to_numpy()
    wanted = beh.is_in(list(behaviors)).to_numpy()
    dropped: list[tuple[str, int]] = []
    if (n_unknown := int((~known).sum())) > 0:
        dropped.append((f"unknown behavior (not {'/'.join(TAOBAO_BEHAVIORS)})", n_unknown))
    for b in TAOBAO_BEHAVIORS:
        if b not in behaviors:
            c = int((beh == b).sum())
            if c:
                dropped.append((f"behavior {b!r} not kept", c))
    keep = known & wanted
    row = df["lineno"].to_numpy()
    return interactions_with_ts(
        user[keep],
        item[keep],
        ts[keep],
        row[keep],
        VARIANT,
        dropped=tuple(dropped),
        rows_read=df.height,
    )
