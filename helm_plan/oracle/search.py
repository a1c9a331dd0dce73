"""The oracle's search over r: coarse grid, seeded Optuna study, or exhaustive grid.

1. the coarse grid (``coarse_step``, default 0.0..1.0 step 0.1) is always
   evaluated, with :data:`EDGE_POINTS` refining it next to 0 and 1 (where
   starving one cache makes P99 jump): the label table stores the coarse grid
   for the controller's training environment;
2. a seeded Optuna study (TPE by default, GP optional) is warm-started with
   those points (``study.add_trial``) and runs ``trials`` more trials on the
   ``ratio_step`` lattice (default 0.01; repeated suggestions are memoised,
   so the evaluations may be fewer than ``trials`` + grid). The trials are
   asked ``trial_batch`` at a time (TPE with ``constant_liar``, Optuna's
   setting for trials asked before earlier ones are told), and a batch's new
   points are evaluated together through ``evaluate`` (the carry oracle's
   threads); the batch, not the worker count, shapes the study, so labels are
   identical for any number of workers;
3. or, with ``grid_step``, an exhaustive grid replaces Optuna (validation).

``r*`` is the evaluated r with the lowest P99; ties go to the higher SLO
attainment, then the lower mean latency, then the r nearest the previous
window's r* (no needless move), then the smaller r. Optuna's own logging is
set to WARNING.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.sensitivity import flat_band


def ratio_grid(step: float) -> np.ndarray:
    """0, step, 2·step, ... up to and including 1.0."""
    k = int(np.floor(1.0 / step + 1e-9))
    g = np.round(np.arange(k + 1) * step, 9)
    if g[-1] < 1.0:
        g = np.append(g, 1.0)
    return g


def seed_for(seed: int, tag: int) -> int:
    """A task's seed from the base seed and its index (independent of worker count)."""
    return int(np.random.SeedSequence([seed, tag]).generate_state(1)[0])


EDGE_POINTS = (0.02, 0.98)
"""Ratios always evaluated beside the coarse grid: the P99 cliffs sit next to 0 and 1."""

Eval = tuple[float, float, float]
"""One evaluation of a ratio: (P99 ms, SLO attainment, mean sojourn ms)."""


def _fin(x: float, bad: float) -> float:
    return x if np.isfinite(x) else bad


def rank_key(r: float, ev: Eval, prev_r: float | None = None) -> tuple[float, ...]:
    """Sort key of an evaluated ratio: P99, then attainment, mean, distance to ``prev_r``, r."""
    p99, att, mean = ev
    dist = abs(r - prev_r) if prev_r is not None and np.isfinite(prev_r) else 0.0
    return (_fin(p99, np.inf), -_fin(att, -np.inf), _fin(mean, np.inf), dist, r)


def first_points(ocfg: OracleConfig) -> list[float]:
    """The ratios every search evaluates first: the coarse grid and the edge points."""
    pts = set(ratio_grid(ocfg.coarse_step).tolist()) | set(EDGE_POINTS)
    if ocfg.grid_step is not None:
        pts |= set(ratio_grid(ocfg.grid_step).tolist())
    return sorted(round(float(r), 9) for r in pts)


Evaluate = Callable[[Callable[[float], Eval], list[float]], list[Eval]]
"""Evaluates an objective at several ratios (in any order or concurrently), results in order."""


def _in_order(objective: Callable[[float], Eval], rs: list[float]) -> list[Eval]:
    return [objective(r) for r in rs]


def search(
    objective: Callable[[float], Eval],
    ocfg: OracleConfig,
    seed: int,
    known: dict[float, Eval] | None = None,
    evaluate: Evaluate | None = None,
) -> dict[float, Eval]:
    """Evaluate the first points, then Optuna (unless a grid is given); return r -> Eval.

    ``known`` holds evaluations already made (e.g. the first points, evaluated
    in parallel); they are not repeated. ``evaluate`` runs the objective over a
    group of new ratios (the first points, then each batch of trials); by
    default one after another.
    """
    evals: dict[float, Eval] = dict(known or {})
    run = evaluate or _in_order

    def ev(rs: list[float]) -> None:
        todo = sorted({round(float(r), 9) for r in rs} - evals.keys())
        for r, e in zip(todo, run(objective, todo), strict=True):
            evals[r] = e

    ev(first_points(ocfg))
    if ocfg.grid_step is not None or ocfg.trials == 0:
        return evals
    import optuna
    from optuna.distributions import FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    batch = ocfg.trial_batch
    sampler = (
        optuna.samplers.GPSampler(seed=seed)
        if ocfg.sampler == "gp"
        else optuna.samplers.TPESampler(seed=seed, constant_liar=batch > 1)
    )
    study = optuna.create_study(direction="minimize", sampler=sampler)
    dist = FloatDistribution(0.0, 1.0, step=ocfg.ratio_step)
    for r, (p99, _, _) in sorted(evals.items()):
        if np.isfinite(p99):
            study.add_trial(
                optuna.trial.create_trial(params={"r": r}, distributions={"r": dist}, value=p99)
            )
    for first in range(0, ocfg.trials, batch):
        trials = [study.ask() for _ in range(min(batch, ocfg.trials - first))]
        rs = [round(float(t.suggest_float("r", 0.0, 1.0, step=ocfg.ratio_step)), 9) for t in trials]
        ev(rs)
        for t, r in zip(trials, rs, strict=True):
            p99 = evals[r][0]
            study.tell(t, p99 if np.isfinite(p99) else 1e300)
    return evals


def best_of(
    evals: dict[float, Eval], tol: float, prev_r: float | None = None
) -> tuple[float, float, float, float]:
    """(r*, flatness, r_flat_lo, r_flat_hi) from all evaluations (ties: see :func:`rank_key`)."""
    r_star = min(evals, key=lambda r: rank_key(r, evals[r], prev_r))
    rs = list(evals)
    lo, hi = flat_band(np.array(rs), np.array([evals[r][0] for r in rs]), tol)
    return r_star, hi - lo, lo, hi
