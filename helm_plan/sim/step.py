"""The steppable node: one GPU served one window at a time from carried state.

:class:`NodeRunner` owns everything a running node carries across a window
boundary: the caches (:class:`~helm_plan.cache.core.CacheState`), the FIFO
slots' backlog, and a refill copy still in flight. ``step(r)`` serves the
next window at EMB share ``r``; every simulator that walks windows in order
(``simulate_node``, the carry oracle, the controller's environments, the
cluster) calls it, so the boundary logic exists once.

At a window boundary where ``r`` changes (DESIGN.md, Reallocation):

1. a copy still running is cancelled: rows not landed by the boundary are
   not copied, and the demand-miss H2D share ends there;
2. ``CacheState.resize``: the shrinking cache evicts LRU entries;
3. if the EMB cache grows, the refill mode (:mod:`helm_plan.sim.refill`)
   plans a copy of the hottest non-resident rows, "hottest" by EMB lookup
   counts of the previous non-empty window, as many as there are free rows.
   ``eager`` makes them resident at the boundary and blocks the node;
   ``throttled`` lands them one by one in the background while demand misses
   get ``1 - φ`` of the H2D link; ``lazy`` copies nothing;
4. a growing KV cache is always demand-filled: KV cannot be copied from host.

Accounting per window: ``h2d_bytes`` = (demand misses + prefetched rows that
land in the window) · row_bytes; ``prefetch_bytes`` = the prefetched part.
The H2D share a request sees is decided by its arrival time. A blocking
(eager) copy enters the FIFO at the boundary, before the window's requests.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from helm_plan.cache import core
from helm_plan.errors import ConfigError
from helm_plan.sim import metrics
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.queue import fifo
from helm_plan.sim.refill import get_refill

_NO_I32 = np.zeros(0, np.int32)
_NO_F64 = np.zeros(0, np.float64)


@dataclass(frozen=True, eq=False)
class WindowResult:
    """One served window: per-request outcomes of the requests arriving in it, and its figures."""

    window: int
    """Window index."""
    start_s: float
    """Window start, seconds."""
    end_s: float
    """Window end, seconds."""
    ratio: float
    """EMB share the window was served at."""
    first: int
    """Trace index of the window's first request (requests are ``[first, first + requests)``)."""
    sojourn_s: np.ndarray
    """Wait + service per request, seconds."""
    service_s: np.ndarray
    """Service time per request, seconds."""
    n_computed: np.ndarray
    """Computed (prefill) history tokens per request, int64."""
    n_reused: np.ndarray
    """History tokens reused from KV per request, int64."""
    ctx_len: np.ndarray
    """Context length per request, int64."""
    n_lookup: np.ndarray
    """EMB lookups per request, int64."""
    n_miss: np.ndarray
    """EMB misses per request, int64."""
    last_finish_s: float
    """When the window's last request finished, seconds (NaN when empty)."""
    p50_ms: float
    """Median sojourn, ms."""
    p99_ms: float
    """P99 sojourn, ms."""
    slo_attainment: float
    """Share of the window's requests with sojourn <= SLO."""
    throughput_rps: float
    """Requests / max(window length, last finish - window start)."""
    emb_hit_rate: float
    """1 - misses / lookups."""
    kv_reuse_rate: float
    """Reused / context tokens."""
    miss_bytes: int
    """Demand-miss H2D bytes."""
    prefetch_bytes: int
    """Refill-copy bytes landing in the window."""
    blocked_s: float
    """Time the node was blocked by an eager refill at this window's boundary, seconds."""

    @property
    def requests(self) -> int:
        return len(self.sojourn_s)

    @property
    def h2d_bytes(self) -> int:
        """Demand misses plus landed prefetch, bytes."""
        return self.miss_bytes + self.prefetch_bytes


class NodeRunner:
    """One node stepped window by window (see the module docstring).

    ``reset()`` starts a cold node before window 0; ``step(r)`` serves the
    next window; ``fork()`` is an independent copy for what-if evaluation
    (the carry oracle tries several ``r`` from the same state).
    """

    def __init__(self, ctx: NodeContext, cfg: NodeConfig) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.mode = get_refill(cfg.refill)
        self.edges = ctx.edges(cfg.window_s)
        self.n_windows = len(self.edges) - 1
        self.reset()

    def reset(self) -> None:
        """A cold node before window 0: empty caches, idle slots, no refill in flight."""
        self.window = 0
        self.ratio = float("nan")
        self.state: core.CacheState | None = None
        self.free_at_s = np.zeros(self.cfg.slots, np.float64)
        self._pend_rows, self._pend_ready = _NO_I32, _NO_F64
        self._landed = _NO_F64  # ready times of copied rows not yet counted
        self._share_iv: tuple[float, float, float] | None = None  # (from, until, share)
        self._counts: np.ndarray | None = None  # lookups per item, last non-empty window
        self._blocks: list[tuple[float, float]] = []  # eager copies (at, duration) not yet queued

    @property
    def done(self) -> bool:
        return self.window >= self.n_windows

    def fork(self) -> NodeRunner:
        """An independent copy: stepping it leaves this runner unchanged."""
        other = copy.copy(self)
        if self.state is not None:
            other.state = self.state.copy()
        other.free_at_s = self.free_at_s.copy()
        other._blocks = list(self._blocks)
        return other

    def step(self, r: float) -> WindowResult:
        """Serve the next window at EMB share ``r``."""
        if self.done:
            raise ConfigError(f"the node has served all {self.n_windows} windows; call reset()")
        if not (np.isfinite(r) and 0.0 <= r <= 1.0):
            raise ConfigError(f"ratio must be in [0, 1], got {r}")
        ctx, cfg, w = self.ctx, self.cfg, self.window
        a, m = ctx.arrays, ctx.model
        s, e = int(self.edges[w]), int(self.edges[w + 1])
        tb = w * cfg.window_s
        r = float(r)
        block_s = 0.0
        if self.state is None:
            self.state = core.new_state(a, r, ctx.pool_bytes, m)
        elif r != self.ratio:
            block_s = self._reallocate(r, tb)
        self.ratio = r
        if e > s:
            res = core.replay(
                a, self.state, s, e, max_seq_len=m.max_seq_len,
                prefetch_rows=self._pend_rows, prefetch_ready_s=self._pend_ready,
                count_lookups=self.mode.prefetches,
            )  # fmt: skip
            self._counts = res.lookup_counts
            if len(self._pend_rows):
                keep = self._pend_ready > a.ts_s[e - 1]
                self._pend_rows, self._pend_ready = self._pend_rows[keep], self._pend_ready[keep]
            share = np.ones(e - s, np.float64)
            if self._share_iv is not None:
                lo_t, hi_t, sh = self._share_iv
                lo, hi = np.searchsorted(a.ts_s[s:e], [lo_t, hi_t], side="left")
                share[lo:hi] = sh
            service = ctx.latency.service_time_s(
                res.n_computed, res.ctx_len, ctx.n_cand[s:e], res.n_lookup, res.n_miss, share
            )
            # Eager copies enter the FIFO at their boundary, ahead of the requests after it;
            # one at an empty window's boundary waits for the next window's first arrival.
            bt = np.array([b[0] for b in self._blocks], np.float64)
            bd = np.array([b[1] for b in self._blocks], np.float64)
            q = fifo(a.ts_s[s:e], service, cfg.slots, block_at_s=bt, block_dur_s=bd,
                     free_at_s=self.free_at_s)  # fmt: skip
            self._blocks = []
            self.free_at_s = q.free_at_s
            soj, finish = q.sojourn_s, q.finish_s
            outcomes = (res.n_computed, res.n_reused, res.ctx_len, res.n_lookup, res.n_miss)
        else:
            service = soj = finish = _NO_F64
            outcomes = tuple(np.zeros(0, np.int64) for _ in range(5))
        prefetch_rows = self._count_landed(w)
        self.window += 1
        n_comp, n_reuse, ctx_len, n_look, n_miss = outcomes
        lat = metrics.latency_figures(soj, cfg.slo_ms)
        last = float(np.max(a.ts_s[s:e] + soj)) if e > s else float("nan")
        return WindowResult(
            window=w, start_s=tb, end_s=tb + cfg.window_s, ratio=r, first=s,
            sojourn_s=soj, service_s=service, n_computed=n_comp, n_reused=n_reuse,
            ctx_len=ctx_len, n_lookup=n_look, n_miss=n_miss,
            last_finish_s=float(finish.max()) if e > s else float("nan"),
            p50_ms=lat.p50_ms, p99_ms=lat.p99_ms, slo_attainment=lat.slo_attainment,
            throughput_rps=metrics.throughput_rps(e - s, tb, cfg.window_s, last),
            emb_hit_rate=metrics.hit_rate(int(n_miss.sum()), int(n_look.sum())),
            kv_reuse_rate=metrics.reuse_rate(int(n_reuse.sum()), int(ctx_len.sum())),
            miss_bytes=int(n_miss.sum()) * m.row_bytes,
            prefetch_bytes=prefetch_rows * m.row_bytes,
            blocked_s=block_s,
        )  # fmt: skip

    def _reallocate(self, r: float, tb: float) -> float:
        """Boundary work of a ratio change at ``tb``; returns the eager block duration."""
        assert self.state is not None
        ctx, cfg = self.ctx, self.cfg
        # cancel a copy still running: rows not landed by tb are not copied
        if len(self._pend_rows):
            keep = self._pend_ready <= tb
            self._pend_rows, self._pend_ready = self._pend_rows[keep], self._pend_ready[keep]
        self._landed = self._landed[self._landed <= tb]
        if self._share_iv is not None and self._share_iv[1] > tb:
            self._share_iv = (self._share_iv[0], tb, self._share_iv[2])
        old_cap = self.state.emb_capacity_rows
        emb_rows, kv_tok = core.capacities(r, ctx.pool_bytes, ctx.model)
        self.state.resize(emb_rows, kv_tok)
        free = emb_rows - self.state.emb_rows_used
        if not (
            emb_rows > old_cap and free > 0 and self.mode.prefetches and self._counts is not None
        ):
            return 0.0
        rows = hottest_nonresident(self._counts, self.state.emb_resident, free)
        plan = self.mode.plan(rows, tb, ctx.latency, cfg.throttle_share)
        if not len(plan.rows):
            return 0.0
        self._pend_rows = np.concatenate([self._pend_rows, plan.rows])
        self._pend_ready = np.concatenate([self._pend_ready, plan.ready_s])
        self._landed = np.concatenate([self._landed, plan.ready_s])
        if plan.block_s > 0:
            self._blocks.append((tb, plan.block_s))
        self._share_iv = (
            (tb, plan.copy_end_s, plan.demand_share) if plan.demand_share < 1.0 else None
        )
        return plan.block_s

    def _count_landed(self, w: int) -> int:
        """Copied rows landing in window ``w`` (copies past the trace end never count)."""
        if not len(self._landed):
            return 0
        ws, n_w = self.cfg.window_s, self.n_windows
        t = self._landed
        wi = np.minimum((t // ws).astype(np.int64), n_w - 1)
        inside = t < n_w * ws
        n = int(np.count_nonzero(inside & (wi <= w)))
        self._landed = t[inside & (wi > w)]
        return n


def hottest_nonresident(counts: np.ndarray, resident: np.ndarray, k: int) -> np.ndarray:
    """Up to ``k`` non-resident items with lookups, most looked-up first (ties: lower id)."""
    cand = np.flatnonzero((counts > 0) & (resident == 0))
    if len(cand) == 0 or k <= 0:
        return np.zeros(0, np.int32)
    order = np.argsort(-counts[cand], kind="stable")
    return cand[order[:k]].astype(np.int32)
