"""The cold-start what-if: a constant ratio from cold caches and an idle queue over one span.

Requests ``[warm_start, start)`` warm the caches and the queue; only
``[start, stop)`` is measured. This is the window-mode oracle's evaluation
(DESIGN.md, Oracle): windows independent of each other, so they run in
parallel. Anything that carries state across windows steps a
:class:`~helm_plan.sim.step.NodeRunner` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.cache import core
from helm_plan.config import require_range
from helm_plan.errors import ConfigError
from helm_plan.sim import metrics
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.queue import fifo


@dataclass(frozen=True)
class SpanEval:
    """One oracle evaluation: constant ratio from cold caches, measured over one span."""

    ratio: float
    """EMB share evaluated."""
    p50_ms: float
    """Median sojourn of the measured requests, ms."""
    p99_ms: float
    """P99 sojourn of the measured requests, ms."""
    slo_attainment: float
    """Share of measured requests with sojourn <= SLO."""
    emb_hit_rate: float
    """EMB hit rate of the measured requests."""
    kv_reuse_rate: float
    """KV reuse rate (reused / context tokens) of the measured requests."""
    miss_bytes: int
    """Demand-miss H2D bytes of the measured requests."""


def replay_span(
    ctx: NodeContext, ratio: float, warm_start: int, start: int, stop: int, slots: int
) -> tuple[core.ReplayResult, np.ndarray]:
    """Replay ``[warm_start, stop)`` from cold caches at ``ratio`` through a FIFO queue.

    Returns the cache outcomes of the whole span and the sojourn times (s) of
    the measured requests ``[start, stop)``; the earlier ones only warm up.
    """
    if not 0 <= warm_start <= start <= stop <= ctx.arrays.n_requests:
        raise ConfigError(f"bad span: warm_start={warm_start}, start={start}, stop={stop}")
    require_range("ratio", ratio, 0.0, 1.0)
    a = ctx.arrays
    emb_rows, kv_tokens = core.capacities(ratio, ctx.pool_bytes, ctx.model)
    state = core.CacheState.empty(a.n_items, a.n_users, emb_rows, kv_tokens)
    r = core.replay(a, state, warm_start, stop, max_seq_len=ctx.model.max_seq_len)
    sl = slice(warm_start, stop)
    service = ctx.latency.service_time_s(
        r.n_computed, r.ctx_len, ctx.n_cand[sl], r.n_lookup, r.n_miss
    )
    return r, fifo(a.ts_s[sl], service, slots).sojourn_s[start - warm_start :]


def evaluate_span(
    ctx: NodeContext, ratio: float, warm_start: int, start: int, stop: int, cfg: NodeConfig
) -> SpanEval:
    """P99 etc. of requests ``[start, stop)`` at constant ``ratio``, cold at ``warm_start``.

    Requests ``[warm_start, start)`` warm the caches and the queue but are not measured.
    """
    r, soj = replay_span(ctx, ratio, warm_start, start, stop, cfg.slots)
    return span_eval(ctx, ratio, r, soj, start - warm_start, cfg.slo_ms)


def span_eval(
    ctx: NodeContext, ratio: float, r: core.ReplayResult, soj: np.ndarray, k: int, slo_ms: float
) -> SpanEval:
    """Figures of the measured requests: replay outcomes from index ``k`` on, sojourns ``soj``."""
    lat = metrics.latency_figures(soj, slo_ms)
    miss = int(r.n_miss[k:].sum())
    return SpanEval(
        ratio=float(ratio),
        p50_ms=lat.p50_ms,
        p99_ms=lat.p99_ms,
        slo_attainment=lat.slo_attainment,
        emb_hit_rate=metrics.hit_rate(miss, int(r.n_lookup[k:].sum())),
        kv_reuse_rate=metrics.reuse_rate(int(r.n_reused[k:].sum()), int(r.ctx_len[k:].sum())),
        miss_bytes=miss * ctx.model.row_bytes,
    )
