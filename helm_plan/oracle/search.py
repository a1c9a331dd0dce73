"""The oracle's search over r: a bracketing search, a seeded Optuna study, or an exhaustive grid.

With ``grid=False`` (what ``analyze`` runs: it needs ``r*`` and the flat band
per window, not a curve) a window is searched by :func:`bracket`: three points
around a start (the previous window's ``r*``), widened while the best is at an
end, then golden-section steps on the ``ratio_step`` lattice into each side of
the best until no r on that side can beat the best by ``flat_tol`` where P99 is
convex (the lines through the neighbouring points, extended into the gap, bound
it from below) or the side is one lattice step wide; at most ``trials``
evaluations after the first three.

With ``grid=True`` (the default: the controller's training environment reads
the grid's points from the labels):

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
    pts = set(ratio_grid(ocfg.coarse_step).tolist()) | set(EDGE_POINTS) | set(ocfg.seed_points)
    if ocfg.grid_step is not None:
        pts |= set(ratio_grid(ocfg.grid_step).tolist())
    return sorted(round(float(r), 9) for r in pts)


Evaluate = Callable[[Callable[[float], Eval], list[float]], list[Eval]]
"""Evaluates an objective at several ratios (in any order or concurrently), results in order."""


def _in_order(objective: Callable[[float], Eval], rs: list[float]) -> list[Eval]:
    return [objective(r) for r in rs]


BRACKET_STEP = 0.1
"""Half-width of the bracketing search's first three points around its start."""
GOLDEN = (3.0 - 5.0**0.5) / 2.0
"""The golden-section step (≈ 0.382) into a gap of the bracket."""


def snap(x: float, step: float | None) -> float:
    """``x`` clipped to [0, 1] and rounded to the ``step`` lattice (0.01 when None)."""
    st = step or 0.01
    return round(min(1.0, max(0.0, round(x / st) * st)), 9)


def start_points(ocfg: OracleConfig, grid: bool, prev_r: float | None) -> list[float]:
    """The ratios a window's search evaluates first, all at once (in parallel when it can).

    The coarse grid and edges (``grid``, or a validation grid), else the bracketing search's
    first three: its start (``prev_r``, or 0.5 without one) and :data:`BRACKET_STEP` either
    side; with the config's ``seed_points`` in every case.
    """
    seeds = {round(float(r), 9) for r in ocfg.seed_points}
    if grid or ocfg.grid_step is not None:
        return (
            first_points(ocfg)
            if grid
            else sorted({round(float(r), 9) for r in ratio_grid(ocfg.grid_step)} | seeds)
        )
    x0 = snap(prev_r if prev_r is not None and np.isfinite(prev_r) else 0.5, ocfg.ratio_step)
    return sorted({snap(x0 + d, ocfg.ratio_step) for d in (-BRACKET_STEP, 0.0, BRACKET_STEP)}
                  | seeds)  # fmt: skip


def bracket(
    ev: Callable[[list[float]], None], evals: dict[float, Eval], ocfg: OracleConfig,
    prev_r: float | None, *, one_side: bool = False,
) -> None:  # fmt: skip
    """Narrow the evaluated points around the best one (see the module docstring).

    ``ev`` evaluates a group of ratios into ``evals`` (a group's points side by side).
    ``one_side``: each golden step probes one side, the open side whose gap can hold the
    lowest P99 where P99 is convex (the wider gap on a tie), instead of every open side as
    one group: for a caller whose runs go one at a time anyway (best static, in the
    background of the oracle), the other side's probe is often made needless by this one's
    (a new best moves the bracket).
    """
    step, tol = ocfg.ratio_step or 0.01, ocfg.flat_tol
    left_budget = ocfg.trials

    rs: list[float] = []

    def best() -> tuple[list[float], int]:
        rs[:] = sorted(evals)
        b = min(rs, key=lambda r: rank_key(r, evals[r], prev_r))
        return rs, rs.index(b)

    def p99(k: int) -> float:
        return float(evals[rs[k]][0]) if 0 <= k < len(rs) else float("nan")

    def line(k: int, m: int) -> tuple[float, float] | None:
        """(value at rs[k], slope) of the line through points k and m, when both are finite."""
        if not (0 <= m < len(rs) and np.isfinite(p99(k)) and np.isfinite(p99(m))):
            return None
        return p99(k), (p99(m) - p99(k)) / (rs[m] - rs[k])

    def settled(i: int, j: int) -> bool:
        """No r between the best (i) and its neighbour (j) can beat the best by ``tol``.

        The gap is one lattice step, or the neighbour is within ``tol`` of the best (a
        cliff beside the best is not: its edge is searched) and so is the lowest P99
        the gap can hold where P99 is convex: the lines through the best and its other
        neighbour, and through the neighbour and the point beyond it, extended into
        the gap, bound it from below (a V-shaped minimum between two flat-looking
        points is not missed).
        """
        b, n = rs[i], rs[j]
        if abs(n - b) <= step + 1e-12:
            return True
        fb = p99(i)
        if not (np.isfinite(fb) and np.isfinite(p99(j)) and p99(j) <= fb * (1.0 + tol)):
            return False
        low = floor(i, j)
        return low == -np.inf or fb <= (1.0 + tol) * low  # no line: nothing to bound

    def floor(i: int, j: int) -> float:
        """The lowest P99 the gap between points i and j can hold where P99 is convex: the
        lines through i and its other neighbour, and through j and the point beyond it,
        extended into the gap (−inf when neither line exists)."""
        b, n = rs[i], rs[j]
        lines = [(b, ln) for ln in [line(i, 2 * i - j)] if ln] + [
            (n, ln) for ln in [line(j, 2 * j - i)] if ln
        ]
        if not lines:
            return -np.inf

        def low(x: float) -> float:
            return max(v + slope * (x - x0) for x0, (v, slope) in lines)

        xs = [b, n]
        if len(lines) == 2:
            (x0, (v0, s0)), (x1, (v1, s1)) = lines
            if s0 != s1:
                x = (v1 - v0 + s0 * x0 - s1 * x1) / (s0 - s1)
                if min(b, n) < x < max(b, n):
                    xs.append(x)
        return min(low(x) for x in xs)

    while left_budget > 0:  # widen while the best is an end of the bracket
        rs, i = best()
        b = rs[i]
        if i == 0 and b > 0.0 and len(rs) > 1:
            x = snap(b - 2.0 * (rs[1] - b), step)
        elif i == len(rs) - 1 and b < 1.0 and len(rs) > 1:
            x = snap(b + 2.0 * (b - rs[-2]), step)
        else:
            break
        if x in evals:
            break
        ev([x])
        left_budget -= 1
    while left_budget > 0:  # golden steps into every side not settled
        rs, i = best()
        b = rs[i]
        probes, sides = [], []
        for j in (i - 1, i + 1):
            if not 0 <= j < len(rs) or settled(i, j):
                continue
            x = snap(b + GOLDEN * (rs[j] - b), step)
            if x in evals or x == b:
                x = snap(b + np.sign(rs[j] - b) * step, step)
            if x not in evals:
                probes.append(x)
                sides.append((floor(i, j), -abs(rs[j] - b)))
        if not probes:
            break
        if one_side:
            probes = [min(zip(sides, probes, strict=True))[1]]
        probes = probes[:left_budget]
        ev(probes)
        left_budget -= len(probes)


def static_eval(p99: float, attainment: float) -> Eval:
    """A whole-run (P99, attainment) as the bracketing search ranks it: a non-finite
    attainment counts as 0 (a NaN P99 already ranks last), and no mean tie-break."""
    return (p99, attainment if np.isfinite(attainment) else 0.0, 0.0)


def static_search(ev: Callable[[list[float]], None], evals: dict[float, Eval],
                  ocfg: OracleConfig) -> None:  # fmt: skip
    """The fleet-wide static split's search (``plan`` and ``cluster``'s ``best-static``):
    the coarse grid and :data:`EDGE_POINTS`, then :func:`bracket` from the lowest P99.

    The edges and the bracketing matter where P99(r) has a cliff: a regime whose KV
    working set fits only below r = 0.0125 leaves a plateau above it that the grid and its
    half-steps never leave (a one-node fleet that meets the SLO at r = 0.01 was planned as
    two nodes); from the edge 0.02, the plateau's lowest point, the bracket probes 0.01.
    ``ev`` evaluates a group of ratios into ``evals`` (and may stop the search by raising).
    """
    ev(first_points(ocfg))
    bracket(ev, evals, ocfg, None)


def search(
    objective: Callable[[float], Eval],
    ocfg: OracleConfig,
    seed: int,
    known: dict[float, Eval] | None = None,
    evaluate: Evaluate | None = None,
    *,
    grid: bool = True,
    prev_r: float | None = None,
) -> dict[float, Eval]:
    """Evaluate the start points, then narrow them; return r -> Eval.

    ``grid``: the coarse grid and edges, then Optuna (unless a grid step is given);
    else :func:`bracket` around ``prev_r``. ``known`` holds evaluations already made
    (e.g. the start points, evaluated in parallel); they are not repeated.
    ``evaluate`` runs the objective over a group of new ratios (the start points, then
    each batch of trials or probes); by default one after another.
    """
    evals: dict[float, Eval] = dict(known or {})
    run = evaluate or _in_order

    def ev(rs: list[float]) -> None:
        todo = sorted({round(float(r), 9) for r in rs} - evals.keys())
        for r, e in zip(todo, run(objective, todo), strict=True):
            evals[r] = e

    ev(start_points(ocfg, grid, prev_r))
    if ocfg.grid_step is not None:
        return evals
    if not grid:
        bracket(ev, evals, ocfg, prev_r)
        return evals
    if ocfg.trials == 0:
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
