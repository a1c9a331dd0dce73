"""The one-GPU node simulator: a policy drives :class:`~helm_plan.sim.step.NodeRunner` window by window.

:func:`simulate_node` resets the policy and the node, then at each boundary
asks the policy for ``r`` (from what the node measured so far) and serves the
window with ``NodeRunner.step(r)``; the per-window results are gathered into
one :class:`NodeResult`. The boundary, refill, replay, service-time and FIFO
logic lives in :mod:`helm_plan.sim.step` only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from helm_plan.errors import ConfigError
from helm_plan.latency.model import TERMS
from helm_plan.sim import metrics
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import Observation, Policy, SchedulePolicy, runner_config
from helm_plan.sim.step import NodeRunner, WindowResult


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
    """EMB keys missed per request."""
    n_computed: np.ndarray
    """Computed (prefill) history tokens per request."""
    lookup_bytes: np.ndarray
    """EMB bytes looked up per request."""
    miss_bytes: np.ndarray
    """EMB bytes missed per request."""
    batch_size: np.ndarray
    """Requests in each request's batch, int32."""
    windows: pl.DataFrame
    """Per-window figures (see simulate_node)."""
    p50_ms: float
    """Overall median sojourn over measured windows, ms."""
    p99_ms: float
    """Overall P99 sojourn over measured windows, ms."""
    slo_attainment: float
    """Overall share of measured requests with sojourn <= SLO."""
    mean_ms: float
    """Overall mean sojourn over measured windows, ms."""
    throughput_rps: float
    """Measured requests / (last finish - first measured window start)."""
    emb_hit_rate: float
    """EMB byte hit rate over measured requests (1 - missed / looked-up bytes)."""
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
    term_s: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """Service time by term summed per window, seconds (helm_plan.latency.model.TERMS)."""
    policy_stats: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What the policy measured about itself in this run (:meth:`Policy.stats`: e.g. the
    controller's decision latencies); empty for policies that measure nothing."""

    @property
    def window_idx(self) -> np.ndarray:
        """Window of each request, int64: derived from ``windows`` on each access (keep it in
        a local), so a stored result (one per static split and policy in ``analyze``) holds
        8 bytes less per request."""
        counts = self.windows["requests"].to_numpy()
        return np.repeat(np.arange(len(counts), dtype=np.int64), counts)

    def compact(self) -> NodeResult:
        """The same result without per-request arrays but the sojourns (a few bytes per request)."""
        empty = {k: getattr(self, k)[:0] for k in _PER_REQUEST}
        return dataclasses.replace(self, **empty)


_PER_REQUEST = ("service_s", "n_miss", "n_computed", "lookup_bytes", "miss_bytes", "batch_size")
"""NodeResult fields with one entry per request that compact() drops."""


def simulate_node(ctx: NodeContext, policy: Policy | np.ndarray, cfg: NodeConfig) -> NodeResult:
    """Simulate the whole trace on one node, ``policy`` choosing r at every window boundary.

    ``policy`` may also be an array of one ratio per window (or a single
    ratio for all). ``windows`` columns: window, start_s, end_s, ratio,
    requests, p50_ms, p99_ms, slo_attainment, throughput_rps, emb_hit_rate,
    kv_reuse_rate, h2d_bytes, prefetch_bytes, blocked_ms, measured (False for
    warm-up windows).
    """
    cfg = cfg.for_context(ctx)
    n_w = ctx.n_windows(cfg.window_s)
    if not isinstance(policy, Policy):
        r = np.asarray(policy, np.float64).reshape(-1)
        if len(r) == 1 and n_w > 1:
            r = np.full(n_w, r[0])
        if len(r) != n_w:
            raise ConfigError(
                f"ratios_per_window has {len(r)} entries but the trace has {n_w} windows "
                f"of {cfg.window_s} s",
                hint="pass one ratio per window, or one for all",
            )
        policy = SchedulePolicy(r)
    runner = NodeRunner(ctx, runner_config(cfg, [policy]))
    policy.reset()
    feats = metrics.window_features(
        ctx.arrays.ts_s, runner.edges, cfg.window_s, ctx.first_visit, ctx.ctx_len
    )
    results: list[WindowResult] = []
    last: WindowResult | None = None
    for w in range(n_w):
        prev = {k: float(v[w - 1]) for k, v in feats.items()} if w else {}
        last = runner.step(policy.decide(Observation(w, runner.ratio, last, prev)))
        results.append(last)
    out = collect(results, cfg)
    # a policy registered on the protocol without subclassing it may lack stats()
    stats = policy.stats() if hasattr(policy, "stats") else {}
    return dataclasses.replace(out, policy_stats=stats) if stats else out


def collect(results: list[WindowResult], cfg: NodeConfig) -> NodeResult:
    """One NodeResult from the windows a node served, in order."""
    n_w = len(results)

    def cat(name: str, dtype: type) -> np.ndarray:
        parts = [getattr(r, name) for r in results]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    sojourn = cat("sojourn_s", np.float64)
    look_b, miss_b = cat("lookup_bytes", np.int64), cat("miss_bytes_req", np.int64)
    n_reused, ctx_len = cat("n_reused", np.int64), cat("ctx_len", np.int64)
    counts = np.array([r.requests for r in results], np.int64)
    warm = min(cfg.warmup_windows, max(n_w - 1, 0))
    windows = pl.DataFrame(
        {
            "window": np.arange(n_w, dtype=np.int64),
            "start_s": np.array([r.start_s for r in results], np.float64),
            "end_s": np.array([r.end_s for r in results], np.float64),
            "ratio": np.array([r.ratio for r in results], np.float64),
            "requests": counts,
            "p50_ms": np.array([r.p50_ms for r in results], np.float64),
            "p99_ms": np.array([r.p99_ms for r in results], np.float64),
            "slo_attainment": np.array([r.slo_attainment for r in results], np.float64),
            "throughput_rps": np.array([r.throughput_rps for r in results], np.float64),
            "emb_hit_rate": np.array([r.emb_hit_rate for r in results], np.float64),
            "kv_reuse_rate": np.array([r.kv_reuse_rate for r in results], np.float64),
            "h2d_bytes": np.array([r.h2d_bytes for r in results], np.int64),
            "prefetch_bytes": np.array([r.prefetch_bytes for r in results], np.int64),
            "blocked_ms": np.array([r.blocked_s * 1e3 for r in results], np.float64),
            "measured": np.arange(n_w) >= warm,
        }
    )
    i0 = int(counts[:warm].sum())
    soj = sojourn[i0:]
    lat = metrics.latency_figures(soj, cfg.slo_ms)
    finish = [r.last_finish_s for r in results[warm:] if r.requests]
    span = (max(finish) - warm * cfg.window_s) if finish else 0.0
    return NodeResult(
        ratios=windows["ratio"].to_numpy(),
        sojourn_s=sojourn,
        service_s=cat("service_s", np.float64),
        n_miss=cat("n_miss", np.int64),
        n_computed=cat("n_computed", np.int64),
        lookup_bytes=look_b,
        miss_bytes=miss_b,
        batch_size=cat("batch_size", np.int32),
        windows=windows,
        p50_ms=lat.p50_ms,
        p99_ms=lat.p99_ms,
        slo_attainment=lat.slo_attainment,
        mean_ms=lat.mean_ms,
        throughput_rps=len(soj) / span if span > 0 else float("nan"),
        emb_hit_rate=metrics.hit_rate(int(miss_b[i0:].sum()), int(look_b[i0:].sum())),
        kv_reuse_rate=metrics.reuse_rate(int(n_reused[i0:].sum()), int(ctx_len[i0:].sum())),
        h2d_bytes=int(windows["h2d_bytes"][warm:].sum()) if n_w else 0,
        prefetch_bytes=int(windows["prefetch_bytes"][warm:].sum()) if n_w else 0,
        blocked_s=float(sum(r.blocked_s for r in results)),
        requests=len(soj),
        measured_from_window=warm,
        term_s={k: np.array([r.term_s[k] for r in results], np.float64) for k in TERMS},
    )
