"""The sequential ("carry") oracle: each window starts where the labelled schedule left it.

The default oracle (:mod:`helm_plan.oracle`, ``warmup="window"``) evaluates
window ``w`` from caches warmed at ``r`` on a short warm-up span and an idle
queue, so every window is independent and they run in parallel. That misses
two things a running node carries across a boundary: caches warmed over the
whole past (an EMB hot set takes long to build) and the queue backlog (under
overload it dominates P99). With ``warmup="carry"`` window ``w`` instead starts
from the cache state and slot backlog that the labelled ratios ``r*_0..r*_{w-1}``
produce: the caches are resized to ``r`` at the boundary (the shrinking one
evicts LRU; the growing one fills on demand, as the ``lazy`` refill mode) and
the FIFO continues. ``P99_w(r)`` is then exactly the window-``w`` P99 of
:func:`helm_plan.sim.node.simulate_node` run with refill ``lazy`` on the
schedule ``r*_0..r*_{w-1}, r`` (tested). Windows are labelled in order, so
this mode is sequential; each evaluation replays one window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from helm_plan.cache import core
from helm_plan.oracle_search import search, seed_for
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import NodeConfig
from helm_plan.sim.queue import fifo
from helm_plan.sim.span import SpanEval, span_eval

if TYPE_CHECKING:
    from helm_plan.oracle import OracleConfig


def _step(
    ctx: NodeContext,
    state: core.CacheState,
    free_at_s: np.ndarray,
    r: float,
    s: int,
    e: int,
    ncfg: NodeConfig,
) -> tuple[SpanEval, core.CacheState, np.ndarray]:
    """Window ``[s, e)`` at ratio ``r`` from a copy of ``state`` and the slot backlog."""
    a = ctx.arrays
    st = state.copy()
    st.resize(*core.capacities(r, ctx.pool_bytes, ctx.model))
    res = core.replay(a, st, s, e, max_seq_len=ctx.model.max_seq_len)
    svc = ctx.latency.service_time_s(
        res.n_computed, res.ctx_len, ctx.n_cand[s:e], res.n_lookup, res.n_miss
    )
    q = fifo(a.ts_s[s:e], svc, ncfg.slots, free_at_s=free_at_s)
    return span_eval(ctx, r, res, q.sojourn_s, 0, ncfg.slo_ms), st, q.free_at_s


def _search_window(
    ctx: NodeContext,
    state: core.CacheState,
    free: np.ndarray,
    w: int,
    s: int,
    e: int,
    ncfg: NodeConfig,
    ocfg: OracleConfig,
    label_row: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    full: dict[float, SpanEval] = {}

    def objective(r: float) -> tuple[float, float]:
        full[r] = _step(ctx, state, free, r, s, e, ncfg)[0]
        return full[r].p99_ms, full[r].slo_attainment

    evals = search(objective, ocfg, seed_for(ocfg.seed, w))
    return label_row(w, evals, full, ctx, ncfg, ocfg)


def carry_rows(
    ctx: NodeContext,
    ncfg: NodeConfig,
    ocfg: OracleConfig,
    label_row: Callable[..., dict[str, Any]],
    empty_row: Callable[[int, OracleConfig], dict[str, Any]],
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Label rows of every window, in order, each searched from the carried state."""
    a = ctx.arrays
    edges = ctx.edges(ncfg.window_s)
    n_w = len(edges) - 1
    state = core.CacheState.empty(a.n_items, a.n_users, 0, 0)
    free = np.zeros(ncfg.slots, np.float64)
    rows: list[dict[str, Any]] = []
    if progress:
        progress(0, n_w)
    for w in range(n_w):
        s, e = int(edges[w]), int(edges[w + 1])
        if e == s:
            rows.append(empty_row(w, ocfg))
        else:
            row = _search_window(ctx, state, free, w, s, e, ncfg, ocfg, label_row)
            _, state, free = _step(ctx, state, free, row["r_star"], s, e, ncfg)
            rows.append(row)
        if progress:
            progress(w + 1, n_w)
    return rows
