"""From interactions to requests: de-duplication, sessions, interleaving, replication.

All steps are vectorised numpy over flat arrays; a request's ``new_items`` is
a slice ``items[offsets[i]:offsets[i+1]]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class Interactions:
    """One row per (user, item) interaction of a source log, in file order."""

    user: np.ndarray
    """User id per interaction, int64 >= 0."""
    item: np.ndarray
    """Item id per interaction, int64 >= 0."""
    ts_s: np.ndarray | None
    """Timestamp per interaction, float64 seconds; None when the log only has an order."""
    row: np.ndarray
    """Position in the source (line number or record index), int64, for stable ties."""
    variant: str
    """Detected format variant."""
    rows_read: int
    """Data rows read from the source."""
    dropped: tuple[tuple[str, int], ...] = ()
    """Rows dropped while reading, as (reason, count)."""
    notes: tuple[str, ...] = ()
    """Remarks about the source."""


@dataclass(frozen=True)
class Requests:
    """Requests in arrival order, before re-timing."""

    user: np.ndarray
    """User id per request, int64."""
    order_t: np.ndarray
    """Source time (seconds) or position per request, float64, non-decreasing."""
    first_row: np.ndarray
    """Earliest source row of the request, int64 (tie-break)."""
    offsets: np.ndarray
    """Start of each request's new items in ``items`` (len = requests + 1), int64."""
    items: np.ndarray
    """New item ids of all requests, concatenated, int64."""
    real_time: bool
    """Whether ``order_t`` holds real serving arrival seconds worth keeping by default."""

    @property
    def n(self) -> int:
        return len(self.user)


def take_lists(
    offsets: np.ndarray, values: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reorder a list column (offsets, values) by row indices ``idx``."""
    lens = np.diff(offsets)[idx]
    new_off = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(lens, out=new_off[1:])
    src = np.repeat(offsets[:-1][idx] - new_off[:-1], lens) + np.arange(new_off[-1])
    return new_off, values[src]


def drop_duplicates(x: Interactions) -> Interactions:
    """Drop rows repeating an earlier row's (user, item, ts) exactly; no-op without timestamps."""
    if x.ts_s is None or len(x.user) < 2:
        return x
    order = np.lexsort((x.row, x.item, x.ts_s, x.user))
    u, t, it = x.user[order], x.ts_s[order], x.item[order]
    dup = np.zeros(len(u), bool)
    dup[1:] = (u[1:] == u[:-1]) & (t[1:] == t[:-1]) & (it[1:] == it[:-1])
    n_dup = int(dup.sum())
    if not n_dup:
        return x
    keep = np.sort(order[~dup])
    return Interactions(
        x.user[keep],
        x.item[keep],
        x.ts_s[keep],
        x.row[keep],
        x.variant,
        x.rows_read,
        (*x.dropped, ("duplicate (user, item, timestamp)", n_dup)),
        x.notes,
    )


def sessionize(x: Interactions, gap_s: float) -> Requests:
    """One request per user session: interactions closer than ``gap_s`` join one request.

    A request arrives at its session's last interaction and carries the
    session's items (ordered by time, then file position). Requests are
    ordered by arrival, ties by their earliest source row.
    """
    assert x.ts_s is not None
    order = np.lexsort((x.row, x.ts_s, x.user))
    u, t, r, it = x.user[order], x.ts_s[order], x.row[order], x.item[order]
    n = len(u)
    new = np.ones(n, bool)
    new[1:] = (u[1:] != u[:-1]) | (t[1:] - t[:-1] > gap_s)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n)
    offsets = np.append(starts, n).astype(np.int64)
    req_user = u[starts]
    req_t = t[ends - 1]
    req_row = np.minimum.reduceat(r, starts) if n else r[:0]
    idx = np.lexsort((req_row, req_t))
    off, vals = take_lists(offsets, it, idx)
    return Requests(req_user[idx], req_t[idx], req_row[idx], off, vals, real_time=False)


def is_user_grouped(user: np.ndarray) -> bool:
    """Whether each user's rows form one contiguous block."""
    if len(user) < 2:
        return True
    runs = 1 + int(np.count_nonzero(user[1:] != user[:-1]))
    return runs == pl.Series(user).n_unique()


def order_only(x: Interactions, *, interleave: bool, seed: int) -> tuple[Requests, str | None]:
    """One request per interaction for a log without timestamps.

    The file order is kept, except that a log whose users are contiguous
    blocks (so file order across users means nothing) is merged uniformly at
    random (seeded), keeping each user's own order.
    """
    n = len(x.user)
    note = None
    by_row = np.argsort(x.row, kind="stable")
    user = x.user[by_row]
    if interleave and n > 1 and is_user_grouped(user) and np.any(user[1:] != user[:-1]):
        rng = np.random.default_rng(seed)
        # block b's rows get block b's share of sorted uniform keys: group id + sorted keys
        gid = np.concatenate([[0], np.cumsum(user[1:] != user[:-1])]).astype(np.float64)
        keys = np.sort(gid + rng.random(n))  # sorted within each block, blocks stay in order
        idx = by_row[np.argsort(keys - gid, kind="stable")]
        note = (
            "no timestamps and users are contiguous blocks: users were interleaved "
            f"by a seeded random merge (seed {seed}) that keeps each user's order"
        )
    else:
        idx = by_row
    offsets = np.arange(n + 1, dtype=np.int64)
    order_t = np.arange(n, dtype=np.float64)
    return (
        Requests(x.user[idx], order_t, x.row[idx], offsets, x.item[idx], real_time=False),
        note,
    )


def replicate(req: Requests, k: int) -> Requests:
    """Clone every user ``k`` times in all with id offsets; items are unchanged.

    Clone ``c`` shifts each user's whole timeline by ``c/k`` of the span
    (wrapping the user's first request into the span), so clones interleave
    evenly and each user's own order is kept.
    """
    if k <= 1 or req.n == 0:
        return req
    t0 = float(req.order_t.min())
    span = float(req.order_t.max()) - t0
    period = span * (1 + 1e-9) + 1e-9
    stride = int(req.user.max()) + 1
    first_t = np.full(stride, np.inf)
    np.minimum.at(first_t, req.user, req.order_t)
    f = first_t[req.user]
    users, times, rows, clone = (
        [req.user],
        [req.order_t],
        [req.first_row],
        [np.zeros(req.n, np.int64)],
    )
    for c in range(1, k):
        start = t0 + np.mod(f - t0 + c * span / k, period)
        users.append(req.user + c * stride)
        times.append(req.order_t - f + start)
        rows.append(req.first_row)
        clone.append(np.full(req.n, c, np.int64))
    user, t, row, cl = (np.concatenate(a) for a in (users, times, rows, clone))
    lens = np.tile(np.diff(req.offsets), k)
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    items = np.tile(req.items, k)
    idx = np.lexsort((row, cl, t))
    off, vals = take_lists(offsets, items, idx)
    return Requests(user[idx], t[idx], row[idx], off, vals, req.real_time)
