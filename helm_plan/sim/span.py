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
from helm_plan.sim.batching import serve
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext


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
    mean_ms: float
    """Mean sojourn of the measured requests, ms."""
    emb_hit_rate: float
    """EMB hit rate of the measured requests."""
    kv_reuse_rate: float
    """KV reuse rate (reused / context tokens) of the measured requests."""
    miss_bytes: int
    """Demand-miss H2D bytes of the measured requests."""


def replay_span(
    ctx: NodeContext, ratio: float, warm_start: int, start: int, stop: int, cfg: NodeConfig
) -> tuple[core.ReplayResult, np.ndarray]:
    """Replay ``[warm_start, stop)`` from cold caches at ``ratio``, served in batches.

    Returns the cache outcomes of the whole span and the sojourn times (s) of
    the measured requests ``[start, stop)``; the earlier ones only warm up.
    """
    if not 0 <= warm_start <= start <= stop <= ctx.arrays.n_requests:
        raise ConfigError(
            f"bad span: warm_start={warm_start}, start={start}, stop={stop}",
            hint="pass 0 <= warm_start <= start <= stop <= requests",
        )
    require_range("ratio", ratio, 0.0, 1.0)
    state = core.new_state(ctx.workload, ratio, ctx.pool_bytes, ctx.model)
    r = core.replay(ctx.workload, state, warm_start, stop)
    ts = ctx.arrays.ts_s[warm_start:stop]
    q = serve(
        ts, r.n_computed, r.ctx_len, r.n_cand, r.lookup_bytes, r.miss_bytes, ctx.latency.coeffs,
        slots=cfg.slots, batch_max=cfg.batch_max, batch_timeout_s=cfg.batch_timeout_ms / 1e3,
        batching=cfg.batching,
    )  # fmt: skip
    k = start - warm_start
    return r, q.finish_s[k:] - ts[k:]


def evaluate_span(
    ctx: NodeContext, ratio: float, warm_start: int, start: int, stop: int, cfg: NodeConfig
) -> SpanEval:
    """P99 etc. of requests ``[start, stop)`` at constant ``ratio``, cold at ``warm_start``.

    Requests ``[warm_start, start)`` warm the caches and the queue but are not measured.
    """
    r, soj = replay_span(ctx, ratio, warm_start, start, stop, cfg)
    return span_eval(ratio, r, soj, start - warm_start, cfg.for_context(ctx).slo_ms)


def span_eval(
    ratio: float, r: core.ReplayResult, soj: np.ndarray, k: int, slo_ms: float
) -> SpanEval:
    """Figures of the measured requests: replay outcomes from index ``k`` on, sojourns ``soj``."""
    lat = metrics.latency_figures(soj, slo_ms)
    miss = int(r.miss_bytes[k:].sum())
    return SpanEval(
        ratio=float(ratio),
        p50_ms=lat.p50_ms,
        p99_ms=lat.p99_ms,
        slo_attainment=lat.slo_attainment,
        mean_ms=lat.mean_ms,
        emb_hit_rate=metrics.hit_rate(miss, int(r.lookup_bytes[k:].sum())),
        kv_reuse_rate=metrics.reuse_rate(int(r.n_reused[k:].sum()), int(r.ctx_len[k:].sum())),
        miss_bytes=miss,
    )
