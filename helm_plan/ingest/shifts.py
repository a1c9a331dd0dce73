"""Mix shifts injected into an ingested log, inside the bursts of its re-timing regime.

See :mod:`helm_plan.mixshift` for the kinds. In each burst ``[a, e)`` holding
``n0`` of the log's requests, ``c0`` of them a user's first:

- requests are added at uniform times in the burst: ``x`` flash-crowd requests,
  each the only request of a new user whose items copy a first request of the
  log drawn at random, and ``y`` returning-wave requests, each by a user first
  seen before ``a`` (uniformly), whose items copy a revisit of the log drawn at
  random (a user's history is the concatenation of their requests, so every
  later request of theirs carries it). With ``n = n0 + x + y`` requests in the
  burst, ``y = w·n`` and ``x = c·n − c0`` (none when the log alone is colder
  than ``c``), so the burst's cold share is ``c`` and its returning-wave share
  ``w``, up to rounding (counts are rounded at random, so the expectation is
  exact);
- then each history item of a request in the burst is, with probability
  ``s``, replaced by a new item: one of a block of ids past every id of the log
  (a new block per burst, Zipf 1 over the block; its size is 1% of the log's
  distinct items, at least 16), so it is never seen before that burst.

Original requests keep their order and times; injected ones are merged in
time order (after the log's requests at an equal time). Seeded: the same log,
shifts and seed give the same trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helm_plan.ingest.sessions import take_lists
from helm_plan.mixshift import MixShift, shares
from helm_plan.synth import zipf_ranks


@dataclass(frozen=True)
class Injected:
    """A log with mix shifts injected, and what each burst got."""

    ts_s: np.ndarray
    """Arrival times, non-decreasing."""
    user: np.ndarray
    """User id per request."""
    offsets: np.ndarray
    """Start of each request's items (len requests + 1)."""
    items: np.ndarray
    """Items of every request, concatenated."""
    bursts: tuple[dict[str, float], ...]
    """Per burst: start_s, end_s, requests, added_cold, added_returning, cold_share,
    returning_share, new_item_share (the shares reached)."""


def _first(user: np.ndarray) -> np.ndarray:
    """True where a request is its user's first (requests in order)."""
    _, idx = np.unique(user, return_index=True)
    out = np.zeros(len(user), bool)
    out[idx] = True
    return out


def _count(rng: np.random.Generator, x: float) -> int:
    """``x`` rounded at random (expectation ``x``), at least 0."""
    x = max(x, 0.0)
    return int(np.floor(x) + (rng.random() < x - np.floor(x)))


def inject(
    ts_s: np.ndarray,
    user: np.ndarray,
    offsets: np.ndarray,
    items: np.ndarray,
    bursts: Sequence[tuple[float, float]],
    shifts: Sequence[MixShift],
    seed: int,
) -> Injected:
    """Inject ``shifts`` into the log's ``bursts`` (module docstring)."""
    sh = shares(shifts)
    c, w, s = (sh.get(k, 0.0) for k in ("flash-crowd", "returning-wave", "new-items"))
    rng = np.random.default_rng([seed, 0x5_41F7])
    ts, user = np.asarray(ts_s, np.float64), np.asarray(user, np.int64)
    offsets, items = np.asarray(offsets, np.int64), np.asarray(items, np.int64)
    first = _first(user)
    first_idx, revisit_idx = np.flatnonzero(first), np.flatnonzero(~first)
    next_user = int(user.max()) + 1 if len(user) else 0
    next_item = int(items.max()) + 1 if len(items) else 0
    block = max(16, round(0.01 * len(np.unique(items)))) if len(items) else 16
    add_t, add_u, add_src = [], [], []  # injected requests: time, user, request whose items
    report = []
    for a, e in sorted(bursts):
        inside = (ts >= a) & (ts < e)
        n0, c0 = int(inside.sum()), int((inside & first).sum())
        n = (n0 - c0) / (1.0 - c - w) if c * (n0 / max(1.0 - w, 1e-12)) > c0 else n0 / (1.0 - w)
        x = _count(rng, c * n - c0) if c > 0 else 0
        before = np.unique(user[(ts < a) & first])
        y = _count(rng, w * n) if w > 0 and len(before) else 0
        if x and len(first_idx):
            add_t.append(rng.uniform(a, e, x))
            add_u.append(next_user + np.arange(x))
            add_src.append(rng.choice(first_idx, x))
            next_user += x
        if y:
            src = revisit_idx if len(revisit_idx) else first_idx
            add_t.append(rng.uniform(a, e, y))
            add_u.append(rng.choice(before, y))
            add_src.append(rng.choice(src, y))
        report.append({"start_s": float(a), "end_s": float(e), "log_requests": n0,
                       "added_cold": x, "added_returning": y})  # fmt: skip
    if add_t:
        t2, u2, src = np.concatenate(add_t), np.concatenate(add_u), np.concatenate(add_src)
        o2, v2 = take_lists(offsets, items, src)
        all_t = np.concatenate([ts, t2])
        all_u = np.concatenate([user, u2])
        lens = np.concatenate([np.diff(offsets), np.diff(o2)])
        vals = np.concatenate([items, v2])
        off = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        order = np.lexsort((np.arange(len(all_t)), all_t))  # the log's first at a tie
        offsets, items = take_lists(off, vals, order)
        ts, user = all_t[order], all_u[order]
    items = items.copy()
    first = _first(user)
    for b, (a, e) in enumerate(sorted(bursts)):
        lo, hi = np.searchsorted(ts, [a, e], side="left")
        t_lo, t_hi = int(offsets[lo]), int(offsets[hi])
        if s > 0 and t_hi > t_lo:
            pick = np.flatnonzero(rng.random(t_hi - t_lo) < s) + t_lo
            items[pick] = next_item + zipf_ranks(rng.random(len(pick)), block, 1.0)
            next_item += block
            new = len(pick) / (t_hi - t_lo)
        else:
            new = 0.0
        n = hi - lo
        cold = float(first[lo:hi].mean()) if n else float("nan")
        added = report[b]["added_returning"]
        report[b] |= {"requests": int(n), "cold_share": cold, "new_item_share": new,
                      "returning_share": added / n if n else float("nan")}  # fmt: skip
    return Injected(ts, user, offsets, items, tuple(report))


__all__ = ["Injected", "inject"]
