"""The synthetic generator's options (``helm-plan synth`` flags and the plan file's ``[demo]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from helm_plan import regimes
from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError

#: Requests per parquet row group (and per table yielded by :func:`iter_chunks`).
ROW_GROUP_ROWS = 1 << 18
#: Largest catalog: ids and the affine bijection stay exact in int64.
MAX_ITEMS = 2_000_000_000

#: Expected requests per user when ``users`` is not given (cold share ~ 8%).
REQUESTS_PER_USER = 12


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
