"""Scaling a trace to the traffic being planned for (DESIGN.md, Capacity planning).

The traffic model is stated in every plan and report (:data:`TRAFFIC_MODELS`):

- ``users`` (the default): add users, keep the bursts. The trace is replayed
  ``K`` times on its own timeline, each copy ("clone") with disjoint user ids
  and one constant offset drawn uniformly in ``[0, jitter)`` (clone 0 keeps
  the trace's times), so at every instant the arrival rate is ``K`` times the
  trace's and its bursts coincide; each user's requests, history and revisit
  gaps stay as observed, new users are distinct users (their own KV, their
  own first requests), and the item catalogue (the EMB hot set) stays the
  same. A fractional ``K`` takes a seeded share of the users into the last
  clone (the share of a larger K is a superset, so the load grows with K).
  The jitter (at most :data:`CLONE_JITTER_S`, and a tenth of the window)
  only keeps K copies of a request from arriving at the same instant.
- ``users-shifted``: the same clones, each shifted by ``c/K`` of the span
  (wrapping round the end). Their bursts no longer coincide, so the planned
  traffic is smoother than K times the trace: an optimistic model (it
  under-provisions a bursty trace), kept for comparison.
- ``time``: compress time by ``K`` (every gap divided by K). The users and
  their histories are unchanged, but they come back K times sooner, which
  inflates KV reuse; use it to ask "this exact workload, faster".

``peak_qps`` plans for a busiest window of exactly that rate: :func:`solve_factor`
searches K (the planned peak is monotone in K under ``users``) until the
planned trace's busiest window is within :data:`PEAK_TOLERANCE` of the target.
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
    """How a trace is scaled to a target load (the traffic model)."""

    USERS = "users"
    USERS_SHIFTED = "users-shifted"
    TIME = "time"


TRAFFIC_MODELS: dict[str, str] = {
    ScaleBy.USERS: "the trace's users cloned K times on the trace's own timeline (each clone "
    "offset by under {jitter:g} s): at every instant the planned rate is K times the trace's, "
    "so its bursts are planned at full height",
    ScaleBy.USERS_SHIFTED: "the trace's users cloned K times, each clone shifted by a share of "
    "the span: the clones' bursts no longer coincide, so the planned traffic is smoother than K "
    "times the trace (optimistic for a bursty trace)",
    ScaleBy.TIME: "the trace's time compressed K times: the same users come back K times sooner "
    "(KV reuse is inflated)",
}
"""One sentence per traffic model, as the first screen and plan.json state it."""

CLONE_JITTER_S = 1.0
"""Largest offset of a clone under ``users`` scaling, seconds (also at most window_s / 10)."""
PEAK_TOLERANCE = 0.005
"""--peak-qps: the planned busiest window is within this share of the target (when the trace's
granularity allows: one request more or less in that window must be a smaller step)."""


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
    peak_qps_target: float | None = None
    """The busiest window's rate asked for (--peak-qps), or None (--scale or no scaling)."""
    jitter_s: float = 0.0
    """users: the largest clone offset, seconds (0 for the other models)."""

    @property
    def assumption(self) -> str:
        """The traffic model in one sentence (first screen, plan.json)."""
        return TRAFFIC_MODELS[self.method].format(jitter=self.jitter_s)


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
        raise ConfigError(f"unknown scaling {by!r}", hint=f"use {', '.join(ScaleBy)}")
    if n_rows == 0:
        raise ConfigError("the trace has no requests to scale", hint="pass a non-empty trace")


def clone_jitter(window_s: float) -> float:
    """The largest clone offset under ``users`` scaling for ``window_s`` windows."""
    return min(CLONE_JITTER_S, window_s / 10.0)


def scale(
    table: pa.Table, factor: float, *, by: str = "users", window_s: float = 10.0, seed: int = 0
) -> tuple[pa.Table, Scaling]:
    """``table`` scaled to ``factor`` times its arrival rate (see the module docstring)."""
    check_scaling(factor, by, table.num_rows)
    ts = table.column("ts_s").to_numpy()
    users = table.column("user_id").to_numpy()
    if by == ScaleBy.TIME:
        out = _by_time(table, factor)
    else:
        out = _by_users(table, factor, seed, by, window_s)
    items = pc.count_distinct(pc.list_flatten(table.column("new_items"))).as_py()
    info = scaling_info(str(by), factor, ts, out.column("ts_s").to_numpy(),
                        len(np.unique(users)), len(np.unique(out.column("user_id").to_numpy())),
                        int(items), window_s)  # fmt: skip
    return out, info


def scaling_info(
    by: str, factor: float, ts: np.ndarray, ts2: np.ndarray,
    users_before: int, users_after: int, items: int, window_s: float,
    peak_qps_target: float | None = None,
) -> Scaling:  # fmt: skip
    """What scaling arrivals ``ts`` to ``ts2`` did, as recorded in plans and reports."""
    return Scaling(
        method=by, factor=float(factor),
        qps_before=_mean_qps(ts), qps_after=_mean_qps(ts2),
        peak_qps_before=peak_qps(ts, window_s), peak_qps_after=peak_qps(ts2, window_s),
        users_before=int(users_before), users_after=int(users_after), items=items,
        peak_qps_target=peak_qps_target,
        jitter_s=clone_jitter(window_s) if by == ScaleBy.USERS else 0.0,
    )  # fmt: skip


def time_scaled(ts: np.ndarray, k: float) -> np.ndarray:
    """Arrival times with every gap divided by ``k`` (the first arrival kept)."""
    t0 = ts[0]
    return t0 + (ts - t0) / k


def _by_time(table: pa.Table, k: float) -> pa.Table:
    new = time_scaled(table.column("ts_s").to_numpy(), k)
    return table.set_column(table.column_names.index("ts_s"), "ts_s", pa.array(new))


def _by_users(table: pa.Table, k: float, seed: int, by: str, window_s: float) -> pa.Table:
    rows, t, uid = users_plan(table.column("ts_s").to_numpy(),
                              table.column("user_id").to_numpy().astype(np.int64), k, seed,
                              by=by, window_s=window_s)  # fmt: skip
    out = table.take(pa.array(rows))
    out = out.set_column(out.column_names.index("ts_s"), "ts_s", pa.array(t))
    out = out.set_column(out.column_names.index("user_id"), "user_id", pa.array(uid))
    return trace.validate(out, source="scaled trace")


def _clone_draws(seed: int, clone: int, n: int) -> tuple[float, np.ndarray]:
    """Clone ``clone``'s offset draw in [0, 1) and one uniform draw per distinct user.

    Keyed by (seed, clone) alone, so a clone's offset and a user's draw do not depend on K:
    the fractional clone of a larger K keeps a superset of a smaller K's users.
    """
    rng = np.random.default_rng([seed, clone])
    return float(rng.random()), rng.random(n)


def users_plan(
    ts: np.ndarray,
    users: np.ndarray,
    k: float,
    seed: int,
    *,
    by: str = ScaleBy.USERS,
    window_s: float = 10.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The users-scaled trace as (source row, arrival time, user id) per request, in its order.

    ``users`` are the original (int64) ids; clone ``c`` of user ``u`` is ``u + c * stride``.
    ``by`` is ``users`` (clones on the trace's timeline, offset under the jitter) or
    ``users-shifted`` (clones shifted by ``c/K`` of the span, wrapping round).
    """
    t0 = float(ts[0])
    span = float(ts[-1] - t0)
    stride = int(users.max()) + 1
    whole = int(np.floor(k))
    frac = k - whole
    # K < 1 is one fractional clone however small (K <= 1e-12 used to leave none)
    n_clones = whole + (1 if frac > 1e-12 or whole == 0 else 0)
    if stride * n_clones >= 2**62:
        raise ConfigError("user ids too large to clone disjointly",
                          hint="remap user ids to a dense range first")  # fmt: skip
    uniq = np.unique(users)
    shifted = by == ScaleBy.USERS_SHIFTED
    # one past the last arrival keeps a clone shifted by a full span apart from the original
    period = span + (span / max(len(ts) - 1, 1) if span > 0 else 1.0)
    jitter = clone_jitter(window_s)
    rng = np.random.default_rng(seed)  # users-shifted's fractional share (as it always drew)
    parts, times, ids = [], [], []
    for c in range(n_clones):
        offset, draws = _clone_draws(seed, c, len(uniq)) if not shifted else (0.0, None)
        if c < whole:
            rows = np.arange(len(ts))
        else:  # a seeded share of the users makes up the fractional clone
            keep = uniq[(rng.random(len(uniq)) if shifted else draws) < frac]
            rows = np.flatnonzero(np.isin(users, keep))
        if shifted:
            t = t0 + np.mod(ts[rows] - t0 + period * c / k, period)
        else:
            t = ts[rows] + (offset * jitter if c > 0 else 0.0)
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
    # stable by time, then clone: each user's own requests keep their order (under
    # users-shifted, unless the wrap splits the user's timeline: their tail opens the span)
    order = np.lexsort((np.arange(len(t)), t))
    return rows[order], t[order], uid[order]


def planned_times(
    ts: np.ndarray, users: np.ndarray, k: float, *, by: str, window_s: float, seed: int
) -> np.ndarray:
    """The arrival times of the trace scaled by ``k`` (what :func:`users_plan` or
    :func:`time_scaled` gives), without building the trace."""
    if by == ScaleBy.TIME:
        return time_scaled(ts, k)
    return users_plan(ts, users, k, seed, by=by, window_s=window_s)[1]


def solve_factor(
    ts: np.ndarray,
    users: np.ndarray,
    peak_qps_target: float,
    *,
    by: str,
    window_s: float,
    seed: int,
    max_steps: int = 40,
) -> float:
    """K whose planned trace has a busiest ``window_s`` window of ``peak_qps_target`` req/s.

    The first guess is the target over the trace's own peak; the planned peak is then
    bracketed and bisected on K (monotone under ``users``: clones only add requests) until it
    is within :data:`PEAK_TOLERANCE` of the target, or the bracket cannot narrow further
    (the closest K is returned; the plan reports the peak achieved beside the one asked).
    """
    k0 = factor_for_ts(ts, peak_qps_target=peak_qps_target, window_s=window_s)
    k0 = min(k0, MAX_FACTOR)

    def peak(k: float) -> float:
        return peak_qps(planned_times(ts, users, k, by=by, window_s=window_s, seed=seed),
                        window_s)  # fmt: skip

    def miss(p: float) -> float:
        return abs(p - peak_qps_target) / peak_qps_target

    best = (miss(p0 := peak(k0)), k0)
    if best[0] <= PEAK_TOLERANCE:
        return k0
    lo, hi = (k0, None) if p0 < peak_qps_target else (None, k0)
    for _ in range(max_steps):
        if lo is None:
            k = hi / 2.0
        elif hi is None:
            k = min(lo * 2.0, MAX_FACTOR)
        else:
            k = (lo + hi) / 2.0
        p = peak(k)
        best = min(best, (miss(p), k))
        if best[0] <= PEAK_TOLERANCE:
            break
        if p < peak_qps_target:
            if k >= MAX_FACTOR:
                break
            lo = k
        else:
            hi = k
        if lo is not None and hi is not None and hi - lo <= 1e-9 * hi:
            break
    return best[1]
