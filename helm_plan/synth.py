"""Synthetic canonical traces: the ``helm-plan synth`` generator.

The generator is fully vectorised numpy; nothing loops per request in Python.
It streams in time order, so memory does not grow with the request count:

1. **Plan** (:func:`plan`, O(1)): the rate shape
   (:func:`helm_plan.regimes.shape`), the cold probabilities, burst hot sets,
   the item bijection and the cut of ``[0, duration_s]`` into generation
   segments of ``SEGMENT_REQUESTS`` expected requests (config-determined).
2. **Requests** (:mod:`helm_plan.synth_users`), one segment at a time with
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
from typing import Any

import numpy as np
import pyarrow as pa

from helm_plan import regimes, synth_users, trace
from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError

#: Requests per parquet row group (and per table yielded by :func:`iter_chunks`).
ROW_GROUP_ROWS = 1 << 18
#: Largest catalog: ids and the affine bijection stay exact in int64.
MAX_ITEMS = 2_000_000_000

#: Expected requests per user when ``users`` is not given (cold share ~ 8%).
REQUESTS_PER_USER = 12

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SynthConfig:
    """Everything that determines a synthetic trace (with ``seed``, the exact bytes)."""

    regime: str = "steady"
    """Arrival regime: steady, trend, burst or mixed (DESIGN.md, Workloads)."""
    qps: float = 200.0
    """Base arrival rate, requests per second (trend ramps 0.5x to 1.5x; bursts spike above)."""
    duration_s: float = 600.0
    """Trace length, seconds."""
    users: int | None = None
    """Expected distinct users among requests outside bursts (bursts bring new users on top); None = one per 12 expected requests."""
    items: int = 1_000_000
    """Item catalog size: ids are 0..items-1."""
    zipf_alpha: float = 1.0
    """Item popularity skew: P(rank k) ~ k^-zipf_alpha (0 = uniform)."""
    candidates: int = 512
    """n_candidates of every request (0 allowed); the simulator draws the ids."""
    max_seq_len: int = 2048
    """Cap on each user's history length, tokens: new items past it are dropped."""
    new_items_mean: float = 4.0
    """Mean new items per revisit (geometric on 0, 1, 2, ...)."""
    cold_history_mean: float = 64.0
    """Mean items in a user's first request, its initial history (1 + rounded lognormal)."""
    cold_history_sigma: float = 1.0
    """Log-space spread of the initial history size."""
    session_share: float = 0.5
    """Share of revisits that continue a recent request (same session); the rest return at random."""
    revisit_gap_s: float = 30.0
    """Median lag of a session continuation behind the request it follows up, seconds (lognormal)."""
    revisit_gap_sigma: float = 1.5
    """Log-space spread of the session lag (its heavy tail)."""
    drift_ranks: int = 5_000
    """Trend: popularity ranks the item ranking rotates by over the trend span."""
    burst_factor: float = 4.0
    """Burst rate as a multiple of qps."""
    burst_len_frac: float = 0.04
    """Length of each burst as a share of duration_s."""
    bursts: int = 4
    """Bursts per trace (burst regime; mixed puts half as many in its last third)."""
    burst_cold_share: float = 0.8
    """Share of requests inside a burst that come from new (cold) users."""
    burst_hot_items: int = 500
    """Size of each burst's hot-item set (at most items)."""
    burst_hot_share: float = 0.8
    """Share of items of requests inside a burst drawn from that burst's hot set."""
    seed: int = 0
    """Seed for every random choice."""

    def __post_init__(self) -> None:
        regimes.parse_regime(self.regime)
        for name in ("qps", "duration_s", "revisit_gap_s"):
            require_positive(name, _num(getattr(self, name)))
        for name, (lo, hi) in _FLOAT_RANGES.items():
            require_range(name, _num(getattr(self, name)), lo, hi)
        for name, (ilo, ihi) in _INT_RANGES.items():
            if name != "users" or self.users is not None:
                _require_int(name, getattr(self, name), ilo, ihi)


_FLOAT_RANGES = {
    "zipf_alpha": (0.0, 5.0),
    "new_items_mean": (0.0, 1e6),
    "cold_history_mean": (1.0, 1e7),
    "cold_history_sigma": (0.0, 5.0),
    "session_share": (0.0, 1.0),
    "revisit_gap_sigma": (0.0, 10.0),
    "burst_factor": (1.0, 1e3),
    "burst_len_frac": (1e-6, 0.25),
    "burst_cold_share": (0.0, 1.0),
    "burst_hot_share": (0.0, 1.0),
}
_INT_RANGES: dict[str, tuple[int, int | None]] = {
    "users": (1, None),
    "items": (1, MAX_ITEMS),
    "candidates": (0, 2**31 - 1),
    "max_seq_len": (1, None),
    "drift_ranks": (0, None),
    "bursts": (1, 1000),
    "burst_hot_items": (1, None),
    "seed": (0, None),
}


def _num(v: Any) -> Any:
    """Integral floats as ints so messages read ``got -3``, not ``got -3.0``."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _require_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        hint = "catalogs are capped at 2e9 ids" if name == "items" and value > lo else None
        raise ConfigError(f"{name} must be {rng}, got {value}", hint=hint)


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

    Requests are generated per time segment (:mod:`helm_plan.synth_users`), so memory
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
