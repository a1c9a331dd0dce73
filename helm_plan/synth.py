"""Synthetic canonical traces: the ``helm-plan synth`` generator.

The generator is fully vectorised numpy; nothing loops per request in Python.
It builds a trace in two passes:

1. **Requests** (O(requests) memory). Arrival times come from
   :func:`helm_plan.regimes.shape` and :func:`~helm_plan.regimes.arrivals_poisson`.
   Each request is either *cold* (a user's first request in the trace) or a
   *revisit*. Outside bursts it is cold with probability
   ``users / E[requests outside bursts]``, inside a burst with probability
   ``burst_cold_share``. A revisit is, with probability ``session_share``, a
   session continuation of the last request at or before ``t - lag``,
   ``lag ~ lognormal(median revisit_gap_s, sigma revisit_gap_sigma)`` (heavy
   tail), by that request's user; otherwise a return of a uniformly chosen
   earlier user. Users are resolved by pointer doubling over these links and
   numbered by first appearance. A cold request carries the initial history
   (1 + a rounded lognormal, mean ``cold_history_mean``), a revisit a geometric number of new
   items (mean ``new_items_mean``); a user's history is capped at
   ``max_seq_len`` (items past it are dropped).
2. **Items** (O(row group) memory), one row group of ``ROW_GROUP_ROWS``
   requests at a time, each with its own seeded generator. Item ranks are Zipf
   (``P(rank k) ∝ ∫_{k-1/2}^{k+1/2} x^-alpha dx ≈ k^-alpha``, sampled by
   inverting the continuous CDF, O(1) memory whatever the catalog size). In
   the trend span the ranking rotates by up to ``drift_ranks`` positions, so
   different items become hot. Ranks map to item ids by a seeded affine
   bijection ``(a·pos + b) mod items``. Inside a burst, each item is taken
   from that burst's hot set (``burst_hot_items`` ids) with probability
   ``burst_hot_share``.

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

from helm_plan import regimes, trace
from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError

#: Requests per parquet row group; also the unit of per-chunk item seeding.
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
    """Per-request arrays of a synthetic trace (pass 1), before items are drawn."""

    ts_s: np.ndarray
    """Arrival times, float64 seconds, sorted."""
    user_id: np.ndarray
    """User of each request, int32, numbered by first appearance."""
    n_new: np.ndarray
    """New items per request after the max_seq_len cap, int32."""
    hot_items: np.ndarray
    """Hot-item ids of each burst, shape (bursts, burst_hot_items), int64."""
    bijection: tuple[int, int]
    """(a, b) of the rank-position to item-id map (a·pos + b) mod items."""
    shape: regimes.RegimeShape = field(repr=False)
    """The rate shape the arrivals follow."""

    @property
    def n_requests(self) -> int:
        return len(self.ts_s)


def zipf_ranks(u: np.ndarray, n_items: int, alpha: float) -> np.ndarray:
    """0-based Zipf ranks for uniforms ``u`` in [0, 1): P(k) ∝ ∫_{k-1/2}^{k+1/2} x^-alpha dx."""
    lo, hi = 0.5, n_items + 0.5
    e = 1.0 - alpha
    if abs(e) < 1e-9:
        x = lo * np.exp(u * math.log(hi / lo))
    else:
        a, b = lo**e, hi**e
        x = (a + u * (b - a)) ** (1.0 / e)
    r = np.floor(x + 0.5).astype(np.int64)
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
    """Pass 1: arrival times, users and per-request item counts (no item ids yet)."""
    shp = regimes.shape(
        cfg.regime,
        qps=cfg.qps,
        duration_s=cfg.duration_s,
        seed=cfg.seed,
        burst_factor=cfg.burst_factor,
        burst_len_frac=cfg.burst_len_frac,
        bursts_per_duration=cfg.bursts,
    )
    ts = regimes.arrivals_poisson(shp, cfg.seed + 1_000_003)
    n = len(ts)
    rng = _subseed(cfg.seed, 1)

    in_burst = _burst_of(shp, ts) >= 0

    # Cold probability outside bursts: E[cold outside bursts] = users.
    cum = np.concatenate(
        [[0.0], np.cumsum((shp.rate[1:] + shp.rate[:-1]) * 0.5 * np.diff(shp.grid_s))]
    )
    burst_mass = sum(
        float(np.interp(e, shp.grid_s, cum) - np.interp(a, shp.grid_s, cum)) for a, e in shp.bursts
    )
    outside = max(cum[-1] - burst_mass, 1e-12)
    p_cold = min(1.0, resolved_users(cfg, outside) / outside)
    p = np.where(in_burst, max(cfg.burst_cold_share, p_cold), p_cold)
    cold = rng.random(n) < p
    if n:
        cold[0] = True

    # Revisits: a session continuation follows up the last request at or before
    # t - lag and belongs to its user; a return visit picks a uniformly random
    # user among those who arrived earlier.
    it = np.int32 if n < 2**31 - 1 else np.int64  # request indices (halves memory)
    idx = np.arange(n, dtype=it)
    first_rank = (np.cumsum(cold, dtype=np.int64) - 1).astype(it)
    cold_idx = np.flatnonzero(cold).astype(it)
    lag = rng.lognormal(math.log(cfg.revisit_gap_s), cfg.revisit_gap_sigma, size=n)
    lag = ts - lag
    order = np.argsort(lag)  # sorted keys make the binary searches cache-friendly
    parent = np.empty(n, it)
    parent[order] = np.searchsorted(ts, lag[order], side="right") - 1
    del lag, order
    arrived = first_rank + 1 - cold  # users whose first request came before request i
    returning = cold_idx[(rng.random(n) * np.maximum(arrived, 1)).astype(it)]
    del arrived
    session = (rng.random(n) < cfg.session_share) & (parent >= 0)
    root = np.where(cold, idx, np.where(session, parent, returning))
    del parent, returning, session, idx
    while True:  # pointer doubling: every request ends at its user's first request
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    user = first_rank[root]
    del root, first_rank

    # Item counts: initial history for cold requests, geometric growth for revisits.
    sig = cfg.cold_history_sigma
    extra = cfg.cold_history_mean - 1.0  # 1 + round(lognormal with mean `extra`)
    mu = math.log(max(extra, 1e-300)) - sig * sig / 2
    first_size = np.floor(rng.lognormal(mu, sig, size=n) + 0.5) if extra > 0 else np.zeros(n)
    first_size += 1
    np.clip(first_size, 1, cfg.max_seq_len, out=first_size)
    k = first_size.astype(np.int32)
    del first_size
    grow = rng.geometric(1.0 / (1.0 + cfg.new_items_mean), size=n) - 1
    np.minimum(grow, cfg.max_seq_len, out=grow)
    k[~cold] = grow[~cold]
    del grow
    k = _cap_history(user, k, cfg.max_seq_len)

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
    return Plan(ts, user, k, hot, (a_mul, b_add), shp)


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


def _cap_history(user: np.ndarray, k: np.ndarray, cap: int) -> np.ndarray:
    """Drop items past each user's cumulative ``cap`` (in request order)."""
    if len(k) == 0:
        return k
    order = np.argsort(user, kind="stable")
    ks = k[order].astype(np.int64)
    cs = np.cumsum(ks)
    us = user[order]
    starts = np.flatnonzero(np.r_[True, us[1:] != us[:-1]])
    before = np.r_[0, cs[starts[1:] - 1]]  # tokens of earlier users in sorted order
    base = np.repeat(before, np.diff(np.r_[starts, len(ks)]))
    within = cs - base  # user's history after each request
    capped = np.minimum(within, cap) - np.minimum(within - ks, cap)
    out = np.empty_like(k)
    out[order] = capped  # fits k's dtype: capped <= k
    return out


def _coprime(n: int, rng: np.random.Generator) -> int:
    if n <= 2:
        return 1
    while True:
        a = int(rng.integers(n // 3 + 1, n))
        if math.gcd(a, n) == 1:
            return a


def _chunk_items(cfg: SynthConfig, pl: Plan, r0: int, r1: int, chunk: int) -> np.ndarray:
    """Item ids of requests [r0, r1), drawn with the chunk's own generator."""
    k = pl.n_new[r0:r1]
    total = int(k.sum())
    rng = _subseed(cfg.seed, 3, chunk)
    req = np.repeat(np.arange(r1 - r0, dtype=np.int32), k)
    ts = pl.ts_s[r0:r1]
    pos = zipf_ranks(rng.random(total), cfg.items, cfg.zipf_alpha)
    pos += _shift(cfg, pl.shape, ts)[req]
    pos %= cfg.items
    a, b = pl.bijection
    pos *= a
    pos += b
    pos %= cfg.items
    items = pos
    if len(pl.hot_items):
        bid = _burst_of(pl.shape, ts)[req]
        hot = (bid >= 0) & (rng.random(total) < cfg.burst_hot_share)
        pick = rng.integers(0, pl.hot_items.shape[1], size=int(hot.sum()))
        items[hot] = pl.hot_items[bid[hot], pick]
    return items


def iter_chunks(
    cfg: SynthConfig, *, pl: Plan | None = None, progress: Progress | None = None
) -> Iterator[pa.Table]:
    """Yield the trace as canonical tables of at most ``ROW_GROUP_ROWS`` requests."""
    pl = pl or plan(cfg)
    n = pl.n_requests
    ncand = np.full(ROW_GROUP_ROWS, cfg.candidates, np.int32)
    for c, r0 in enumerate(range(0, n, ROW_GROUP_ROWS)):
        r1 = min(n, r0 + ROW_GROUP_ROWS)
        items = _chunk_items(cfg, pl, r0, r1, c)
        off = np.zeros(r1 - r0 + 1, np.int64)
        np.cumsum(pl.n_new[r0:r1], out=off[1:])
        yield trace.make_table(pl.ts_s[r0:r1], pl.user_id[r0:r1], off, items, ncand[: r1 - r0])
        if progress:
            progress(r1, n)


def synthesize(cfg: SynthConfig, *, progress: Progress | None = None) -> pa.Table:
    """The whole synthetic trace as one canonical table (big traces: :func:`helm_plan.synth_like.write`)."""
    chunks = list(iter_chunks(cfg, progress=progress))
    if not chunks:
        raise ConfigError(
            f"qps={cfg.qps} over duration_s={cfg.duration_s} drew no requests",
            hint="raise --qps or --duration-s",
        )
    return trace.validate(pa.concat_tables(chunks))
