"""The synthetic generator's options (``helm-plan synth`` flags and the plan file's ``[demo]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from helm_plan import regimes, trace
from helm_plan.config import fix_for, require_positive, require_range
from helm_plan.errors import ConfigError

#: Most requests per parquet row group (and per table yielded by :func:`iter_chunks`).
ROW_GROUP_ROWS = 1 << 18
#: Most history items per row group (beyond its first request): long histories make
#: smaller row groups, so a row group stays ~32 MiB of ids whatever the history lengths.
ROW_GROUP_TOKENS = 1 << 22
#: Largest catalog: ids and the affine bijection stay exact in int64.
MAX_ITEMS = 2_000_000_000

#: Expected requests per user when ``users`` is not given (cold share ~ 8%).
REQUESTS_PER_USER = 12

#: Most requests a config may ask for (qps x duration_s, bursts aside): ~20 minutes of work.
MAX_REQUESTS = 1_000_000_000
#: Longest trace, seconds (about three years).
MAX_DURATION_S = 1e8


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
    max_seq_len: int = 8192
    """Cap on each user's history length, tokens: new items past it are dropped."""
    new_items_mean: float = 4.0
    """Mean new items per revisit (geometric on 0, 1, 2, ...)."""
    cold_history_mean: float = 64.0
    """Mean items in a new user's first request, its initial history (1 + rounded lognormal)."""
    cold_history_sigma: float = 1.0
    """Log-space spread of the initial history size."""
    returning_share: float = 0.8
    """Share of users first seen outside bursts who were active before the trace window (0 = all new)."""
    returning_history_mean: float = 1536.0
    """Mean pre-existing history of a returning user, carried by their first request (1 + rounded lognormal, before the cap)."""
    returning_history_sigma: float = 1.0
    """Log-space spread of the pre-existing history (1.0: p95 ~ 3x the mean, tail past 8k)."""
    session_share: float = 0.5
    """Share of revisits that continue a recent request (same session); the rest return at random."""
    revisit_gap_s: float = 30.0
    """Median lag of a session continuation behind the request it follows up, seconds (lognormal)."""
    revisit_gap_sigma: float = 1.5
    """Log-space spread of the session lag (its heavy tail)."""
    drift_ranks: int = 5_000
    """Trend: popularity ranks the item ranking rotates by over the trend span."""
    drift_ranks_per_s: float = 0.0
    """Steady popularity churn: ranks the item ranking rotates by per second, whole trace, any regime."""
    burst_factor: float = 4.0
    """Burst rate as a multiple of qps."""
    burst_len_frac: float = 0.04
    """Length of each burst as a share of duration_s."""
    bursts: int = 4
    """Bursts per trace (burst regime; mixed puts half as many in its last third)."""
    burst_cold_share: float = 0.8
    """Share of requests inside a burst that are a user's first (users new to the trace)."""
    burst_returning_share: float = 0.0
    """Share of users first seen inside a burst who were active before the trace (the rest are new users)."""
    burst_hot_items: int = 500
    """Size of each burst's hot-item set (at most items)."""
    burst_hot_share: float = 0.8
    """Share of items of requests inside a burst drawn from that burst's hot set."""
    burst_new_item_share: float = 0.1
    """Share of items of requests inside a burst that are new items: never drawn before that burst."""
    burst_new_items: int | None = None
    """Size of each burst's block of new items, reserved at the catalog's tail (Zipf within it); None = 1% of items."""
    seed: int = 0
    """Seed for every random choice."""

    def __post_init__(self) -> None:
        regimes.parse_regime(self.regime)
        try:
            for name in ("qps", "duration_s", "revisit_gap_s"):
                require_positive(name, _num(getattr(self, name)))
            for name, (lo, hi) in _FLOAT_RANGES.items():
                require_range(name, _num(getattr(self, name)), lo, hi)
        except ConfigError as e:
            raise ConfigError(str(e), hint=_RANGE_HINT) from None
        for name, (ilo, ihi) in _INT_RANGES.items():
            if name not in ("users", "burst_new_items") or getattr(self, name) is not None:
                require_int_range(name, getattr(self, name), ilo, ihi)
        # Bounds so a typo (--duration-s 1e15) fails at once instead of running for days.
        if self.duration_s > MAX_DURATION_S:
            raise ConfigError(
                f"duration_s {self.duration_s:g} exceeds the bound {MAX_DURATION_S:g} s",
                hint=fix_for("duration_s", f"<= {MAX_DURATION_S:g}"),
            )
        if self.qps * self.duration_s > MAX_REQUESTS:
            raise ConfigError(
                f"qps {self.qps:g} x duration_s {self.duration_s:g} asks for "
                f"{self.qps * self.duration_s:.3g} requests, more than the bound {MAX_REQUESTS:.0e}",
                hint="lower --qps or --duration-s",
            )
        if self.burst_hot_share + self.burst_new_item_share > 1.0:
            raise ConfigError(
                f"burst_hot_share + burst_new_item_share must be at most 1, got "
                f"{self.burst_hot_share:g} + {self.burst_new_item_share:g}",
                hint="lower one of them: the rest of a burst's items follow the catalog's Zipf",
            )
        reserved = self.reserved_items
        if reserved > self.items // 2:
            raise ConfigError(
                f"{self.n_bursts} bursts x burst_new_items={self.burst_new_items} reserve "
                f"{reserved} new items, more than half of items={self.items}",
                hint="lower burst_new_items, or raise items",
            )

    @property
    def n_bursts(self) -> int:
        """Bursts of the rate shape: ``bursts`` (burst), half as many (mixed) or none."""
        r = regimes.parse_regime(self.regime)
        if r is regimes.Regime.BURST:
            return self.bursts
        return max(1, self.bursts // 2) if r is regimes.Regime.MIXED else 0

    @property
    def new_items_per_burst(self) -> int:
        """Size of each burst's new-item block (0 when bursts bring no new items)."""
        if self.burst_new_item_share == 0 or self.n_bursts == 0:
            return 0
        if self.burst_new_items is not None:
            return self.burst_new_items
        return max(1, min(self.items // 100, self.items // (2 * self.n_bursts)))

    @property
    def reserved_items(self) -> int:
        """Catalog positions at the tail held back for the bursts' new items."""
        return self.n_bursts * self.new_items_per_burst


_RANGE_HINT = "the synth knobs and their ranges are listed in the README's synth section"
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
    "returning_share": (0.0, 1.0),
    "returning_history_mean": (1.0, 1e7),
    "returning_history_sigma": (0.0, 5.0),
    "drift_ranks_per_s": (0.0, 1e12),
    "burst_returning_share": (0.0, 1.0),
    "burst_new_item_share": (0.0, 1.0),
}
_INT_RANGES: dict[str, tuple[int, int | None]] = {
    "users": (1, None),
    "items": (1, MAX_ITEMS),
    "candidates": (0, trace.MAX_N_CANDIDATES),
    "max_seq_len": (1, None),
    "drift_ranks": (0, None),
    "bursts": (1, 1000),
    "burst_hot_items": (1, None),
    "burst_new_items": (1, None),
    "seed": (0, None),
}


def _num(v: Any) -> Any:
    """Integral floats as ints so messages read ``got -3``, not ``got -3.0``."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def require_int_range(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    """Raise ConfigError (with a hint) unless ``value`` is an integer in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer, got {value!r}", hint=_RANGE_HINT)
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        hint = "catalogs are capped at 2e9 ids" if name == "items" and value > lo else _RANGE_HINT
        raise ConfigError(f"{name} must be {rng}, got {value}", hint=hint)
