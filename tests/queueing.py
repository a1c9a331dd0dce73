"""Poisson traces with known service times and the M/D/1 closed form (cluster and plan tests).

``poisson_table(exp_service=False)`` scores one item per request with no
history, so with a one-term latency model (``t_launch_s = d``) every request
takes exactly ``d``; ``exp_service=True`` draws the candidate count geometric
with mean MEAN_CAND, so ``dense_s_per_token = d / MEAN_CAND`` gives service
that is exponential to 0.1%.
"""

from __future__ import annotations

import math

import numpy as np

from helm_plan import trace

MEAN_CAND = 1000


def poisson_table(n: int, rate: float, seed: int, *, exp_service: bool):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.exponential(1.0 / rate, n))
    ts -= ts[0]
    users = rng.integers(0, 5000, n)
    off = np.zeros(n + 1, np.int64)
    if exp_service:
        return trace.make_table(ts, users, off, np.zeros(0, np.int64),
                                rng.geometric(1.0 / MEAN_CAND, n))  # fmt: skip
    return trace.make_table(ts, users, off, np.zeros(0, np.int64), np.ones(n, np.int64),
                            candidates_offsets=np.arange(n + 1), candidates_values=np.zeros(n))  # fmt: skip


def md1_wait_cdf(x: float, lam: float, d: float) -> float:
    """Erlang's M/D/1 waiting-time distribution P(W <= x)."""
    s = sum((lam * (k * d - x)) ** k / math.factorial(k) * math.exp(-lam * (k * d - x))
            for k in range(int(math.floor(x / d)) + 1))  # fmt: skip
    return (1.0 - lam * d) * s


def quantile(cdf, q: float, hi: float) -> float:
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2
