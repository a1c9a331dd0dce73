"""The oracle's inner evaluation: a constant ratio from cold caches over one span.

Requests ``[warm_start, start)`` warm the caches and the queue; only
``[start, stop)`` is measured (DESIGN.md, Oracle).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.cache import core
from helm_plan.config import require_range
from helm_plan.errors import ConfigError
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import NodeConfig
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
    h2d_bytes: int
    """Demand-miss H2D bytes of the measured requests."""


def evaluate_span(
    ctx: NodeContext, ratio: float, warm_start: int, start: int, stop: int, cfg: NodeConfig
) -> SpanEval:
    """P99 etc. of requests ``[start, stop)`` at constant ``ratio``, cold at ``warm_start``.

    Requests ``[warm_start, start)`` warm the caches and the queue but are not measured.
    """
    if not 0 <= warm_start <= start <= stop <= ctx.arrays.n_requests:
        raise ConfigError(f"bad span: warm_start={warm_start}, start={start}, stop={stop}")
    require_range("ratio", ratio, 0.0, 1.0)
    a = ctx.arrays
    emb_rows, kv_tokens = core.capacities(ratio, ctx.pool_bytes, ctx.model)
    state = core.CacheState.empty(a.n_items, a.n_users, emb_rows, kv_tokens)
    r = core.replay(a, state, warm_start, stop, max_seq_len=ctx.model.max_seq_len)
    n_comp, n_reused, ctx_len, n_lookup, n_miss = (
        r.n_computed, r.n_reused, r.ctx_len, r.n_lookup, r.n_miss,
    )  # fmt: skip
    sl = slice(warm_start, stop)
    service = ctx.latency.service_time_s(n_comp, ctx_len, ctx.n_cand[sl], n_lookup, n_miss)
    q = fifo(a.ts_s[sl], service, cfg.slots)
    k = start - warm_start
    soj = q.sojourn_s[k:]
    look = int(n_lookup[k:].sum())
    cl = int(ctx_len[k:].sum())
    miss = int(n_miss[k:].sum())
    if len(soj) == 0:
        nan = float("nan")
        return SpanEval(ratio, nan, nan, nan, nan, nan, 0)
    return SpanEval(
        ratio=float(ratio),
        p50_ms=float(np.percentile(soj, 50) * 1e3),
        p99_ms=float(np.percentile(soj, 99) * 1e3),
        slo_attainment=float(np.mean(soj <= cfg.slo_ms / 1e3)),
        emb_hit_rate=1.0 - miss / look if look else float("nan"),
        kv_reuse_rate=int(n_reused[k:].sum()) / cl if cl else float("nan"),
        h2d_bytes=miss * ctx.model.row_bytes,
    )
