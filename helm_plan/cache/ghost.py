"""Ghost caches: what each cache would gain or lose with ±δ of the pool, from its own lookups.

A server cannot replay a window at another split, but it can keep *shadow*
LRU stacks of the keys it looked up (a ghost cache, as in ARC) and read off
how many hits a larger or smaller cache would have had. The stack property
(:mod:`helm_plan.cache.stack`, :mod:`helm_plan.cache.kvcurve`) gives the hits
at every capacity from one pass, so a window's *ghost curves* are the hits
at each EMB share of a fine grid:

- EMB: byte stack distances over the node's own EMB lookups of the last
  ``history_windows`` windows and this one (:func:`core.lookup_stream` of
  the computed tokens the node actually served), binned at capacities
  ``g·B`` of the grid; the hit bytes of this window's lookups. The KV outcome
  is held at what the node served (the coupling moves the EMB stream, which a
  ghost cannot see).
- KV: the per-request token-weighted LRU distance over the node's own past
  requests (:class:`kvcurve.KvFeed`, carried from window to window: it
  depends only on who arrives with which history, never on ``r``), binned at
  KV capacities ``(1 − g)·B / kv_bytes_per_token``; the reused tokens of this
  window.

A node serving the whole trace observes contiguous spans (:meth:`Ghost.observe`);
a cluster node observes the trace indices it served (:meth:`Ghost.observe_requests`):
its caches see only its own requests, and so do its ghosts. Windows are
observed in order, each once.

Both are exact against replaying the window from cold at a static split
with enough history (tested): EMB with the same KV outcome, KV for
capacities at least the largest admitted context, as long as the EMB key
space is at most :data:`EXACT_KEYS`. Above it the EMB ghost is a stratified
SHARDS estimate (Waldspurger et al., FAST'15; :mod:`helm_plan.cache.shards`):
of a table that would keep fewer than :data:`MIN_SAMPLED_KEYS` keys in the
sample, every key is tracked (few rows, each hot: sampling a handful of them
is what makes SHARDS noisy); of the other tables only keys whose hash falls
under ``R = EXACT_KEYS / n_keys`` (fixed per workload, hash seed 0, so a run
repeats). A sampled key weighs ``b/R`` bytes in the stack (so distances
estimate the true bytes between two accesses, Horvitz-Thompson), and the
window's hits are scaled by its looked-up bytes over the tracked weight
(SHARDS's normalisation by the sampled references); lookup bytes stay exact.
The exact stack over an 8M-key catalogue costs a cache-missing Fenwick tree
walk per lookup, which made a 340k-request controller run take tens of
minutes; the sample keeps the tree in cache and the work in proportion to
``R`` (error: tested against the exact ghost). The budget, 16,384 keys, is where the
sample stops paying in accuracy: on ``benchmarks/bench_ghost_sample.py``'s trace (52k keys,
40k requests, 10-s windows) the curve's worst error over the grid is 0.3% of the window's
lookup bytes at 16,384 keys (R = 0.32; 2.6x less ghost time), the same at 32,768 (1.2x),
but 0.8% at 12,000 and 2.3% at 8,192 (3.2x): a table of 4k keys then falls to a few
hundred sampled ones.

With a short history the EMB ghost forgets reuse older than the history (an under-estimate at large
capacity, the price of bounded memory); a live node whose split moved has
caches that differ from a shadow at one fixed capacity.

:func:`gains` turns a curve pair into the marginal gains at ``r ± δ`` and
their value in service seconds (EMB bytes at the H2D + host gather cost, KV
tokens at the dense prefill cost per token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from helm_plan.cache import core
from helm_plan.cache.kvcurve import KvFeed
from helm_plan.cache.shards import key_hashes, threshold
from helm_plan.cache.stack import (
    WindowedPass,
    as_ids,
    as_sizes,
    check_grid,
    size_plan,
    stream_sizes,
)
from helm_plan.errors import ConfigError

GRID_POINTS = 101
"""EMB shares of the ghost grid: 0, 0.01, ..., 1."""
EXACT_KEYS = 1 << 14
"""Largest EMB key space the ghost tracks exactly; above it, a SHARDS sample of about this many
keys (module docstring)."""
MIN_SAMPLED_KEYS = 256
"""A table whose sample would hold fewer keys than this is tracked whole when the ghost samples."""


def sample_plan(key_table: np.ndarray, rate: float | None = None) -> tuple[np.ndarray, float]:
    """Which tables the ghost samples (bool per table) and at what rate (1: exact).

    ``rate`` forces the rate of the sampled tables (tests); by default it is 1 up to
    :data:`EXACT_KEYS` keys, else ``EXACT_KEYS / n_keys``.
    """
    if rate is None:
        rate = min(1.0, EXACT_KEYS / max(len(key_table), 1))
    if not 0.0 < rate <= 1.0:
        raise ConfigError(f"rate must be in (0, 1], got {rate}", hint="pass e.g. 0.125")
    counts = np.bincount(key_table, minlength=int(key_table.max(initial=-1)) + 1)
    return counts * rate >= MIN_SAMPLED_KEYS, float(rate)


@dataclass(frozen=True)
class GhostCurves:
    """One window's ghost curves on the share grid ``r_grid``."""

    r_grid: np.ndarray
    """EMB shares, float64 (0..1)."""
    emb_hit_bytes: np.ndarray
    """EMB hit bytes this window at EMB capacity ``r·B``, float64."""
    lookup_bytes: float
    """EMB bytes looked up this window."""
    kv_reused_tokens: np.ndarray
    """KV tokens reused this window at KV capacity ``(1 − r)·B``, float64."""
    ctx_tokens: float
    """Context tokens this window."""
    emb_hit_bytes_req: np.ndarray | None = None
    """Per request (rows, in the window's order): EMB hit bytes at each share, int64; only
    when observed with ``per_request``."""
    kv_reused_tokens_req: np.ndarray | None = None
    """Per request: KV tokens reused at each share, int64; only with ``per_request``."""


@dataclass(frozen=True)
class GhostGains:
    """Marginal gains of moving δ of the pool at EMB share ``r`` (rates and service seconds)."""

    emb_gain_up: float
    """EMB hit-rate gain (share of lookup bytes) with EMB share r + δ."""
    emb_loss_down: float
    """EMB hit-rate loss with EMB share r − δ."""
    kv_gain_down: float
    """KV reuse-rate gain (share of context tokens) with KV share 1 − r + δ (EMB share r − δ)."""
    kv_loss_up: float
    """KV reuse-rate loss with EMB share r + δ."""
    net_up_s: float
    """Service seconds this window would have saved at r + δ (EMB gain minus KV loss)."""
    net_down_s: float
    """Service seconds this window would have saved at r − δ (KV gain minus EMB loss)."""

    def as_dict(self) -> dict[str, float]:
        return {f"ghost_{k}": float(v) for k, v in self.__dict__.items()}


NO_GAINS = GhostGains(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
"""Gains of a window a ghost could not measure (no requests, or not contiguous)."""


def share_grid(points: int = GRID_POINTS) -> np.ndarray:
    """``points`` EMB shares evenly from 0 to 1."""
    return np.linspace(0.0, 1.0, points)


class Ghost:
    """Shadow EMB and KV LRU stacks over one node's own lookups (see the module docstring)."""

    def __init__(
        self,
        wl: core.Workload,
        pool_bytes: int,
        kv_bytes_per_token: int,
        history_windows: int = 1,
        rate: float | None = None,
    ) -> None:
        if history_windows < 0:
            raise ConfigError(
                f"history_windows must be >= 0, got {history_windows}",
                hint="pass how many past windows the EMB ghost remembers",
            )
        if pool_bytes <= 0 or kv_bytes_per_token <= 0:
            raise ConfigError(
                f"pool_bytes and kv_bytes_per_token must be positive, got {pool_bytes}, "
                f"{kv_bytes_per_token}",
                hint="pass the node's pool and the model's KV bytes per token",
            )
        self.wl = wl
        self.pool_bytes = int(pool_bytes)
        self.history_windows = history_windows
        self.r_grid = share_grid()
        self.emb_grid = np.floor(self.r_grid * pool_bytes).astype(np.int64)
        self.kv_grid = np.floor((1.0 - self.r_grid) * pool_bytes / kv_bytes_per_token).astype(
            np.int64
        )
        self._kv = KvFeed(wl)
        self._grid = np.unique(self.emb_grid)
        kb = as_sizes(wl.keys.key_bytes, wl.n_keys)[: wl.n_keys]
        big, self.rate = sample_plan(wl.keys.key_table, rate)
        self._kb_all = kb
        # every key one size (the shipped models): a request's lookup bytes are its count times it
        self._size_all = int(kb[0]) if len(kb) and int(kb.min()) == int(kb.max()) else 0
        self._dense: np.ndarray | None = None  # key -> tracked id (-1: not sampled)
        if self.rate < 1.0:
            sampled = big[wl.keys.key_table]
            picked = np.flatnonzero(~sampled | (key_hashes(wl.n_keys, 0) < threshold(self.rate)))
            self._dense = np.full(wl.n_keys, -1, np.int32)
            self._dense[picked] = np.arange(len(picked), dtype=np.int32)
            # a sampled key stands for 1/R keys of its size: its weight in the stack
            kb = np.where(sampled[picked], np.round(kb[picked] / self.rate), kb[picked])
            kb = np.ascontiguousarray(kb, np.int64)
        self._kb = kb
        self._one_size = bool(len(kb)) and int(kb.min()) == int(kb.max())
        self._plan = size_plan(kb, check_grid(self._grid))  # once, not every window
        self._passes = self._emb_passes()

    def _emb_passes(self) -> list[WindowedPass]:
        # the EMB stack of each key-size class, kept from window to window
        return [WindowedPass(self._kb, max_b, self._grid[idx], self.history_windows, census)
                for max_b, idx, census in self._plan]  # fmt: skip

    def reset(self) -> None:
        """Forget the remembered lookups (a cold node)."""
        self._passes = self._emb_passes()
        self._kv = KvFeed(self.wl)

    @property
    def exact_from_tokens(self) -> int:
        """The KV curve is exact at capacities from this many tokens up (largest admitted context)."""
        return self._kv.exact_from_tokens

    def observe(self, start: int, stop: int, n_computed: np.ndarray) -> GhostCurves:
        """Curves of requests ``[start, stop)`` served with ``n_computed`` prefill tokens each."""
        return self.observe_requests(np.arange(start, stop, dtype=np.int64), n_computed)

    def observe_requests(
        self, requests: np.ndarray, n_computed: np.ndarray, per_request: bool = False
    ) -> GhostCurves:
        """Curves of the requests at trace indices ``requests`` (ascending, after every earlier
        window's) served with ``n_computed`` prefill tokens each; with ``per_request`` also
        each request's own curves (what each request's service time would lose or gain)."""
        idx = np.ascontiguousarray(requests, np.int64)
        ids, offs = core.lookup_stream(self.wl, n_computed, requests=idx)
        look_req = None
        if self._dense is not None:  # SHARDS: the sampled keys' stream, exact lookup bytes
            ids, offs, look_req = self._sampled(ids, offs)
        ids, _ = as_ids(ids, len(self._kb))
        offs = np.ascontiguousarray(offs, np.int64)
        grid = self._grid
        # the stack remembers the last history_windows windows (WindowedPass): this window's
        # hits as if those were fed again first, for one window's work
        n_req = len(offs) - 1
        rows = np.arange(n_req + 1, dtype=np.int64) if per_request else np.array([0, n_req])
        sizes = None if self._one_size else stream_sizes(ids, self._kb, self._kb)
        hits = np.zeros((len(rows) - 1, len(grid)), np.int64)
        for (_, cols, _), sp in zip(self._plan, self._passes, strict=True):
            hits[:, cols] = sp.next_window(ids, sizes, offs, rows)
        look = (int(self._kb[0]) * int(offs[-1] - offs[0]) if sizes is None
                else int(sizes[offs[0] : offs[-1]].sum(dtype=np.int64)))  # fmt: skip
        at = np.searchsorted(grid, self.emb_grid)
        emb_req = hits[:, at] if per_request else None
        emb = (emb_req.sum(axis=0) if emb_req is not None else hits[-1][at]).astype(np.float64)
        if look_req is not None:
            # hits scaled by looked-up bytes over the tracked weight: SHARDS normalised by the
            # sampled references, so a hot key in or out of the sample does not tilt the curve
            total, sampled = float(look_req.sum()), float(look)
            scale = total / sampled if sampled > 0 else 0.0
            look = int(total)
            emb = np.minimum(emb * scale, total)
            if emb_req is not None:
                emb_req = np.round(emb_req * scale).astype(np.int64)
        kd = self._kv.feed(idx)
        d, c = kd.dist_tokens, kd.reuse_tokens
        found = d >= 0
        order = np.argsort(d[found], kind="stable")
        ds, cs = d[found][order], np.cumsum(c[found][order])
        k = np.searchsorted(ds, self.kv_grid, side="right")
        kv = np.where(k > 0, cs[np.maximum(k - 1, 0)] if len(cs) else 0, 0).astype(np.float64)
        kv_req = None
        if per_request:  # request i reuses c_i at every capacity of at least its distance
            kv_req = np.where(found[:, None] & (d[:, None] <= self.kv_grid[None, :]), c[:, None], 0)
        return GhostCurves(self.r_grid, emb, float(look), kv,
                           float(kd.ctx_len.sum()), emb_req, kv_req)  # fmt: skip

    def _sampled(
        self, ids: np.ndarray, offs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sampled keys of ``ids`` as sampled ids, each request's offsets into them, and
        each request's exact lookup bytes (one compiled pass: the numpy version was half the
        ghost's time on a 15M-lookup window)."""
        assert self._dense is not None
        out = np.empty(len(ids), np.int32)
        s_offs = np.empty(len(offs), np.int64)
        look = np.empty(len(offs) - 1, np.int64)
        n = _sample_stream(ids, np.ascontiguousarray(offs, np.int64), self._dense, self._kb_all,
                           self._size_all, out, s_offs, look)  # fmt: skip
        return out[:n], s_offs, look


def gains(
    curves: GhostCurves,
    r: float,
    delta: float,
    emb_s_per_byte: float,
    kv_s_per_token: float,
) -> GhostGains:
    """Marginal gains at share ``r`` for a move of ``delta`` (linear between grid shares).

    ``emb_s_per_byte`` is the service time a missed EMB byte costs;
    ``kv_s_per_token`` the prefill time of a recomputed token.
    """
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta}", hint="pass e.g. 0.05")
    if not np.isfinite(r):
        return NO_GAINS
    g = curves.r_grid
    lo, hi = max(r - delta, 0.0), min(r + delta, 1.0)
    e = np.interp([lo, r, hi], g, curves.emb_hit_bytes)
    k = np.interp([lo, r, hi], g, curves.kv_reused_tokens)
    lb, ct = curves.lookup_bytes, curves.ctx_tokens
    emb_up, emb_down = e[2] - e[1], e[1] - e[0]
    kv_down, kv_up = k[0] - k[1], k[1] - k[2]
    return GhostGains(
        emb_gain_up=emb_up / lb if lb else 0.0,
        emb_loss_down=emb_down / lb if lb else 0.0,
        kv_gain_down=kv_down / ct if ct else 0.0,
        kv_loss_up=kv_up / ct if ct else 0.0,
        net_up_s=emb_up * emb_s_per_byte - kv_up * kv_s_per_token,
        net_down_s=kv_down * kv_s_per_token - emb_down * emb_s_per_byte,
    )


@nb.njit(cache=True, nogil=True)
def _sample_stream(ids, offs, dense, kb, size_all, out, out_offs, look):  # noqa: ANN001, ANN202
    """Copy the sampled accesses (``dense[key] >= 0``) of ``ids`` as sampled ids into ``out``,
    with request offsets ``out_offs`` and each request's exact lookup bytes (``size_all``
    bytes a lookup where every key has that size, else ``kb[key]``); returns the count.

    Branch-free: every access is written at the next free slot and the count moves on only
    for a sampled one (a third of accesses are sampled at random, a branch the CPU cannot
    predict: the branching loop cost a third of the ghost's time in a plan)."""
    n = 0
    out_offs[0] = 0
    for j in range(offs.shape[0] - 1):
        a, b = offs[j], offs[j + 1]
        if size_all > 0:
            for i in range(a, b):
                d = dense[ids[i]]
                out[n] = d
                n += (d >> 31) + 1  # d is -1 (not sampled) or a tracked id >= 0
            look[j] = (b - a) * size_all
        else:
            t = 0
            for i in range(a, b):
                x = ids[i]
                t += kb[x]
                d = dense[x]
                out[n] = d
                n += (d >> 31) + 1
            look[j] = t
        out_offs[j + 1] = n
    return n
