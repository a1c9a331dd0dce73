"""The oracle's search over r: coarse grid, seeded Optuna study, or exhaustive grid.

1. the coarse grid (``coarse_step``, default 0.0..1.0 step 0.1) is always
   evaluated: the label table stores it for the controller's training
   environment;
2. a seeded Optuna study (TPE by default, GP optional) is warm-started with
   those points (``study.add_trial``) and runs ``trials`` more trials on the
   ``ratio_step`` lattice (default 0.01; repeated suggestions are memoised,
   so the evaluations may be fewer than ``trials`` + grid);
3. or, with ``grid_step``, an exhaustive grid replaces Optuna (validation).

``r*`` is the evaluated r with the lowest P99; ties go to the higher SLO
attainment, then the smaller r. Optuna's own logging is set to WARNING.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def _key(ev: tuple[float, float]) -> tuple[float, float]:
    p99, att = ev
    return (p99 if np.isfinite(p99) else np.inf, -att if np.isfinite(att) else 0.0)


def search(
    objective: Callable[[float], tuple[float, float]], ocfg: OracleConfig, seed: int
) -> dict[float, tuple[float, float]]:
    """Evaluate the coarse grid, then Optuna (or the exhaustive grid); return r -> (p99, att)."""
    evals: dict[float, tuple[float, float]] = {}

    def ev(r: float) -> tuple[float, float]:
        r = round(float(r), 9)
        if r not in evals:
            evals[r] = objective(r)
        return evals[r]

    for r in ratio_grid(ocfg.coarse_step):
        ev(r)
    if ocfg.grid_step is not None:
        for r in ratio_grid(ocfg.grid_step):
            ev(r)
        return evals
    if ocfg.trials == 0:
        return evals
    import optuna
    from optuna.distributions import FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = (
        optuna.samplers.GPSampler(seed=seed)
        if ocfg.sampler == "gp"
        else optuna.samplers.TPESampler(seed=seed)
    )
    study = optuna.create_study(direction="minimize", sampler=sampler)
    dist = FloatDistribution(0.0, 1.0, step=ocfg.ratio_step)
    for r, (p99, _) in sorted(evals.items()):
        if np.isfinite(p99):
            study.add_trial(
                optuna.trial.create_trial(params={"r": r}, distributions={"r": dist}, value=p99)
            )

    def obj(trial: Any) -> float:
        p99 = ev(trial.suggest_float("r", 0.0, 1.0, step=ocfg.ratio_step))[0]
        return p99 if np.isfinite(p99) else 1e300

    study.optimize(obj, n_trials=ocfg.trials)
    return evals


def best_of(
    evals: dict[float, tuple[float, float]], tol: float
) -> tuple[float, float, float, float]:
    """(r*, flatness, r_flat_lo, r_flat_hi) from all evaluations."""
    r_star = min(evals, key=lambda r: (*_key(evals[r]), r))
    rs = list(evals)
    lo, hi = flat_band(np.array(rs), np.array([evals[r][0] for r in rs]), tol)
    return r_star, hi - lo, lo, hi
