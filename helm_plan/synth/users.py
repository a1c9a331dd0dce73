"""Arrivals, users and item counts of a synthetic trace, one time segment at a time.

Memory is O(one segment + users + pending session continuations), never
O(requests): nothing per request outlives its segment.

**Segments.** ``[0, duration_s]`` is cut at equal shares of the expected
request count into ``max(ceil(expected / SEGMENT_REQUESTS), ceil(expected
items / SEGMENT_TOKENS))`` segments, so the cut depends on the config only. Segment ``j`` draws with its own generator
``default_rng([seed, 4, j])``; the trace does not depend on how callers group
rows (row groups are slices of the segments' output).

**Model.** Requests arrive with the regime's intensity ``λ(t)`` (piecewise
constant per grid cell, as :func:`helm_plan.regimes.arrivals_fixed`). A request
at ``t`` is *cold* (its user's first) with probability ``p(t)`` (``p_in`` inside
bursts, ``p_out`` outside); otherwise, with probability ``session_share``, a
*session continuation* of the last request at or before ``t - lag``,
``lag ~ lognormal`` (when that request exists), by that request's user; else a
*return* of a uniformly chosen earlier user.

That backward rule needs every earlier request, so the continuations are
drawn *forward* instead, which gives the same distribution: candidate anchors
``s`` arrive at the constant rate ``g_max >= g(t) = λ(t)(1 - p(t))·session_share``,
each with a lag ``ℓ``; the child at ``s + ℓ`` is kept with probability
``g(s + ℓ) / g_max``. Kept children form a Poisson process of intensity
``g(t)·F(t)`` (``F`` the lag CDF: the anchor must lie at or after 0) and belong
to the user of the last request at or before their anchor, known once the
anchor's segment is resolved; children due in a later segment wait in a
pending list (time, user). The other requests (cold or return) are the
regime's arrivals thinned by ``1 - q(t)F(t)``, ``q = (1 - p)·session_share``;
one of them is cold with probability ``p / (1 - qF)``. Together they are the
regime's Poisson process with the per-request probabilities above.

Within a segment, continuations of same-segment anchors are resolved by
pointer doubling; users are numbered by first appearance. Item counts: a cold
request is a *returning* user's (active before the trace window) with
probability ``returning_share`` (``burst_returning_share`` inside a burst) and
carries their pre-existing history, ``1 + round(lognormal)`` items with mean
``returning_history_mean``; a new user's carries ``1 + round(lognormal)`` with
mean ``cold_history_mean``; a revisit a geometric number (mean
``new_items_mean``). A user's history is capped at ``max_seq_len`` with the
per-user history length carried across segments (O(users)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from helm_plan import regimes
from helm_plan.synth.config import SynthConfig

#: Expected requests per generation segment (fixed: the trace depends on it).
SEGMENT_REQUESTS = 1 << 16
#: Expected history items per generation segment, at most (fixed: the trace depends on it).
#: Long histories cut the trace into more segments, so a segment's ids stay ~32 MiB.
SEGMENT_TOKENS = 1 << 22

_KNOWN, _COLD, _RETURN, _CHILD = 0, 1, 2, 3


@dataclass(frozen=True)
class ArrivalModel:
    """Rates and probabilities the segments draw from (derived from the config and shape)."""

    grid_s: np.ndarray
    """Regime time grid, seconds."""
    cum: np.ndarray
    """Cumulative expected requests on the grid."""
    cell_rate: np.ndarray
    """Arrival rate in each grid cell, requests per second."""
    lag_cdf: np.ndarray
    """Session-lag CDF at each grid time."""
    edges_s: np.ndarray
    """Segment boundaries, seconds (len segments + 1)."""
    edge_mass: np.ndarray
    """Cumulative expected requests at the segment boundaries."""
    burst_start: np.ndarray
    """Burst starts, seconds, ascending."""
    burst_end_max: np.ndarray
    """Running maximum of the burst ends (for union membership)."""
    p_in: float
    """Cold probability of a request inside a burst."""
    p_out: float
    """Cold probability of a request outside bursts."""
    g_max: float
    """Upper bound of the continuation intensity g(t), requests per second."""

    @property
    def segments(self) -> int:
        return len(self.edges_s) - 1

    def in_burst(self, t: np.ndarray) -> np.ndarray:
        """Whether each (unsorted) time lies inside some burst."""
        if len(self.burst_start) == 0:
            return np.zeros(len(t), bool)
        i = np.searchsorted(self.burst_start, t, side="right") - 1
        return (i >= 0) & (t < self.burst_end_max[np.maximum(i, 0)])


def arrival_model(cfg: SynthConfig, shp: regimes.RegimeShape, p_cold: float) -> ArrivalModel:
    """The :class:`ArrivalModel` of ``cfg`` over ``shp`` (``p_cold``: cold probability outside bursts)."""
    grid = shp.grid_s
    cell_rate = (shp.rate[1:] + shp.rate[:-1]) * 0.5
    cum = np.concatenate([[0.0], np.cumsum(cell_rate * np.diff(grid))])
    p_in = max(cfg.burst_cold_share, p_cold)
    burst_mass = sum(
        float(np.interp(e, grid, cum) - np.interp(a, grid, cum)) for a, e in shp.bursts
    )
    tokens = expected_tokens(cfg, cum[-1] - burst_mass, burst_mass, p_cold, p_in)
    segs = max(1, math.ceil(cum[-1] / SEGMENT_REQUESTS), math.ceil(tokens / SEGMENT_TOKENS))
    mass = cum[-1] * np.arange(segs + 1) / segs
    edges = np.interp(mass, cum, grid)
    edges[0], edges[-1] = 0.0, shp.duration_s
    q_in, q_out = (1 - p_in) * cfg.session_share, (1 - p_cold) * cfg.session_share
    # Cells fully inside one burst continue at q_in, cells partly inside at either.
    q_cell = np.full(len(cell_rate), q_out)
    for a, e in shp.bursts:
        overlap = (grid[:-1] < e) & (grid[1:] > a)
        full = (grid[:-1] >= a) & (grid[1:] <= e)
        q_cell[overlap & ~full] = max(q_in, q_out)
        q_cell[full] = q_in
    starts = np.array([a for a, _ in shp.bursts], np.float64)
    ends = np.array([e for _, e in shp.bursts], np.float64)
    order = np.argsort(starts, kind="stable")
    return ArrivalModel(
        grid_s=grid,
        cum=cum,
        cell_rate=cell_rate,
        lag_cdf=_lognormal_cdf(grid, cfg.revisit_gap_s, cfg.revisit_gap_sigma),
        edges_s=edges,
        edge_mass=mass,
        burst_start=starts[order],
        burst_end_max=np.maximum.accumulate(ends[order]) if len(ends) else ends,
        p_in=p_in,
        p_out=float(p_cold),
        g_max=float((cell_rate * q_cell).max()),
    )


def expected_tokens(
    cfg: SynthConfig, outside: float, inside: float, p_out: float, p_in: float
) -> float:
    """Expected history items of the trace, before the per-user cap (sizes the segments).

    ``outside`` / ``inside``: expected requests outside / inside bursts, cold with
    probability ``p_out`` / ``p_in``. A first request carries the mixture of new and
    returning initial histories (each mean capped at ``max_seq_len``), a revisit
    ``new_items_mean``.
    """
    cap = cfg.max_seq_len
    new = min(cfg.cold_history_mean, cap)
    ret = min(cfg.returning_history_mean, cap)
    first_out = cfg.returning_share * ret + (1 - cfg.returning_share) * new
    first_in = cfg.burst_returning_share * ret + (1 - cfg.burst_returning_share) * new
    cold = outside * p_out + inside * p_in
    return (
        outside * p_out * first_out
        + inside * p_in * first_in
        + (outside + inside - cold) * min(cfg.new_items_mean, cap)
    )


def _lognormal_cdf(t: np.ndarray, median: float, sigma: float) -> np.ndarray:
    if sigma == 0:
        return (t >= median).astype(np.float64)
    z = [(math.log(x) - math.log(median)) / sigma if x > 0 else -math.inf for x in t.tolist()]
    return np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in z])


class UserState:
    """State carried from one segment to the next (O(users + pending continuations))."""

    def __init__(self) -> None:
        self.users = 0
        """Users seen so far (ids 0..users-1, by first appearance)."""
        self.history = np.zeros(1024, np.int64)
        """History length of each user so far (capped)."""
        self.last_user = -1
        """User of the latest request so far (-1: none yet)."""
        self.pending: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        """Continuations due in later segments, by segment: (times, users); user -1 (anchor
        before every request) makes a return visit."""

    @property
    def nbytes(self) -> int:
        """Bytes held by the carried arrays."""
        arrays = [self.history] + [a for v in self.pending.values() for p in v for a in p]
        return sum((a if a.base is None else a.base).nbytes for a in arrays)  # views: their base


def segment(
    cfg: SynthConfig, m: ArrivalModel, st: UserState, j: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted times, users and capped item counts of segment ``j``; advances ``st``."""
    rng = np.random.default_rng([cfg.seed, 4, j])
    a, b = float(m.edges_s[j]), float(m.edges_s[j + 1])
    q_share = cfg.session_share

    # Fresh arrivals (cold or return): the regime's arrivals thinned by 1 - q·F.
    lo, hi = float(m.edge_mass[j]), float(m.edge_mass[j + 1])
    tf = np.interp(lo + np.sort(rng.random(rng.poisson(hi - lo))) * (hi - lo), m.cum, m.grid_s)
    p = np.where(m.in_burst(tf), m.p_in, m.p_out)
    u = rng.random(len(tf))
    keep = u < 1.0 - (1.0 - p) * q_share * np.interp(tf, m.grid_s, m.lag_cdf)
    kind_f = np.where(u < p, _COLD, _RETURN)[keep]
    tf = tf[keep]

    # Session continuations anchored in this segment (thinned to g(t)).
    anchor = a + rng.random(rng.poisson(m.g_max * (b - a))) * (b - a)
    tc = anchor + rng.lognormal(math.log(cfg.revisit_gap_s), cfg.revisit_gap_sigma, len(anchor))
    ok = rng.random(len(anchor)) * m.g_max < _g(m, tc, q_share)
    anchor, tc = anchor[ok], tc[ok]
    due_seg = np.searchsorted(m.edges_s, tc, side="right") - 1
    np.clip(due_seg, j, m.segments - 1, out=due_seg)
    now = due_seg == j

    # Continuations anchored earlier that fall due here.
    waiting = st.pending.pop(j, [])
    pt = np.concatenate([w[0] for w in waiting]) if waiting else np.empty(0)
    pu = np.concatenate([w[1] for w in waiting]) if waiting else np.empty(0, np.int64)
    t = np.concatenate([pt, tf, tc[now]])
    kind = np.concatenate(
        [np.where(pu >= 0, _KNOWN, _RETURN), kind_f, np.full(int(now.sum()), _CHILD)]
    ).astype(np.int8)
    known = np.concatenate([pu, np.full(len(t) - len(pu), -1, np.int64)])
    anc = np.concatenate([np.zeros(len(pu) + len(tf)), anchor[now]])
    del pt, pu, waiting
    order = np.argsort(t, kind="stable")
    t, kind, known, anc = t[order], kind[order], known[order], anc[order]

    user = _resolve(st, rng, t, kind, known, anc)
    cold = kind == _COLD

    # Continuations due later belong to the user of the last request at or before the anchor.
    later_t, later_seg = tc[~now], due_seg[~now]
    i = np.searchsorted(t, anchor[~now], side="right") - 1
    later_u = np.where(i >= 0, user[np.maximum(i, 0)] if len(t) else -1, st.last_user)
    by_seg = np.argsort(later_seg, kind="stable")
    later_t, later_u, later_seg = later_t[by_seg], later_u[by_seg], later_seg[by_seg]
    cuts = np.flatnonzero(np.diff(later_seg)) + 1
    for lo_i, hi_i in zip(np.r_[0, cuts], np.r_[cuts, len(later_seg)], strict=True):
        if hi_i > lo_i:
            dest = st.pending.setdefault(int(later_seg[lo_i]), [])
            # Copies: a view would keep this segment's whole array alive.
            dest.append((later_t[lo_i:hi_i].copy(), later_u[lo_i:hi_i].astype(np.int64)))
    if len(t):
        st.last_user = int(user[-1])
    st.users += int(cold.sum())

    k = _item_counts(cfg, rng, cold)
    if cfg.returning_share > 0 or cfg.burst_returning_share > 0:
        _returning_histories(cfg, m, t, cold, k, j)
    return t, user, _cap_history(st, user, k, cfg.max_seq_len)


def _g(m: ArrivalModel, t: np.ndarray, q_share: float) -> np.ndarray:
    """Continuation intensity λ(t)·(1 - p(t))·session_share (0 past the end)."""
    cell = np.searchsorted(m.grid_s, t, side="right") - 1
    np.clip(cell, 0, len(m.cell_rate) - 1, out=cell)
    p = np.where(m.in_burst(t), m.p_in, m.p_out)
    g = m.cell_rate[cell] * (1.0 - p) * q_share
    g[t > m.grid_s[-1]] = 0.0
    return g


def _resolve(
    st: UserState,
    rng: np.random.Generator,
    t: np.ndarray,
    kind: np.ndarray,
    known: np.ndarray,
    anc: np.ndarray,
) -> np.ndarray:
    """User of each request of a segment; marks the segment's cold requests in ``kind``."""
    n = len(t)
    child = np.flatnonzero(kind == _CHILD)
    parent = np.minimum(np.searchsorted(t, anc[child], side="right") - 1, child - 1)
    orphan = parent < 0  # anchored before this segment's first request
    if st.last_user >= 0:
        kind[child[orphan]] = _KNOWN
        known[child[orphan]] = st.last_user
    else:
        kind[child[orphan]] = _RETURN
    child, parent = child[~orphan], parent[~orphan]
    if st.users == 0 and n:
        kind[0] = _COLD  # the very first request has nobody to return to
    cold = kind == _COLD
    seen = np.cumsum(cold, dtype=np.int64)
    user = known.copy()
    user[cold] = st.users + seen[cold] - 1
    ret = np.flatnonzero(kind == _RETURN)
    before = st.users + seen[ret] - cold[ret]
    user[ret] = (rng.random(len(ret)) * before).astype(np.int64)
    root = np.arange(n)
    root[child] = parent
    while True:  # pointer doubling: each continuation ends at a request with a user
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    return user[root]


def _item_counts(cfg: SynthConfig, rng: np.random.Generator, cold: np.ndarray) -> np.ndarray:
    """Initial history for cold requests, geometric growth for the others (before the cap)."""
    n_cold = int(cold.sum())
    first = _lognormal_count(rng, cfg.cold_history_mean, cfg.cold_history_sigma, n_cold)
    np.clip(first, 1, cfg.max_seq_len, out=first)
    grow = rng.geometric(1.0 / (1.0 + cfg.new_items_mean), size=len(cold) - n_cold) - 1
    np.minimum(grow, cfg.max_seq_len, out=grow)
    k = np.empty(len(cold), np.int64)
    k[cold] = first
    k[~cold] = grow
    return k


def _lognormal_count(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    """``1 + round(lognormal)`` with mean ``mean`` (float64; ``mean`` 1 gives ones)."""
    extra = mean - 1.0
    mu = math.log(max(extra, 1e-300)) - sigma * sigma / 2
    out = np.floor(rng.lognormal(mu, sigma, n) + 0.5) if extra > 0 else np.zeros(n)
    out += 1
    return out


def _returning_histories(
    cfg: SynthConfig, m: ArrivalModel, t: np.ndarray, cold: np.ndarray, k: np.ndarray, j: int
) -> None:
    """Give returning users' first requests their pre-existing history, in ``k`` (in place).

    A first request is a returning user's with probability ``returning_share``
    (``burst_returning_share`` inside a burst). Its own generator
    ``default_rng([seed, 5, j])``: with both shares 0 the trace is as without returning users.
    """
    rng = np.random.default_rng([cfg.seed, 5, j])
    idx = np.flatnonzero(cold)
    share = np.where(m.in_burst(t[idx]), cfg.burst_returning_share, cfg.returning_share)
    ret = idx[rng.random(len(idx)) < share]
    n = _lognormal_count(rng, cfg.returning_history_mean, cfg.returning_history_sigma, len(ret))
    np.clip(n, 1, cfg.max_seq_len, out=n)
    k[ret] = n


def _cap_history(st: UserState, user: np.ndarray, k: np.ndarray, cap: int) -> np.ndarray:
    """Drop items past each user's cumulative ``cap``, continuing ``st.history``."""
    if st.users > len(st.history):
        grown = np.zeros(max(st.users, 2 * len(st.history)), np.int64)
        grown[: len(st.history)] = st.history
        st.history = grown
    if len(k) == 0:
        return k
    order = np.argsort(user, kind="stable")
    us = user[order]
    ks = k[order]
    cs = np.cumsum(ks)
    starts = np.flatnonzero(np.r_[True, us[1:] != us[:-1]])
    ends = np.r_[starts[1:], len(us)] - 1
    base = np.r_[0, cs[starts[1:] - 1]] - st.history[us[starts]]
    within = cs - np.repeat(base, ends - starts + 1)  # history after each request
    capped = np.minimum(within, cap) - np.minimum(within - ks, cap)
    st.history[us[ends]] = np.minimum(within[ends], cap)
    out = np.empty_like(k)
    out[order] = capped
    return out
