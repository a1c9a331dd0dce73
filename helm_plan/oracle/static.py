"""Best static: the single EMB share with the lowest whole-trace P99 (DESIGN.md, Oracle).

The first points (the coarse grid and the edge points, plus the validation
grid if any) are independent whole-trace runs, mapped over the executor.
Then a golden-section refinement on the ``ratio_step`` lattice narrows the
bracket around the best of them (the P99 of a static split is unimodal
enough near its minimum; the grid keeps a second basin from being missed by
more than one grid step). Every run goes through a :class:`StaticRuns` memo,
so the policies that are static splits (emb-max, kv-max, best static) reuse
these runs instead of replaying the trace again. A constant r never
reallocates, so the refill mode is irrelevant here.

``grid=False`` (what ``analyze`` runs) evaluates fewer whole-trace runs: 0 and 1
(emb-max and kv-max need them anyway) and the golden-section points 0.38 and 0.62
between them, then the oracle's bracketing search
(:func:`helm_plan.oracle.search.bracket`), which stops once neither side of the best
can beat it by ``flat_tol`` (or is wider than a lattice step). It probes one side at a
time (``one_side``): in ``analyze`` the runs trickle through one idle worker beside the
oracle anyway, so probing both sides as a group gains no time, and a probe that finds a
new best often settles the other side (on ``bench_analyze.py``'s 61k trace: 8 runs
instead of 9, the same answer). Starting from the labels'
request-weighted median ``r*`` instead was tried: on the analyze test trace it took 9 runs
instead of 6 (best static sat on a plateau far from the typical window's optimum), so the
search needs no labels and runs beside the oracle.

Two ratios are reported: ``ratio`` (the argmin, ties as in
:func:`helm_plan.oracle.search.rank_key`) and ``robust_ratio``, the middle of
the flat band (every evaluated r within ``flat_tol`` of the best P99):
when P99(r) is flat, the argmin can sit right beside a cliff (r = 0 starves
EMB), and the middle of the plateau is the split to recommend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.exec.background import background
from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.search import (
    GOLDEN,
    Eval,
    best_of,
    bracket,
    first_points,
    rank_key,
    snap,
    start_points,
)
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import NodeResult, simulate_node


def static_task(shared: tuple[NodeContext, NodeConfig], r: float) -> NodeResult:
    """The whole trace at constant ``r``, without its per-request arrays but the sojourns."""
    ctx, ncfg = shared
    return simulate_node(ctx, np.array([r]), ncfg).compact()


@dataclass
class StaticRuns:
    """Whole-trace runs at constant ratios, memoised by ratio (one per trace and node config)."""

    ctx: NodeContext
    """The trace."""
    node_cfg: NodeConfig
    """How the node runs (the refill mode is irrelevant at a constant ratio)."""
    executor: Executor | None = None
    """Where a batch of new ratios runs."""
    runs: dict[float, NodeResult] = field(default_factory=dict)
    """Results by ratio (rounded to 1e-9)."""

    def get(self, ratios: list[float], progress: Progress | None = None) -> list[NodeResult]:
        """Results at ``ratios``; the ones not run yet are mapped over the executor."""
        keys = [round(float(r), 9) for r in ratios]
        todo = sorted({r for r in keys if r not in self.runs})
        if todo:
            ex = self.executor or SerialExecutor()
            done = ex.map(static_task, todo, shared=(self.ctx, self.node_cfg), progress=progress,
                          label=lambda r: f"static r={r:g}")  # fmt: skip
            self.runs.update(zip(todo, done, strict=True))
        return [self.runs[r] for r in keys]

    @property
    def replays(self) -> int:
        """Whole-trace replays run so far."""
        return len(self.runs)


@dataclass(frozen=True, eq=False)
class BestStatic:
    """The single EMB share minimising whole-trace P99."""

    ratio: float
    """Best static r (the argmin)."""
    p99_ms: float
    """Whole-trace P99 at ``ratio`` (measured windows), ms."""
    slo_attainment: float
    """Whole-trace SLO attainment at ``ratio``."""
    flatness: float
    """Width of the flat band: evaluated r whose P99 is within flat_tol of the best."""
    flat_lo: float
    """Lowest r of the flat band."""
    flat_hi: float
    """Highest r of the flat band."""
    robust_ratio: float
    """The evaluated r nearest the middle of the flat band: the split to recommend."""
    evaluated: pl.DataFrame
    """Every r simulated: r, p99_ms, slo_attainment, emb_hit_rate, kv_reuse_rate (sorted by r)."""
    method: str
    """'golden' (grid, then golden-section refinement), 'bracket' (``grid=False``) or
    'grid STEP'."""


def _eval(res: NodeResult) -> Eval:
    return res.p99_ms, res.slo_attainment, res.mean_ms


def static_start(ocfg: OracleConfig) -> list[float]:
    """The first whole-trace runs of the search without the grid: 0, 1 and the golden points
    between them (or the validation grid's points), and the config's ``seed_points``."""
    if ocfg.grid_step is not None:
        return sorted({0.0, 1.0, *start_points(ocfg, False, None)})
    return sorted({0.0, 1.0, snap(GOLDEN, ocfg.ratio_step), snap(1.0 - GOLDEN, ocfg.ratio_step),
                   *(round(float(r), 9) for r in ocfg.seed_points)})  # fmt: skip


def best_static(
    ctx: NodeContext,
    node_cfg: NodeConfig,
    oracle_cfg: OracleConfig,
    progress: Progress | None = None,
    executor: Executor | None = None,
    runs: StaticRuns | None = None,
    grid: bool = True,
) -> BestStatic:
    """Search the static r with the lowest whole-trace P99 (see the module docstring)."""
    memo = runs or StaticRuns(ctx, node_cfg, executor)
    first = first_points(oracle_cfg) if grid else static_start(oracle_cfg)
    memo.get(first, progress)
    evals = {r: _eval(memo.runs[r]) for r in first}
    if oracle_cfg.grid_step is None and grid:
        refine(evals, lambda r: _eval(memo.get([r])[0]), oracle_cfg.ratio_step or 0.01)
    elif oracle_cfg.grid_step is None:

        def ev(rs: list[float]) -> None:
            for r, res in zip(rs, memo.get(rs), strict=True):
                evals[round(float(r), 9)] = _eval(res)

        bracket(ev, evals, oracle_cfg, None, one_side=True)
    r_star, flat, lo, hi = best_of(evals, oracle_cfg.flat_tol)
    rs = sorted(evals)
    band = [r for r in rs if lo <= r <= hi] if np.isfinite(lo) else [r_star]
    mid = (lo + hi) / 2 if np.isfinite(lo) else r_star
    robust = min(band, key=lambda r: (abs(r - mid), r))
    res = [memo.runs[r] for r in rs]
    df = pl.DataFrame(
        {
            "r": rs,
            "p99_ms": [x.p99_ms for x in res],
            "slo_attainment": [x.slo_attainment for x in res],
            "emb_hit_rate": [x.emb_hit_rate for x in res],
            "kv_reuse_rate": [x.kv_reuse_rate for x in res],
        }
    )
    best = memo.runs[r_star]
    method = (f"grid {oracle_cfg.grid_step}" if oracle_cfg.grid_step is not None
              else "golden" if grid else "bracket")  # fmt: skip
    return BestStatic(ratio=r_star, p99_ms=best.p99_ms, slo_attainment=best.slo_attainment,
                      flatness=flat, flat_lo=lo, flat_hi=hi, robust_ratio=robust, evaluated=df,
                      method=method)  # fmt: skip


class BackgroundStatic:
    """:func:`best_static` in the background of the carry oracle (:mod:`helm_plan.exec.background`).

    Its runs trickle through the workers the oracle leaves idle while it runs
    its forks on threads of the driver, one whole-trace run at a time; the search
    and its memo are the same as in the foreground, so the answer is identical.
    ``analyze`` runs it, so it searches without the grid by default (``grid=False``).
    """

    def __init__(self, ctx: NodeContext, node_cfg: NodeConfig, oracle_cfg: OracleConfig,
                 executor: Executor, grid: bool = False) -> None:  # fmt: skip
        self.runs = StaticRuns(ctx, node_cfg, executor)
        self._cfg = oracle_cfg
        self._grid = grid

        def search(view: Executor) -> BestStatic:
            self.runs.executor = view
            return best_static(ctx, node_cfg, oracle_cfg, runs=self.runs, grid=grid)

        self._job = background(executor, search, "best static")

    def result(self, executor: Executor | None) -> tuple[BestStatic, StaticRuns]:
        """Wait for the search; later runs of the memo use ``executor`` in full."""
        if self._job is None:
            best = best_static(self.runs.ctx, self.runs.node_cfg, self._cfg, runs=self.runs,
                               grid=self._grid)  # fmt: skip
        else:
            best = self._job.result()
        self.runs.executor = executor
        return best, self.runs


def refine(evals: dict[float, Eval], objective: Callable[[float], Eval], step: float) -> None:
    """Golden-section refinement on the ``step`` lattice around the best evaluated ratio.

    Probes the larger gap next to the current best until both gaps are one
    lattice step; adds every probe to ``evals``.
    """

    def snap(x: float) -> float:
        return round(round(x / step) * step, 9)

    for _ in range(64):  # a bracket of width 1 needs ~12 probes at step 0.01
        rs = sorted(evals)
        b = min(rs, key=lambda r: rank_key(r, evals[r]))
        i = rs.index(b)
        left = rs[i - 1] if i > 0 else b
        right = rs[i + 1] if i + 1 < len(rs) else b
        if b - left >= right - b:
            x = snap(b - GOLDEN * (b - left))
        else:
            x = snap(b + GOLDEN * (right - b))
        if x in evals or not left < x < right:
            x = snap(b - step) if b - left > step + 1e-12 else snap(b + step)
            if x in evals or not left < x < right:
                return
        evals[x] = objective(x)
