"""Synthetic canonical traces: the ``helm-plan synth`` generator.

The generator is fully vectorised numpy; nothing loops per request in Python.
It streams in time order, so memory does not grow with the request count:

1. **Plan** (:func:`plan`, O(1)): the rate shape
   (:func:`helm_plan.regimes.shape`), the cold probabilities, burst hot sets,
   the item bijection and the cut of ``[0, duration_s]`` into generation
   segments of ``SEGMENT_REQUESTS`` expected requests (config-determined).
2. **Requests** (:mod:`helm_plan.synth.users`), one segment at a time with
   its own generator and carried state of O(users). Each request is either
   *cold* (a user's first request in the trace) or a *revisit*. Outside bursts
   it is cold with probability ``users / E[requests outside bursts]``, inside a
   burst with probability ``burst_cold_share``. A revisit is, with probability
   ``session_share``, a session continuation of the last request at or before
   ``t - lag``, ``lag ~ lognormal(median revisit_gap_s, sigma
   revisit_gap_sigma)`` (heavy tail), by that request's user (drawn forward
   from the anchor, see that module); otherwise a return of a uniformly chosen
   earlier user. Users are numbered by first appearance. A cold request
   carries the initial history (1 + a rounded lognormal, mean
   ``cold_history_mean``), a revisit a geometric number of new items (mean
   ``new_items_mean``); a user's history is capped at ``max_seq_len`` (items
   past it are dropped).
3. **Items**, per segment with its own seeded generator. Item ranks are Zipf
   (``P(rank k) ∝ ∫_{k-1/2}^{k+1/2} x^-alpha dx ≈ k^-alpha``, sampled by
   inverting the continuous CDF, O(1) memory whatever the catalog size). In
   the trend span the ranking rotates by up to ``drift_ranks`` positions, so
   different items become hot. Ranks map to item ids by a seeded affine
   bijection ``(a·pos + b) mod items``. Inside a burst, each item is taken
   from that burst's hot set (``burst_hot_items`` ids) with probability
   ``burst_hot_share``.

Segment outputs are cut into row groups of ``ROW_GROUP_ROWS`` requests; the
rows themselves depend only on the config, not on ``ROW_GROUP_ROWS``.
The ``candidates`` column is left out: the simulator draws ``n_candidates``
ids per request from the trailing popularity (:mod:`helm_plan.arrays`).
The same config and seed give an identical table and identical file bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from helm_plan import regimes, trace
from helm_plan.errors import ConfigError
from helm_plan.synth import users as synth_users
from helm_plan.synth.config import REQUESTS_PER_USER, ROW_GROUP_ROWS, SynthConfig

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Plan:
    """Trace-wide parameters of a synthetic trace: rate shape, arrival model and item maps."""

    hot_items: np.ndarray
    """Hot-item ids of each burst, shape (bursts, burst_hot_items), int64."""
    bijection: tuple[int, int]
    """(a, b) of the rank-position to item-id map (a·pos + b) mod items."""
    arrivals: synth_users.ArrivalModel = field(repr=False)
    """Rates and probabilities the segments draw requests from."""
    shape: regimes.RegimeShape = field(repr=False)
    """The rate shape the arrivals follow."""

    @property
    def expected_requests(self) -> float:
        return self.shape.expected_requests


def zipf_ranks(u: np.ndarray, n_items: int, alpha: float) -> np.ndarray:
    """0-based Zipf ranks for uniforms ``u`` in [0, 1): P(k) ∝ ∫_{k-1/2}^{k+1/2} x^-alpha dx."""
    return _zipf_into(np.array(u, np.float64), n_items, alpha)


def _zipf_into(x: np.ndarray, n_items: int, alpha: float) -> np.ndarray:
    """:func:`zipf_ranks` that overwrites the float64 uniforms ``x`` (fewer temporaries)."""
    lo, hi = 0.5, n_items + 0.5
    e = 1.0 - alpha
    if abs(e) < 1e-9:
        x *= math.log(hi / lo)
        np.exp(x, out=x)
        x *= lo
    else:
        a, b = lo**e, hi**e
        x *= b - a
        x += a
        np.power(x, 1.0 / e, out=x)
    x += 0.5
    np.floor(x, out=x)
    r = x.astype(np.int64)
    np.clip(r, 1, n_items, out=r)
    r -= 1
    return r


def resolved_users(cfg: SynthConfig, outside_requests: float) -> int:
    """``cfg.users``, or one user per ``REQUESTS_PER_USER`` expected requests outside bursts."""
    if cfg.users is not None:
        return cfg.users
    return max(1, round(outside_requests / REQUESTS_PER_USER))


def _subseed(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])


def plan(cfg: SynthConfig) -> Plan:
    """Trace-wide parameters: rate shape, arrival model, burst hot sets, item bijection."""
    shp = regimes.shape(
        cfg.regime,
        qps=cfg.qps,
        duration_s=cfg.duration_s,
        seed=cfg.seed,
        burst_factor=cfg.burst_factor,
        burst_len_frac=cfg.burst_len_frac,
        bursts_per_duration=cfg.bursts,
    )
    # Cold probability outside bursts: E[cold outside bursts] = users.
    cum = np.concatenate(
        [[0.0], np.cumsum((shp.rate[1:] + shp.rate[:-1]) * 0.5 * np.diff(shp.grid_s))]
    )
    burst_mass = sum(
        float(np.interp(e, shp.grid_s, cum) - np.interp(a, shp.grid_s, cum)) for a, e in shp.bursts
    )
    outside = max(cum[-1] - burst_mass, 1e-12)
    p_cold = min(1.0, resolved_users(cfg, outside) / outside)

    item_rng = _subseed(cfg.seed, 2)
    n_hot = min(cfg.burst_hot_items, cfg.items)
    hot = (
        np.stack(
            [
                item_rng.choice(cfg.items, size=n_hot, replace=False).astype(np.int64)
                for _ in shp.bursts
            ]
        )
        if shp.bursts
        else np.zeros((0, n_hot), np.int64)
    )
    a_mul = _coprime(cfg.items, item_rng)
    b_add = int(item_rng.integers(0, cfg.items))
    return Plan(hot, (a_mul, b_add), synth_users.arrival_model(cfg, shp, p_cold), shp)


def _burst_of(shp: regimes.RegimeShape, ts: np.ndarray) -> np.ndarray:
    """Index of the burst each (sorted) time falls in, -1 outside bursts."""
    out = np.full(len(ts), -1, np.int32)
    for b, (a, e) in enumerate(shp.bursts):
        lo, hi = np.searchsorted(ts, [a, e], side="left")
        out[lo:hi] = b
    return out


def _shift(cfg: SynthConfig, shp: regimes.RegimeShape, ts: np.ndarray) -> np.ndarray:
    """Popularity-rotation offset (ranks) at each time: grows over the trend span."""
    if shp.trend_span is None or cfg.drift_ranks == 0:
        return np.zeros(len(ts), np.int64)
    a, e = shp.trend_span
    frac = np.clip((ts - a) / max(e - a, 1e-12), 0.0, 1.0)
    return np.floor(frac * cfg.drift_ranks).astype(np.int64)


def _coprime(n: int, rng: np.random.Generator) -> int:
    if n <= 2:
        return 1
    while True:
        a = int(rng.integers(n // 3 + 1, n))
        if math.gcd(a, n) == 1:
            return a


def _segment_items(
    cfg: SynthConfig, pl: Plan, ts: np.ndarray, k: np.ndarray, seg: int
) -> np.ndarray:
    """Item ids of one segment's requests (sorted times ``ts``, counts ``k``)."""
    total = int(k.sum())
    rng = _subseed(cfg.seed, 3, seg)
    pos = _zipf_into(rng.random(total), cfg.items, cfg.zipf_alpha)
    shift = _shift(cfg, pl.shape, ts)
    if shift.any():
        pos += np.repeat(shift, k)
        pos %= cfg.items
    a, b = pl.bijection
    pos *= a
    pos += b
    pos %= cfg.items
    items = pos
    if len(pl.hot_items):
        bid = np.repeat(_burst_of(pl.shape, ts), k)
        hot = rng.random(total) < cfg.burst_hot_share
        hot &= bid >= 0
        pick = rng.integers(0, pl.hot_items.shape[1], size=int(hot.sum()))
        items[hot] = pl.hot_items[bid[hot], pick]
    return items


class _RowBuffer:
    """Segment tables waiting to be cut into row groups (at most one row group plus a segment)."""

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self.parts.append(table)
            self.rows += table.num_rows

    def take(self, rows: int) -> pa.Table:
        """The next ``rows`` rows, as zero-copy slices of the buffered segments."""
        out: list[pa.Table] = []
        need = rows
        while need:
            head = self.parts[0]
            if head.num_rows <= need:
                out.append(self.parts.pop(0))
                need -= head.num_rows
            else:
                out.append(head.slice(0, need))
                self.parts[0] = head.slice(need)
                need = 0
        self.rows -= rows
        return pa.concat_tables(out)


def iter_chunks(
    cfg: SynthConfig, *, pl: Plan | None = None, progress: Progress | None = None
) -> Iterator[pa.Table]:
    """Yield the trace as canonical tables of ``ROW_GROUP_ROWS`` requests (the last may be short).

    Requests are generated per time segment (:mod:`helm_plan.synth.users`), so memory
    holds one row group, one segment and O(users) carried state, whatever the trace
    length; the rows do not depend on ``ROW_GROUP_ROWS``.
    """
    pl = pl or plan(cfg)
    st = synth_users.UserState()
    buf = _RowBuffer()
    done = 0
    expected = round(pl.expected_requests)
    for seg in range(pl.arrivals.segments):
        ts, user, k = synth_users.segment(cfg, pl.arrivals, st, seg)
        off = np.zeros(len(k) + 1, np.int64)
        np.cumsum(k, out=off[1:])
        items = _segment_items(cfg, pl, ts, k, seg)
        ncand = np.full(len(k), cfg.candidates, np.int32)
        buf.add(trace.make_table(ts, user, off, items, ncand))
        del ts, user, k, off, items, ncand
        while buf.rows >= ROW_GROUP_ROWS or (buf.rows and seg == pl.arrivals.segments - 1):
            chunk = buf.take(min(buf.rows, ROW_GROUP_ROWS))
            done += chunk.num_rows
            yield chunk
            if progress:
                progress(done, max(done, expected))
    if progress and done:
        progress(done, done)


def synthesize(cfg: SynthConfig, *, progress: Progress | None = None) -> pa.Table:
    """The whole synthetic trace as one canonical table (big traces: :func:`helm_plan.synth_like.write`)."""
    chunks = list(iter_chunks(cfg, progress=progress))
    if not chunks:
        raise ConfigError(
            f"qps={cfg.qps} over duration_s={cfg.duration_s} drew no requests",
            hint="raise --qps or --duration-s",
        )
    return trace.validate(pa.concat_tables(chunks))
