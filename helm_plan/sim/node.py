"""The one-GPU node simulator: caches, service times, FIFO queue and reallocation.

:func:`simulate_node` replays a trace window by window through the compiled
cache core (:mod:`helm_plan.cache.core`) at a per-window EMB share ``r``,
turns each request's cache outcome into a service time with the latency
model, and serves the requests in a FIFO queue (:mod:`helm_plan.sim.queue`).

At a window boundary where ``r`` changes (DESIGN.md, Reallocation):

1. ``CacheState.resize``: the shrinking cache evicts LRU entries.
2. If the EMB cache grows, the refill mode (:mod:`helm_plan.sim.refill`)
   plans a copy of the hottest non-resident rows, "hottest" by EMB lookup
   counts of the previous window, as many as there are free rows. ``eager``
   makes them resident at the boundary and blocks the node; ``throttled``
   lands them one by one in the background while demand misses get
   ``1 - φ`` of the H2D link; ``lazy`` copies nothing. A copy still running at
   the next ratio change is cancelled there (rows not landed are not copied).
3. A growing KV cache is always demand-filled: KV cannot be copied from host.

Accounting per window: ``h2d_bytes`` = (demand misses + prefetched rows that
landed in the window) · row_bytes; ``prefetch_bytes`` = the prefetched part.
The H2D share a request sees is decided by its arrival time.

:func:`helm_plan.sim.span.evaluate_span` is the oracle's inner evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from helm_plan.cache import core
from helm_plan.config import require_positive
from helm_plan.errors import ConfigError
from helm_plan.sim.context import NodeContext
from helm_plan.sim.queue import fifo, window_stats
from helm_plan.sim.refill import REFILL_MODES, get_refill

DEFAULT_SLO_MS = 100.0
"""Default P99 SLO: the ~100 ms budget of an online ranking stage (HSTU-class GR serving)."""
DEFAULT_WINDOW_S = 10.0
"""Default window: at >=100 QPS per node a window holds >=1000 requests (>=10 above its P99),
and re-splitting HBM more often than every ~10 s mostly churns refill traffic."""


@dataclass(frozen=True)
class NodeConfig:
    """How one node is simulated."""

    slo_ms: float = DEFAULT_SLO_MS
    """P99 latency SLO, milliseconds (attainment = share of requests with sojourn <= SLO)."""
    window_s: float = DEFAULT_WINDOW_S
    """Window length, seconds; the ratio may change only at window boundaries."""
    slots: int = 1
    """Parallel executors of the FIFO queue."""
    refill: str = "throttled"
    """Refill mode of a growing EMB cache: lazy, eager or throttled (see helm_plan.sim.refill)."""
    throttle_share: float = 0.3
    """φ: share of the H2D bandwidth a throttled refill copy uses, in (0, 1)."""
    warmup_windows: int = 1
    """Leading windows left out of the overall figures (cold caches)."""

    def __post_init__(self) -> None:
        require_positive("slo_ms", self.slo_ms)
        require_positive("window_s", self.window_s)
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots <= 0:
            raise ConfigError(f"slots must be a positive integer, got {self.slots}")
        if str(self.refill) not in REFILL_MODES:
            raise ConfigError(
                f"unknown refill mode {str(self.refill)!r}",
                hint=f"use one of {', '.join(REFILL_MODES)}",
            )
        if not 0.0 < self.throttle_share < 1.0:
            raise ConfigError(f"throttle_share must be in (0, 1), got {self.throttle_share}")
        if (
            isinstance(self.warmup_windows, bool)
            or not isinstance(self.warmup_windows, int)
            or self.warmup_windows < 0
        ):
            raise ConfigError(f"warmup_windows must be an integer >= 0, got {self.warmup_windows}")


@dataclass(frozen=True, eq=False)
class NodeResult:
    """Outcome of one node simulation."""

    ratios: np.ndarray
    """EMB share per window."""
    sojourn_s: np.ndarray
    """Wait + service per request, seconds."""
    service_s: np.ndarray
    """Service time per request, seconds."""
    n_miss: np.ndarray
    """EMB misses per request."""
    n_computed: np.ndarray
    """Computed (prefill) history tokens per request."""
    window_idx: np.ndarray
    """Window of each request, int64."""
    windows: pl.DataFrame
    """Per-window figures (see simulate_node)."""
    p50_ms: float
    """Overall median sojourn over measured windows, ms."""
    p99_ms: float
    """Overall P99 sojourn over measured windows, ms."""
    slo_attainment: float
    """Overall share of measured requests with sojourn <= SLO."""
    throughput_rps: float
    """Measured requests / (last finish - first measured window start)."""
    emb_hit_rate: float
    """EMB hit rate over measured requests."""
    kv_reuse_rate: float
    """Share of context tokens reused from KV over measured requests."""
    h2d_bytes: int
    """H2D bytes (demand + prefetch) over measured windows."""
    prefetch_bytes: int
    """Refill-copy bytes over measured windows."""
    blocked_s: float
    """Time the node was blocked by eager refills, seconds (all windows)."""
    requests: int
    """Measured requests."""
    measured_from_window: int
    """First window counted in the overall figures."""


def _hottest_nonresident(counts: np.ndarray, resident: np.ndarray, k: int) -> np.ndarray:
    cand = np.flatnonzero((counts > 0) & (resident == 0))
    if len(cand) == 0 or k <= 0:
        return np.zeros(0, np.int32)
    order = np.argsort(-counts[cand], kind="stable")  # ties: lower dense id first
    return cand[order[:k]].astype(np.int32)


def simulate_node(ctx: NodeContext, ratios_per_window: np.ndarray, cfg: NodeConfig) -> NodeResult:
    """Simulate the whole trace on one node with EMB share ``ratios_per_window[w]`` in window w.

    ``windows`` columns: window, start_s, end_s, ratio, requests, p50_ms,
    p99_ms, slo_attainment, throughput_rps, emb_hit_rate, kv_reuse_rate,
    h2d_bytes, prefetch_bytes, blocked_ms, measured (False for warm-up windows).
    """
    a = ctx.arrays
    m = ctx.model
    lat = ctx.latency
    edges = ctx.edges(cfg.window_s)
    n_w = len(edges) - 1
    ratios = np.asarray(ratios_per_window, np.float64).reshape(-1)
    if len(ratios) == 1 and n_w > 1:
        ratios = np.full(n_w, ratios[0])
    if len(ratios) != n_w:
        raise ConfigError(
            f"ratios_per_window has {len(ratios)} entries but the trace has {n_w} windows "
            f"of {cfg.window_s} s"
        )
    if n_w and not (np.all(np.isfinite(ratios)) and ratios.min() >= 0 and ratios.max() <= 1):
        bad = ratios[~(np.isfinite(ratios) & (ratios >= 0) & (ratios <= 1))][0]
        raise ConfigError(f"ratio must be in [0, 1], got {bad}")
    mode = get_refill(cfg.refill)
    n = a.n_requests
    n_computed = np.zeros(n, np.int64)
    n_reused = np.zeros(n, np.int64)
    n_lookup = np.zeros(n, np.int64)
    n_miss = np.zeros(n, np.int64)
    share = np.ones(n, np.float64)
    blocks_t: list[float] = []
    blocks_d: list[float] = []
    landed: list[np.ndarray] = []  # ready times of prefetched rows actually copied
    pend_rows = np.zeros(0, np.int32)
    pend_ready = np.zeros(0, np.float64)
    share_iv: tuple[float, float, float] | None = None  # (from, until, share)
    prev_counts: np.ndarray | None = None
    state = core.new_state(a, float(ratios[0]) if n_w else 0.0, ctx.pool_bytes, m)
    if n_w and np.all(ratios == ratios[0]):
        # constant ratio: no resize and no refill, so one replay covers every window
        res = core.replay(a, state, 0, n, max_seq_len=m.max_seq_len)
        n_computed, n_reused, n_lookup, n_miss = (
            res.n_computed, res.n_reused, res.n_lookup, res.n_miss,
        )  # fmt: skip
        n_w_loop = 0
    else:
        n_w_loop = n_w
    for w in range(n_w_loop):
        s, e = int(edges[w]), int(edges[w + 1])
        tb = w * cfg.window_s
        if w > 0 and ratios[w] != ratios[w - 1]:
            # cancel a copy still running: rows not landed by tb are not copied
            if len(pend_rows):
                keep = pend_ready <= tb
                pend_rows, pend_ready = pend_rows[keep], pend_ready[keep]
            if landed:
                landed[-1] = landed[-1][landed[-1] <= tb]
            if share_iv is not None and share_iv[1] > tb:
                share_iv = (share_iv[0], tb, share_iv[2])
            old_cap = state.emb_capacity_rows
            emb_rows, kv_tok = core.capacities(float(ratios[w]), ctx.pool_bytes, m)
            state.resize(emb_rows, kv_tok)
            free = emb_rows - state.emb_rows_used
            if emb_rows > old_cap and free > 0 and mode.prefetches and prev_counts is not None:
                rows = _hottest_nonresident(prev_counts, state.emb_resident, free)
                plan = mode.plan(rows, tb, lat, cfg.throttle_share)
                if len(plan.rows):
                    if share_iv is not None:
                        _apply_share(a.ts_s, share, share_iv)
                    pend_rows = np.concatenate([pend_rows, plan.rows])
                    pend_ready = np.concatenate([pend_ready, plan.ready_s])
                    landed.append(plan.ready_s)
                    if plan.block_s > 0:
                        blocks_t.append(tb)
                        blocks_d.append(plan.block_s)
                    share_iv = (
                        (tb, plan.copy_end_s, plan.demand_share)
                        if plan.demand_share < 1.0
                        else None
                    )
        if e > s:
            res = core.replay(
                a, state, s, e, max_seq_len=m.max_seq_len,
                prefetch_rows=pend_rows, prefetch_ready_s=pend_ready,
                count_lookups=mode.prefetches,
            )  # fmt: skip
            n_computed[s:e] = res.n_computed
            n_reused[s:e] = res.n_reused
            n_lookup[s:e] = res.n_lookup
            n_miss[s:e] = res.n_miss
            prev_counts = res.lookup_counts
            if len(pend_rows):
                keep = pend_ready > a.ts_s[e - 1]
                pend_rows, pend_ready = pend_rows[keep], pend_ready[keep]
    if share_iv is not None:
        _apply_share(a.ts_s, share, share_iv)
    landed_t = np.concatenate(landed) if landed else np.zeros(0)
    landed_t = landed_t[landed_t < n_w * cfg.window_s]  # copies past the trace end are not counted

    service = lat.service_time_s(n_computed, ctx.ctx_len, ctx.n_cand, n_lookup, n_miss, share)
    q = fifo(
        a.ts_s, service, cfg.slots,
        block_at_s=np.asarray(blocks_t, np.float64), block_dur_s=np.asarray(blocks_d, np.float64),
    )  # fmt: skip
    slo_s = cfg.slo_ms / 1e3
    st = window_stats(a.ts_s, q.sojourn_s, edges, cfg.window_s, slo_s)
    win_idx = np.repeat(np.arange(n_w, dtype=np.int64), np.diff(edges))
    miss_w = np.bincount(win_idx, weights=n_miss, minlength=n_w)
    look_w = np.bincount(win_idx, weights=n_lookup, minlength=n_w)
    reuse_w = np.bincount(win_idx, weights=n_reused, minlength=n_w)
    ctxl_w = np.bincount(win_idx, weights=ctx.ctx_len, minlength=n_w)
    pf_rows_w = np.zeros(n_w, np.int64)
    if len(landed_t):
        wi = np.minimum((landed_t // cfg.window_s).astype(np.int64), n_w - 1)
        pf_rows_w = np.bincount(wi, minlength=n_w).astype(np.int64)
    blocked_w = np.zeros(n_w)
    for t, d in zip(blocks_t, blocks_d, strict=True):
        blocked_w[min(int(t // cfg.window_s), n_w - 1)] += d
    rb = m.row_bytes
    with np.errstate(invalid="ignore", divide="ignore"):
        emb_hit_w = np.where(look_w > 0, 1.0 - miss_w / np.maximum(look_w, 1), np.nan)
        kv_w = np.where(ctxl_w > 0, reuse_w / np.maximum(ctxl_w, 1), np.nan)
    warm = min(cfg.warmup_windows, max(n_w - 1, 0))
    windows = pl.DataFrame(
        {
            "window": np.arange(n_w, dtype=np.int64),
            "start_s": np.arange(n_w, dtype=np.float64) * cfg.window_s,
            "end_s": (np.arange(n_w, dtype=np.float64) + 1) * cfg.window_s,
            "ratio": ratios,
            "requests": st["requests"],
            "p50_ms": st["p50_ms"],
            "p99_ms": st["p99_ms"],
            "slo_attainment": st["slo_attainment"],
            "throughput_rps": st["throughput_rps"],
            "emb_hit_rate": emb_hit_w,
            "kv_reuse_rate": kv_w,
            "h2d_bytes": (miss_w.astype(np.int64) + pf_rows_w) * rb,
            "prefetch_bytes": pf_rows_w * rb,
            "blocked_ms": blocked_w * 1e3,
            "measured": np.arange(n_w) >= warm,
        }
    )
    i0 = int(edges[warm]) if n_w else 0
    soj = q.sojourn_s[i0:]
    n_meas = len(soj)
    lk = int(n_lookup[i0:].sum())
    cl = int(ctx.ctx_len[i0:].sum())
    span = (float(q.finish_s[i0:].max()) - warm * cfg.window_s) if n_meas else 0.0
    return NodeResult(
        ratios=ratios,
        sojourn_s=q.sojourn_s,
        service_s=service,
        n_miss=n_miss,
        n_computed=n_computed,
        window_idx=win_idx,
        windows=windows,
        p50_ms=float(np.percentile(soj, 50) * 1e3) if n_meas else float("nan"),
        p99_ms=float(np.percentile(soj, 99) * 1e3) if n_meas else float("nan"),
        slo_attainment=float(np.mean(soj <= slo_s)) if n_meas else float("nan"),
        throughput_rps=n_meas / span if span > 0 else float("nan"),
        emb_hit_rate=1.0 - int(n_miss[i0:].sum()) / lk if lk else float("nan"),
        kv_reuse_rate=int(n_reused[i0:].sum()) / cl if cl else float("nan"),
        h2d_bytes=int(windows["h2d_bytes"][warm:].sum()) if n_w else 0,
        prefetch_bytes=int(windows["prefetch_bytes"][warm:].sum()) if n_w else 0,
        blocked_s=q.blocked_s,
        requests=n_meas,
        measured_from_window=warm,
    )


def _apply_share(ts: np.ndarray, share: np.ndarray, iv: tuple[float, float, float]) -> None:
    lo, hi = np.searchsorted(ts, [iv[0], iv[1]], side="left")
    share[lo:hi] = iv[2]
