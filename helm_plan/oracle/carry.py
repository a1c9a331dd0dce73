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
(tested). Windows are labelled in order, so this mode is sequential in windows,
but not in trials: a window's first points (the coarse grid and the edge
points, :func:`~helm_plan.oracle.search.start_points`; with ``grid=False`` the
bracketing search's first three, around the previous window's ``r*``) are independent forks
of the carried node, and so are the Optuna trials of one batch
(``trial_batch``). With a local process pool of ``n`` workers they are stepped
on ``n`` threads of this process (the node kernels release the GIL), so every
fork shares the trace and the fork that served ``r*`` carries on with no
replay; with another backend (Ray) the first points are mapped over it, the
workers get the trace once for the whole run and the carried node once per
window. Which ratios are evaluated depends on ``trial_batch`` and the seed,
never on the worker count, so neither do the labels.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from helm_plan.exec import Executor, ProcessExecutor
from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.search import Eval, Evaluate, rank_key, search, seed_for, start_points
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
    executor: Executor | None = None,
    grid: bool = True,
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
    threads = executor.workers if isinstance(executor, ProcessExecutor) else 1
    remote = executor if executor is not None and executor.workers > 1 and threads == 1 else None
    if progress:
        progress(0, n_w)
    with contextlib.ExitStack() as stack:
        evaluate = _threaded(threads, stack) if threads > 1 else None
        for w in range(n_w):
            if node.edges[w + 1] == node.edges[w]:
                rows.append(empty_row(w))
                served.append(node.step(_keep(node)))
            else:
                row, after, result = _search_window(node, w, ocfg, label_row, remote, evaluate,
                                                    grid)  # fmt: skip
                rows.append(row)
                if after is None:  # r* was evaluated in a worker: step this node to it
                    result = node.step(row["r_star"])
                else:
                    node = after
                served.append(result)
            if progress:
                progress(w + 1, n_w)
    return rows, collect(served, lazy).compact()


def _threaded(threads: int, stack: contextlib.ExitStack) -> Evaluate:
    """Evaluate a group of ratios on ``threads`` threads (results in order)."""
    pool = ThreadPoolExecutor(threads, thread_name_prefix="helm-plan trial")
    # an error or Ctrl-C leaving ``pool.map`` cancels its queued steps (Executor.map's own
    # cleanup); closing the stack then waits for the running ones, one window step each
    stack.callback(pool.shutdown)

    def evaluate(objective: Callable[[float], Eval], rs: list[float]) -> list[Eval]:
        return list(pool.map(objective, rs)) if len(rs) > 1 else [objective(r) for r in rs]

    return evaluate


def _step_task(shared: tuple[NodeContext, NodeRunner], r: float) -> WindowResult:
    """One step at ``r`` of a fork of the carried node (in a worker)."""
    ctx, detached = shared
    node = copy.copy(detached)
    node.ctx = ctx
    return node.fork().step(r)  # the fork: the worker keeps ``detached`` for the next task


def _search_window(
    node: NodeRunner, w: int, ocfg: OracleConfig, label_row: LabelRow,
    remote: Executor | None = None, evaluate: Evaluate | None = None, grid: bool = True,
) -> tuple[dict[str, Any], NodeRunner | None, WindowResult]:  # fmt: skip
    """Window ``w``'s label row: every candidate r is one step of a fork of the carried node.

    Also returns the fork that served r* and its window, when r* was evaluated here (the
    best fork so far is kept, so the node moves on without replaying the window again);
    ``None`` when r* came from a ``remote`` worker (the first points go there when given).
    ``evaluate`` steps a group of forks at once (threads).
    """
    full: dict[float, WindowResult] = {}
    known: dict[float, Eval] = {}
    prev_r = node.ratio if w else None
    best: list[Any] = []  # [rank key, r, fork] of the best r evaluated in this process
    lock = threading.Lock()
    if remote is not None:
        pts = start_points(ocfg, grid, prev_r)
        detached = copy.copy(node)
        detached.ctx = None  # type: ignore[assignment]  # the workers hold the trace already
        got = remote.map(_step_task, pts, shared=(node.ctx, detached),
                         label=lambda r: f"window {w} at r={r:g}")  # fmt: skip
        for r, res in zip(pts, got, strict=True):
            full[r] = res
            known[r] = res.p99_ms, res.slo_attainment, res.mean_ms

    def objective(r: float) -> Eval:  # may run on several threads at once
        fork = node.fork()
        res = fork.step(r)
        ev = res.p99_ms, res.slo_attainment, res.mean_ms
        # rank keys differ for every r, so the best is the same in any order of completion;
        # only the best fork is kept (memory: one node state per thread, plus the best)
        key = rank_key(r, ev, prev_r)
        with lock:
            full[r] = res
            if not best or key < best[0]:
                best[:] = [key, r, fork]
        return ev

    evals = search(objective, ocfg, seed_for(ocfg.seed, w), known, evaluate, grid=grid,
                   prev_r=prev_r)  # fmt: skip
    # ties go to the r nearest the ratio the node runs at (no needless move)
    row = label_row(w, evals, full, prev_r)
    r_star = row["r_star"]
    after = best[2] if best and best[1] == r_star else None
    return row, after, full[r_star]


def _keep(node: NodeRunner) -> float:
    """The ratio an empty window runs at: the current one (0 before the first window)."""
    return node.ratio if node.ratio == node.ratio else 0.0
