"""Scaling a trace to the traffic being planned for (DESIGN.md, Capacity planning).

Two ways, stated in every plan and report:

- ``users`` (the default): add users. The trace is replayed ``K`` times over
  the same span, each copy ("clone") with disjoint user ids and its timeline
  shifted by ``c/K`` of the span (wrapping round the end), so the arrival rate
  grows K-fold while each user's requests, history and revisit gaps stay as
  observed, and the item catalogue (the EMB hot set) stays the same. A
  fractional ``K`` takes a seeded share of the users into the last clone.
- ``time``: compress time by ``K`` (every gap divided by K). The users and
  their histories are unchanged, but they come back K times sooner, which
  inflates KV reuse; use it to ask "this exact workload, faster".

``peak_qps`` sizes ``K`` so that the busiest window carries that rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from helm_plan import trace
from helm_plan.config import require_positive
from helm_plan.errors import ConfigError, TraceError


class ScaleBy(StrEnum):
    """How a trace is scaled to a target load."""

    USERS = "users"
    TIME = "time"


@dataclass(frozen=True)
class Scaling:
    """What scaling did to a trace (recorded in plans and reports)."""

    method: str
    """users or time."""
    factor: float
    """K: the arrival rate multiplier."""
    qps_before: float
    """Mean arrival rate before, requests per second."""
    qps_after: float
    """Mean arrival rate after."""
    peak_qps_before: float
    """Busiest window's rate before (at ``window_s``)."""
    peak_qps_after: float
    """Busiest window's rate after."""
    users_before: int
    """Distinct users before."""
    users_after: int
    """Distinct users after."""
    items: int
    """Distinct items (unchanged by either method)."""


MAX_FACTOR = 10_000.0
"""Largest scale factor accepted (beyond it a trace is a handful of requests stretched thin)."""


def peak_qps(ts_s: np.ndarray, window_s: float) -> float:
    """The busiest ``window_s`` window's arrival rate (the mean rate when the trace spans
    less than one window: a window longer than the trace would dilute its rate)."""
    if len(ts_s) == 0:
        return 0.0
    if len(ts_s) > 1 and float(ts_s[-1] - ts_s[0]) < window_s:
        return _mean_qps(np.asarray(ts_s))
    w = np.floor(np.asarray(ts_s) / window_s).astype(np.int64)
    return float(np.bincount(w - w.min()).max() / window_s)


def _mean_qps(ts: np.ndarray) -> float:
    span = float(ts[-1] - ts[0]) if len(ts) > 1 else 0.0
    return len(ts) / span if span > 0 else float("nan")


def factor_for(table: pa.Table, *, peak_qps_target: float, window_s: float) -> float:
    """K that brings the busiest ``window_s`` window to ``peak_qps_target`` (before rounding)."""
    return factor_for_ts(table.column("ts_s").to_numpy(), peak_qps_target=peak_qps_target,
                         window_s=window_s)  # fmt: skip


def factor_for_ts(ts_s: np.ndarray, *, peak_qps_target: float, window_s: float) -> float:
    """:func:`factor_for` from the arrival times alone."""
    require_positive("peak_qps", peak_qps_target)
    peak = peak_qps(ts_s, window_s)
    if not peak > 0:
        raise ConfigError("the trace has no requests to scale", hint="pass a non-empty trace")
    return peak_qps_target / peak


def check_scaling(factor: float, by: str, n_rows: int) -> None:
    """Refuse a factor or method :func:`scale` cannot apply (before any work)."""
    require_positive("scale factor", factor)
    if not np.isfinite(factor) or factor > MAX_FACTOR:
        raise ConfigError(f"scale factor must be finite and <= {MAX_FACTOR:g}, got {factor}",
                          hint="pass a smaller --scale or --peak-qps")  # fmt: skip
    if by not in set(ScaleBy):
        raise ConfigError(f"unknown scaling {by!r}", hint="use users or time")
    if n_rows == 0:
        raise ConfigError("the trace has no requests to scale", hint="pass a non-empty trace")


def scale(
    table: pa.Table, factor: float, *, by: str = "users", window_s: float = 10.0, seed: int = 0
) -> tuple[pa.Table, Scaling]:
    """``table`` scaled to ``factor`` times its arrival rate (see the module docstring)."""
    check_scaling(factor, by, table.num_rows)
    ts = table.column("ts_s").to_numpy()
    users = table.column("user_id").to_numpy()
    out = _by_time(table, factor) if by == ScaleBy.TIME else _by_users(table, factor, seed)
    items = pc.count_distinct(pc.list_flatten(table.column("new_items"))).as_py()
    info = scaling_info(str(by), factor, ts, out.column("ts_s").to_numpy(),
                        len(np.unique(users)), len(np.unique(out.column("user_id").to_numpy())),
                        int(items), window_s)  # fmt: skip
    return out, info


def scaling_info(
    by: str, factor: float, ts: np.ndarray, ts2: np.ndarray,
    users_before: int, users_after: int, items: int, window_s: float,
) -> Scaling:  # fmt: skip
    """What scaling arrivals ``ts`` to ``ts2`` did, as recorded in plans and reports."""
    return Scaling(
        method=by, factor=float(factor),
        qps_before=_mean_qps(ts), qps_after=_mean_qps(ts2),
        peak_qps_before=peak_qps(ts, window_s), peak_qps_after=peak_qps(ts2, window_s),
        users_before=int(users_before), users_after=int(users_after), items=items,
    )  # fmt: skip


def time_scaled(ts: np.ndarray, k: float) -> np.ndarray:
    """Arrival times with every gap divided by ``k`` (the first arrival kept)."""
    t0 = ts[0]
    return t0 + (ts - t0) / k


def _by_time(table: pa.Table, k: float) -> pa.Table:
    new = time_scaled(table.column("ts_s").to_numpy(), k)
    return table.set_column(table.column_names.index("ts_s"), "ts_s", pa.array(new))


def _by_users(table: pa.Table, k: float, seed: int) -> pa.Table:
    rows, t, uid = users_plan(table.column("ts_s").to_numpy(),
                              table.column("user_id").to_numpy().astype(np.int64), k, seed)  # fmt: skip
    out = table.take(pa.array(rows))
    out = out.set_column(out.column_names.index("ts_s"), "ts_s", pa.array(t))
    out = out.set_column(out.column_names.index("user_id"), "user_id", pa.array(uid))
    return trace.validate(out, source="scaled trace")


def users_plan(
    ts: np.ndarray, users: np.ndarray, k: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The users-scaled trace as (source row, arrival time, user id) per request, in its order.

    ``users`` are the original (int64) ids; clone ``c`` of user ``u`` is ``u + c * stride``.
    """
    t0 = float(ts[0])
    span = float(ts[-1] - t0)
    # one past the last arrival keeps a clone shifted by a full span apart from the original
    period = span + (span / max(len(ts) - 1, 1) if span > 0 else 1.0)
    stride = int(users.max()) + 1
    whole = int(np.floor(k))
    frac = k - whole
    parts, times, ids = [], [], []
    rng = np.random.default_rng(seed)
    uniq = np.unique(users)
    # K < 1 is one fractional clone however small (K <= 1e-12 used to leave none)
    n_clones = whole + (1 if frac > 1e-12 or whole == 0 else 0)
    if stride * n_clones >= 2**62:
        raise ConfigError("user ids too large to clone disjointly",
                          hint="remap user ids to a dense range first")  # fmt: skip
    for c in range(n_clones):
        if c < whole:
            rows = np.arange(len(ts))
        else:  # a seeded share of the users makes up the fractional clone
            keep = uniq[rng.random(len(uniq)) < frac]
            rows = np.flatnonzero(np.isin(users, keep))
        shift = period * c / k
        t = t0 + np.mod(ts[rows] - t0 + shift, period)
        parts.append(rows)
        times.append(t)
        ids.append(users[rows] + c * stride)
    rows = np.concatenate(parts)
    if len(rows) == 0:
        raise TraceError("scaled trace is empty (0 requests)",
                         hint=f"a factor of {k:g} keeps none of the users; pass a larger "
                              "--scale or --peak-qps")  # fmt: skip
    t = np.concatenate(times)
    uid = np.concatenate(ids)
    # stable by time, then clone: each user's own requests keep their order unless the
    # wrap splits the user's timeline (their tail then opens the span)
    order = np.lexsort((np.arange(len(t)), t))
    return rows[order], t[order], uid[order]
