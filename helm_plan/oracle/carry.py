"""The sequential ("carry") oracle: each window starts where the labelled schedule left it.

The window-mode oracle (:mod:`helm_plan.oracle.labelling`) evaluates window
``w`` from caches warmed at ``r`` on a short warm-up span and an idle queue,
so every window is independent and they run in parallel. That misses two
things a running node carries across a boundary: caches warmed over the
whole past (an EMB hot set takes long to build) and the queue backlog (under
overload it dominates P99). With ``warmup="carry"`` window ``w`` instead starts
from the node that the labelled ratios ``r*_0..r*_{w-1}`` leave behind: one
:class:`~helm_plan.sim.step.NodeRunner` with ``lazy`` refill is stepped
through the labels, and each candidate ``r`` is one ``step`` of a fork of it
(the shrinking cache evicts LRU, the growing one fills on demand, the FIFO
continues). ``P99_w(r)`` is then exactly the window-``w`` P99 of
``simulate_node`` with refill ``lazy`` on the schedule ``r*_0..r*_{w-1}, r``
(tested). Windows are labelled in order, so this mode is sequential.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.search import Eval, search, seed_for
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import NodeResult, collect
from helm_plan.sim.step import NodeRunner, WindowResult

LabelRow = Callable[[int, dict[float, Eval], dict[float, Any], float | None], dict[str, Any]]


def carry_rows(
    ctx: NodeContext,
    ncfg: NodeConfig,
    ocfg: OracleConfig,
    label_row: LabelRow,
    empty_row: Callable[[int], dict[str, Any]],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], NodeResult]:
    """Label rows of every window, in order, each searched from the carried node.

    Also returns the node's run on the labelled schedule (lazy refill): the
    oracle's pooled figures, with no further replay.
    """
    lazy = dataclasses.replace(ncfg, refill="lazy")
    node = NodeRunner(ctx, lazy)
    rows: list[dict[str, Any]] = []
    served: list[WindowResult] = []
    n_w = node.n_windows
    if progress:
        progress(0, n_w)
    for w in range(n_w):
        if node.edges[w + 1] == node.edges[w]:
            rows.append(empty_row(w))
            served.append(node.step(_keep(node)))
        else:
            rows.append(_search_window(node, w, ocfg, label_row))
            served.append(node.step(rows[-1]["r_star"]))
        if progress:
            progress(w + 1, n_w)
    return rows, collect(served, lazy).compact()


def _search_window(
    node: NodeRunner, w: int, ocfg: OracleConfig, label_row: LabelRow
) -> dict[str, Any]:
    """Window ``w``'s label row: every candidate r is one step of a fork of the carried node."""
    full: dict[float, WindowResult] = {}

    def objective(r: float) -> Eval:
        full[r] = node.fork().step(r)
        return full[r].p99_ms, full[r].slo_attainment, full[r].mean_ms

    evals = search(objective, ocfg, seed_for(ocfg.seed, w))
    # ties go to the r nearest the ratio the node runs at (no needless move)
    return label_row(w, evals, full, node.ratio if w else None)


def _keep(node: NodeRunner) -> float:
    """The ratio an empty window runs at: the current one (0 before the first window)."""
    return node.ratio if node.ratio == node.ratio else 0.0
