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
   plans a copy of the hottest non-resident keys that fit the free bytes,
   "hottest" by lookup counts halved at every boundary (so keys a shrink
   evicted stay hot for a while). ``eager`` makes them resident at the
   boundary and blocks the node; ``throttled`` lands them one by one in the
   background while demand misses get ``1 - φ`` of the H2D link; ``lazy``
   copies nothing;
4. a growing KV cache is always demand-filled: KV cannot be copied from host.

Then the window's requests replay through the caches in arrival order and are
served in batches (:mod:`helm_plan.sim.batching`). Accounting per window:
``h2d_bytes`` = demand-miss bytes + bytes of prefetched keys that land in the
window; ``prefetch_bytes`` = the prefetched part. The H2D share a request
sees, and whether a prefetched key has landed, are decided by its arrival
time. A blocking (eager) copy enters the queue at the boundary, before the
window's requests.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from helm_plan.cache import core
from helm_plan.errors import ConfigError
from helm_plan.sim import metrics
from helm_plan.sim.batching import BatchResult, batch_terms, serve
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
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
    """Trace index of the window's first request when they are contiguous (a node serving the
    whole trace: ``[first, first + requests)``), else -1."""
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
    n_cand: np.ndarray
    """Candidates per request, int64."""
    lookup_bytes: np.ndarray
    """EMB bytes looked up per request, int64."""
    miss_bytes_req: np.ndarray
    """EMB bytes missed per request, int64."""
    n_miss: np.ndarray
    """EMB keys missed per request, int64."""
    batch_size: np.ndarray
    """Requests in each request's batch, int32."""
    last_finish_s: float
    """When the window's last request finished, seconds (NaN when empty)."""
    p50_ms: float
    """Median sojourn, ms."""
    p99_ms: float
    """P99 sojourn, ms."""
    slo_attainment: float
    """Share of the window's requests with sojourn <= SLO."""
    mean_ms: float
    """Mean sojourn, ms."""
    throughput_rps: float
    """Requests / max(window length, last finish - window start)."""
    emb_hit_rate: float
    """1 - missed bytes / looked-up bytes."""
    kv_reuse_rate: float
    """Reused / context tokens."""
    miss_bytes: int
    """Demand-miss H2D bytes."""
    prefetch_bytes: int
    """Refill-copy bytes landing in the window."""
    blocked_s: float
    """Time the node was blocked by an eager refill at this window's boundary, seconds."""
    term_s: dict[str, float]
    """Service time by term of T(B) summed over the window's batches, seconds
    (:func:`helm_plan.sim.batching.batch_terms`)."""

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
        core.require_tokens(ctx.workload)  # the cluster kernel reads the tokens directly
        self.ctx = ctx
        self.cfg = cfg.for_context(ctx)
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
        self._pend_keys, self._pend_ready = _NO_I32, _NO_F64
        self._landed = _NO_F64  # ready times of copied keys not yet counted
        self._landed_b = _NO_F64  # and their bytes
        self._share_iv: tuple[float, float, float] | None = None  # (from, until, share)
        # the implicit draws' token ring, carried from window to window: a fresh one per window
        # would be refilled from the last W stream tokens, scattered over many users'
        # histories (every page of a spilled token file, and time)
        self._ring: tuple[np.ndarray, np.ndarray] | None = None
        # decayed lookups per key: the refill's hotness signal
        self._counts = (
            np.zeros(self.ctx.workload.n_keys, np.float32) if self.mode.prefetches else None
        )

    @property
    def done(self) -> bool:
        return self.window >= self.n_windows

    def fork(self) -> NodeRunner:
        """An independent copy: stepping it leaves this runner unchanged."""
        other = copy.copy(self)
        if self.state is not None:
            other.state = self.state.copy()
        other.free_at_s = self.free_at_s.copy()
        if self._counts is not None:
            other._counts = self._counts.copy()
        if self._ring is not None:
            other._ring = (self._ring[0].copy(), self._ring[1].copy())
        return other

    def step(self, r: float) -> WindowResult:
        """Serve the next window at EMB share ``r``: boundary, replay, batches, accounting."""
        block_s = self.begin_window(r)
        ctx, cfg = self.ctx, self.cfg
        s, e = int(self.edges[self.window]), int(self.edges[self.window + 1])
        ts = ctx.arrays.ts_s[s:e]
        if self._ring is None:
            self._ring = core.token_ring(ctx.arrays)
        res = core.replay(
            ctx.workload, self.state, s, e, prefetch_keys=self._pend_keys,
            prefetch_ready_s=self._pend_ready, counts=self._counts, ring=self._ring,
        )  # fmt: skip
        q = serve(
            ts, res.n_computed, res.ctx_len, res.n_cand, res.lookup_bytes, res.miss_bytes,
            ctx.latency.coeffs, slots=cfg.slots, batch_max=cfg.batch_max,
            batch_timeout_s=cfg.batch_timeout_ms / 1e3, batching=cfg.batching,
            h2d_share=self.h2d_share(ts),
            block_at_s=np.array([self.window * cfg.window_s]) if block_s > 0 else None,
            block_dur_s=np.array([block_s]) if block_s > 0 else None,
            free_at_s=self.free_at_s,
        )  # fmt: skip
        self.free_at_s = q.free_at_s
        return self.finish_window(ts, res, q, block_s, first=s)

    # The three phases of a step are public so a cluster can serve one window on many
    # nodes at once (its own request kernel between begin_window and finish_window)
    # without a second copy of the boundary or accounting logic.

    def begin_window(self, r: float) -> float:
        """Boundary work before the next window at EMB share ``r``; returns the eager block, s.

        Creates the caches before window 0; afterwards halves the refill's
        hotness and, if ``r`` changed, cancels a running copy, resizes the caches
        and plans the refill (:meth:`pending_prefetch`, :meth:`h2d_share`).
        """
        if self.done:
            raise ConfigError(
                f"the node has served all {self.n_windows} windows", hint="call reset() first"
            )
        if not (np.isfinite(r) and 0.0 <= r <= 1.0):
            raise ConfigError(f"ratio must be in [0, 1], got {r}", hint="decide r in [0, 1]")
        r = float(r)
        block_s = 0.0
        if self.state is None:
            self.state = core.new_state(self.ctx.workload, r, self.ctx.pool_bytes, self.ctx.model)
        else:
            if self._counts is not None:
                self._counts *= 0.5  # a boundary halves the hotness of every key
            if r != self.ratio:
                block_s = self._reallocate(r, self.window * self.cfg.window_s)
        self.ratio = r
        return block_s

    def adopt(self, state: core.CacheState, counts: np.ndarray | None = None) -> None:
        """Carry on from caller-owned arrays with the same contents as the node's own.

        A cluster keeps every node's caches (and refill hotness ``counts``) as
        views into stacked arrays that its request kernel indexes; after
        copying the node's contents into them it hands the views over here, so
        the boundary logic keeps working on the memory the kernel serves from.
        """
        if self.state is None:
            raise ConfigError("adopt needs a started node", hint="call begin_window first")
        if (counts is None) != (self._counts is None):
            raise ConfigError(
                "adopt: pass hotness counts exactly when the refill mode copies rows",
                hint=f"refill {self.cfg.refill!r} {'copies' if self._counts is not None else 'does not copy'}",
            )
        self.state = state
        if counts is not None:
            self._counts = counts

    @property
    def pending_prefetch(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, ready times) of the refill copy not yet landed, in copy order."""
        return self._pend_keys, self._pend_ready

    @property
    def counts(self) -> np.ndarray | None:
        """Decayed lookups per key (float32), if the refill mode copies; else None."""
        return self._counts

    def h2d_share(self, arrival_s: np.ndarray) -> np.ndarray:
        """The share of the H2D link demand misses get, per arrival (1 outside a copy)."""
        share = np.ones(len(arrival_s), np.float64)
        if self._share_iv is not None:
            lo_t, hi_t, sh = self._share_iv
            lo, hi = np.searchsorted(arrival_s, [lo_t, hi_t], side="left")
            share[lo:hi] = sh
        return share

    def finish_window(
        self,
        arrival_s: np.ndarray,
        res: core.ReplayResult,
        q: BatchResult,
        block_s: float,
        first: int = -1,
    ) -> WindowResult:
        """Close the window: drop the prefetches the replay consumed, count landed bytes, figures.

        ``arrival_s``, ``res`` and ``q`` describe the requests this node served
        in the window (sorted by arrival); ``first`` is the trace index of the
        first when they are contiguous (-1 otherwise).
        """
        cfg, w = self.cfg, self.window
        tb = w * cfg.window_s
        n = len(arrival_s)
        if len(self._pend_keys) and n:
            keep = self._pend_ready > arrival_s[-1]
            self._pend_keys, self._pend_ready = self._pend_keys[keep], self._pend_ready[keep]
        soj = q.finish_s - arrival_s
        terms = batch_terms(q, res.n_computed, res.ctx_len, res.n_cand, res.lookup_bytes,
                            res.miss_bytes, self.h2d_share(arrival_s), self.ctx.latency)  # fmt: skip
        prefetch_b = self._count_landed(w)
        self.window += 1
        lat = metrics.latency_figures(soj, cfg.slo_ms)
        last = float(np.max(arrival_s + soj)) if n else float("nan")
        miss_b = int(res.miss_bytes.sum())
        return WindowResult(
            window=w, start_s=tb, end_s=tb + cfg.window_s, ratio=self.ratio, first=first,
            sojourn_s=soj, service_s=q.service_s, n_computed=res.n_computed,
            n_reused=res.n_reused, ctx_len=res.ctx_len, n_cand=res.n_cand,
            lookup_bytes=res.lookup_bytes, miss_bytes_req=res.miss_bytes, n_miss=res.n_miss,
            batch_size=q.batch_size,
            last_finish_s=float(q.finish_s.max()) if n else float("nan"),
            p50_ms=lat.p50_ms, p99_ms=lat.p99_ms, slo_attainment=lat.slo_attainment, mean_ms=lat.mean_ms,
            throughput_rps=metrics.throughput_rps(n, tb, cfg.window_s, last),
            emb_hit_rate=metrics.hit_rate(miss_b, int(res.lookup_bytes.sum())),
            kv_reuse_rate=metrics.reuse_rate(int(res.n_reused.sum()), int(res.ctx_len.sum())),
            miss_bytes=miss_b,
            prefetch_bytes=prefetch_b,
            blocked_s=block_s,
            term_s=terms,
        )  # fmt: skip

    def _reallocate(self, r: float, tb: float) -> float:
        """Boundary work of a ratio change at ``tb``; returns the eager block duration."""
        assert self.state is not None
        ctx, cfg = self.ctx, self.cfg
        # cancel a copy still running: keys not landed by tb are not copied
        if len(self._pend_keys):
            keep = self._pend_ready <= tb
            self._pend_keys, self._pend_ready = self._pend_keys[keep], self._pend_ready[keep]
        done = self._landed <= tb
        self._landed, self._landed_b = self._landed[done], self._landed_b[done]
        if self._share_iv is not None and self._share_iv[1] > tb:
            self._share_iv = (self._share_iv[0], tb, self._share_iv[2])
        old_cap = self.state.emb_capacity_bytes
        emb_b, kv_tok = core.capacities(r, ctx.pool_bytes, ctx.model)
        self.state.resize(emb_b, kv_tok)
        free = emb_b - self.state.emb_bytes_used
        if not (emb_b > old_cap and free > 0 and self._counts is not None):
            return 0.0
        kb = ctx.workload.keys.key_bytes
        keys = hottest_missing(self._counts, self.state.emb_resident, kb, free)
        plan = self.mode.plan(keys, kb[keys], tb, ctx.latency, cfg.throttle_share)
        if not len(plan.keys):
            return 0.0
        self._pend_keys = np.concatenate([self._pend_keys, plan.keys])
        self._pend_ready = np.concatenate([self._pend_ready, plan.ready_s])
        self._landed = np.concatenate([self._landed, plan.ready_s])
        self._landed_b = np.concatenate([self._landed_b, kb[plan.keys].astype(np.float64)])
        self._share_iv = (
            (tb, plan.copy_end_s, plan.demand_share) if plan.demand_share < 1.0 else None
        )
        return plan.block_s

    def _count_landed(self, w: int) -> int:
        """Bytes of copied keys landing in window ``w`` (copies past the trace end never count)."""
        if not len(self._landed):
            return 0
        ws, n_w = self.cfg.window_s, self.n_windows
        t = self._landed
        wi = np.minimum((t // ws).astype(np.int64), n_w - 1)
        inside = t < n_w * ws
        now = inside & (wi <= w)
        n = int(self._landed_b[now].sum())
        later = inside & (wi > w)
        self._landed, self._landed_b = t[later], self._landed_b[later]
        return n


def hottest_missing(
    counts: np.ndarray, resident: np.ndarray, key_bytes: np.ndarray, free_bytes: int
) -> np.ndarray:
    """Non-resident keys with lookups, hottest first (ties: lower key), while they fit ``free_bytes``."""
    cand = np.flatnonzero((counts > 0) & ~resident)
    if len(cand) == 0 or free_bytes <= 0:
        return np.zeros(0, np.int32)
    order = cand[np.argsort(-counts[cand], kind="stable")]
    fits = np.cumsum(key_bytes[order]) <= free_bytes
    return order[fits].astype(np.int32)
