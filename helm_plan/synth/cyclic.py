"""A fixed population of returning users on a steady cadence: the KV working set of a scenario.

``users`` users, each active before the trace (its first request carries a
pre-existing history, 1 + a rounded lognormal with mean ``history_mean``),
each coming back every ``period_s`` seconds to refresh: user ``u`` requests at
``phase_u + k·period_s`` (plus a normal jitter of ``jitter_s``), ``phase_u``
uniform in ``[0, join_periods·period_s)``, for every ``k`` that falls in ``[0, duration_s)``;
a revisit adds a geometric number of new items (mean ``new_items_mean``).
Items are Zipf over ``items`` ids.

Between two requests of a user, every other user requests about once, so the
KV reuse distance of every revisit is about the whole population's contexts:
an LRU KV cache holding them all hits on every revisit, one a few percent
smaller on almost none (the LRU loop). The arrival rate is
``users / period_s``; users are numbered by first appearance.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from helm_plan import trace
from helm_plan.config import require_positive
from helm_plan.synth.config import ROW_GROUP_ROWS, require_int_range
from helm_plan.synth.items import zipf_ranks


@dataclass(frozen=True)
class CyclicConfig:
    """A population of returning users each refreshing every ``period_s`` (module docstring)."""

    users: int
    """Users, all active before the trace."""
    period_s: float
    """Time between two requests of a user, seconds."""
    duration_s: float
    """Length, seconds."""
    history_mean: float = 1800.0
    """Mean pre-existing history of a user's first request, tokens."""
    history_sigma: float = 0.02
    """Log-space spread of that history."""
    jitter_s: float = 0.0
    """Standard deviation of each request's time around its user's cadence, seconds."""
    join_periods: float = 1.0
    """Users join over this many periods (a user's first request is uniform in
    ``[0, join_periods·period_s)``): the rate and the KV working set ramp up over it."""
    new_items_mean: float = 1.0
    """Mean new items per revisit (geometric on 0, 1, ...)."""
    items: int = 2_000
    """Item ids 0 .. items-1."""
    zipf_alpha: float = 1.0
    """Item popularity skew."""
    candidates: int = 32
    """n_candidates of every request."""
    max_seq_len: int = 8192
    """Cap on each user's history, tokens."""
    seed: int = 0
    """Seed of every draw."""

    def __post_init__(self) -> None:
        for name in ("period_s", "duration_s", "history_mean", "join_periods"):
            require_positive(name, getattr(self, name))
        require_int_range("users", self.users, 1, 10_000_000)
        require_int_range("items", self.items, 1, 2_000_000_000)
        require_int_range("candidates", self.candidates, 0, trace.MAX_N_CANDIDATES)
        require_int_range("max_seq_len", self.max_seq_len, 1)
        require_int_range("seed", self.seed, 0)

    @property
    def expected_requests(self) -> float:
        """Requests of users joined uniformly over the join span, then every period."""
        join = min(self.join_periods * self.period_s, self.duration_s)
        return self.users * (self.duration_s - join / 2) / self.period_s


def iter_cyclic(cfg: CyclicConfig) -> Iterator[pa.Table]:
    """The trace as canonical tables of at most ``ROW_GROUP_ROWS`` requests, in time order."""
    rng = np.random.default_rng([cfg.seed, 0xC7C])
    phase = rng.random(cfg.users) * cfg.period_s * cfg.join_periods
    k = np.maximum(np.ceil((cfg.duration_s - phase) / cfg.period_s), 0).astype(np.int64)
    owner = np.repeat(np.arange(cfg.users), k)
    step = np.arange(len(owner)) - np.repeat(np.cumsum(k) - k, k)
    ts = phase[owner] + step * cfg.period_s
    if cfg.jitter_s > 0:
        ts = ts + rng.normal(0.0, cfg.jitter_s, len(ts))
    ok = (ts >= 0) & (ts < cfg.duration_s)
    ts, owner, step = ts[ok], owner[ok], step[ok]
    order = np.lexsort((owner, ts))
    ts, owner = ts[order], owner[order]
    first = np.zeros(len(owner), bool)
    seen, idx = np.unique(owner, return_index=True)
    first[idx] = True
    user = np.empty(cfg.users, np.int64)
    user[seen[np.argsort(idx)]] = np.arange(len(seen))  # numbered by first appearance
    extra = cfg.history_mean - 1.0
    mu = math.log(max(extra, 1e-300)) - cfg.history_sigma**2 / 2
    hist = 1 + np.floor(rng.lognormal(mu, cfg.history_sigma, int(first.sum())) + 0.5)
    n_new = rng.geometric(1.0 / (1.0 + cfg.new_items_mean), len(ts)) - 1
    n_new[first] = np.minimum(hist, cfg.max_seq_len)
    n_new = n_new.astype(np.int64)
    total = np.zeros(cfg.users, np.int64)  # the cap: items past max_seq_len are dropped
    for i in range(len(n_new)):  # ~U·T/period requests; a plain loop is fast enough here
        u = owner[i]
        keep = min(int(n_new[i]), cfg.max_seq_len - int(total[u]))
        n_new[i] = max(keep, 0)
        total[u] += n_new[i]
    off = np.zeros(len(ts) + 1, np.int64)
    np.cumsum(n_new, out=off[1:])
    items = zipf_ranks(rng.random(int(off[-1])), cfg.items, cfg.zipf_alpha)
    ncand = np.full(len(ts), cfg.candidates, np.int32)
    for lo in range(0, len(ts), ROW_GROUP_ROWS):
        hi = min(lo + ROW_GROUP_ROWS, len(ts))
        yield trace.make_table(ts[lo:hi], user[owner[lo:hi]], off[lo : hi + 1] - off[lo],
                               items[off[lo] : off[hi]], ncand[lo:hi])  # fmt: skip


__all__ = ["CyclicConfig", "iter_cyclic"]
