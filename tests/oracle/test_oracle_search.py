"""The oracle's search and its tie-breaks, on hand-made evaluations (no simulation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.search import (
    EDGE_POINTS,
    best_of,
    first_points,
    rank_key,
    ratio_grid,
    search,
    seed_for,
    start_points,
)

NAN = float("nan")


def test_equal_p99_attainment_and_mean_go_to_the_lower_r():
    ev = (5.0, 0.9, 2.0)
    assert best_of({0.7: ev, 0.3: ev, 0.5: ev}, 0.02)[0] == 0.3


def test_equal_p99_goes_to_the_higher_attainment_even_at_a_worse_mean_and_higher_r():
    evals = {0.3: (5.0, 0.8, 1.0), 0.7: (5.0, 0.9, 2.0)}
    assert best_of(evals, 0.02)[0] == 0.7


def test_equal_p99_and_attainment_go_to_the_lower_mean():
    evals = {0.3: (5.0, 0.9, 2.0), 0.7: (5.0, 0.9, 1.0)}
    assert best_of(evals, 0.02)[0] == 0.7


def test_a_lower_p99_beats_every_tie_break():
    evals = {0.3: (5.0, 1.0, 0.1), 0.7: (4.9, 0.5, 3.0)}
    assert best_of(evals, 0.02)[0] == 0.7


def test_full_tie_goes_to_the_r_nearest_the_previous_optimum_then_the_lower_r():
    ev = (5.0, 0.9, 2.0)
    evals = {0.2: ev, 0.5: ev, 0.9: ev}
    assert best_of(evals, 0.02, prev_r=0.8)[0] == 0.9
    assert best_of(evals, 0.02, prev_r=0.35)[0] == 0.2  # 0.2 and 0.5 equally near: lower r
    assert best_of(evals, 0.02, prev_r=NAN)[0] == 0.2  # no previous optimum: lower r


def test_nan_evaluations_lose_to_any_finite_one():
    evals = {0.0: (NAN, NAN, NAN), 0.5: (9.0, 0.1, 9.0), 1.0: (9.0, NAN, 1.0)}
    assert best_of(evals, 0.02)[0] == 0.5  # NaN attainment ranks below any number
    assert rank_key(0.0, (NAN, NAN, NAN)) == (math.inf, math.inf, math.inf, 0.0, 0.0)
    assert rank_key(0.4, (1.0, 0.5, 2.0), prev_r=0.1) == pytest.approx((1.0, -0.5, 2.0, 0.3, 0.4))


def test_flat_band_of_the_evaluations():
    # within 2% of the best P99 (10.0): 10.1 and 10.2 are in, 10.21 is out
    evals = {0.1: (10.21, 1, 1), 0.2: (10.2, 1, 1), 0.4: (10.0, 1, 1), 0.6: (10.1, 1, 1),
             0.8: (11.0, 1, 1)}  # fmt: skip
    r, width, lo, hi = best_of(evals, 0.02)
    assert (r, lo, hi) == (0.4, 0.2, 0.6)
    assert width == pytest.approx(0.4)


def test_ratio_grid_and_first_points():
    np.testing.assert_array_equal(ratio_grid(0.25), [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(ratio_grid(0.3), [0.0, 0.3, 0.6, 0.9, 1.0])  # 1.0 appended
    assert len(ratio_grid(0.1)) == 11 and ratio_grid(0.1)[3] == 0.3  # no 0.30000000000000004
    pts = first_points(OracleConfig(coarse_step=0.5))
    assert pts == sorted([0.0, 0.5, 1.0, *EDGE_POINTS])
    pts = first_points(OracleConfig(coarse_step=0.5, grid_step=0.25))
    assert pts == [0.0, 0.02, 0.25, 0.5, 0.75, 0.98, 1.0]


def test_search_evaluates_each_first_point_once_and_reuses_known_ones():
    calls = []

    def objective(r):
        calls.append(r)
        return (1.0 + (r - 0.4) ** 2, 1.0, 1.0)

    known = {0.0: (7.0, 0.0, 7.0)}
    evals = search(objective, OracleConfig(coarse_step=0.5, trials=0), 0, known=known)
    assert sorted(calls) == [0.02, 0.5, 0.98, 1.0]  # 0.0 was known
    assert evals[0.0] == (7.0, 0.0, 7.0) and set(evals) == {0.0, 0.02, 0.5, 0.98, 1.0}
    calls.clear()
    evals = search(objective, OracleConfig(coarse_step=0.5, grid_step=0.1), 0)
    assert len(calls) == len(set(calls)) == len(evals) == 13  # 11 grid points + 2 edges


def test_optuna_trials_are_memoised_and_on_the_lattice():
    calls = []

    def objective(r):
        calls.append(r)
        return (1.0 + (r - 0.37) ** 2, 1.0, 1.0)

    ocfg = OracleConfig(coarse_step=0.5, trials=12, ratio_step=0.01)
    evals = search(objective, ocfg, seed_for(3, 0))
    assert len(calls) == len(set(calls)) == len(evals)
    assert len(evals) > 5  # Optuna evaluated new points beyond the first five
    assert all(abs(r * 100 - round(r * 100)) < 1e-6 for r in evals)
    assert seed_for(3, 0) == seed_for(3, 0) != seed_for(3, 1)


def _bowl(r):
    """P99 with its minimum at 0.37; NaN (an unusable ratio) above 0.9."""
    return (
        (float("nan"), float("nan"), float("nan")) if r > 0.9 else (1.0 + (r - 0.37) ** 2, 1.0, 1.0)
    )


@pytest.fixture
def studies(monkeypatch):
    """The Optuna studies search() creates, and the samplers it builds (kind, seed)."""
    import optuna

    made, samplers = [], []
    real_create, real_tpe = optuna.create_study, optuna.samplers.TPESampler

    def create(*args, **kw):
        made.append(real_create(*args, **kw))
        return made[-1]

    def sampler(kind):
        def build(seed=None, **kw):
            samplers.append((kind, seed))
            return real_tpe(seed=seed)  # a GP sampler would be slow; its seeding is the point

        return build

    monkeypatch.setattr(optuna, "create_study", create)
    monkeypatch.setattr(optuna.samplers, "TPESampler", sampler("tpe"))
    monkeypatch.setattr(optuna.samplers, "GPSampler", sampler("gp"))
    return made, samplers


def test_optuna_is_warm_started_on_the_lattice_and_minimises_p99(studies):
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState

    made, samplers = studies
    ocfg = OracleConfig(coarse_step=0.5, trials=6, ratio_step=0.01)
    evals = search(_bowl, ocfg, 5)
    (study,) = made
    assert samplers == [("tpe", 5)]
    assert study.direction.name == "MINIMIZE"
    dist = FloatDistribution(0.0, 1.0, step=0.01)
    trials = study.trials
    # warm start: the finite first points (0.98 and 1.0 are NaN: left out), then 6 trials
    warm = [t for t in trials if t.number < 3]
    assert [t.params["r"] for t in warm] == [0.0, 0.02, 0.5]
    assert len(trials) == 3 + 6
    for t in trials:
        assert t.distributions == {"r": dist} and t.state == TrialState.COMPLETE
        r = round(t.params["r"], 9)
        # a trial's value is the P99 of its ratio; an unusable ratio scores 1e300
        assert t.value == (1e300 if r > 0.9 else evals[r][0])


def test_one_trial_adds_one_evaluation_and_samplers_take_the_task_seed(studies):
    made, samplers = studies
    first = len(first_points(OracleConfig(coarse_step=0.5)))
    evals = search(_bowl, OracleConfig(coarse_step=0.5, trials=1), 9)
    assert len(made[0].trials) == 3 + 1 and len(evals) <= first + 1
    search(_bowl, OracleConfig(coarse_step=0.5, trials=1, sampler="gp"), 11)
    assert samplers == [("tpe", 9), ("gp", 11)]


def test_search_is_deterministic_per_seed():
    ocfg = OracleConfig(coarse_step=0.5, trials=8)
    a, b, c = (search(_bowl, ocfg, s) for s in (4, 4, 5))
    assert sorted(a) == sorted(b)  # the same ratios evaluated (NaN != NaN, so keys only)
    assert sorted(a) != sorted(c)


def _optuna_loop_reference(objective, ocfg, seed):
    """The ratios Optuna's own ``study.optimize`` evaluates, in order (one trial at a time)."""
    import optuna
    from optuna.distributions import FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    evals = {r: objective(r) for r in first_points(ocfg)}
    order = list(evals)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    dist = FloatDistribution(0.0, 1.0, step=ocfg.ratio_step)
    for r, ev in sorted(evals.items()):
        if np.isfinite(ev[0]):
            study.add_trial(
                optuna.trial.create_trial(params={"r": r}, distributions={"r": dist}, value=ev[0])
            )

    def obj(trial):
        r = round(trial.suggest_float("r", 0.0, 1.0, step=ocfg.ratio_step), 9)
        if r not in evals:
            evals[r] = objective(r)
            order.append(r)
        p99 = evals[r][0]
        return p99 if np.isfinite(p99) else 1e300

    study.optimize(obj, n_trials=ocfg.trials)
    return order


def test_a_batch_of_one_is_optunas_own_optimize_loop():
    ocfg = OracleConfig(coarse_step=0.25, trials=10, trial_batch=1)
    calls = []

    def objective(r):
        calls.append(r)
        return _bowl(r)

    search(objective, ocfg, 21)
    assert calls == _optuna_loop_reference(_bowl, ocfg, 21)


def test_trials_are_asked_a_batch_at_a_time_and_any_evaluator_gives_the_same_ratios(studies):
    ocfg = OracleConfig(coarse_step=0.5, trials=7, trial_batch=3)
    groups = []

    def in_order(objective, rs):
        groups.append(list(rs))
        return [objective(r) for r in rs]

    def backwards(objective, rs):  # evaluates in reverse order: the study must not notice
        return [objective(r) for r in reversed(rs)][::-1]

    a = search(_bowl, ocfg, 13, evaluate=in_order)
    b = search(_bowl, ocfg, 13, evaluate=backwards)
    assert sorted(a) == sorted(b)
    assert groups[0] == first_points(ocfg)  # the first points go out as one group
    # then 3 + 3 + 1 trials: a group holds a batch's new ratios, each evaluated once
    assert all(len(g) <= 3 for g in groups[1:]) and len(groups) == 1 + 3
    flat = [r for g in groups for r in g]
    assert len(flat) == len(set(flat)) == len(a)
    study = studies[0][0]
    assert len(study.trials) == 3 + 7  # the finite first points, then every asked trial told
    for t in study.trials[3:]:
        r = round(t.params["r"], 9)
        assert t.value == (1e300 if r > 0.9 else a[r][0])


def test_an_evaluator_must_return_one_result_per_ratio():
    def short(objective, rs):  # drops the last ratio's result
        return [objective(r) for r in rs][:-1]

    with pytest.raises(ValueError, match="zip"):
        search(_bowl, OracleConfig(coarse_step=0.5, trials=0), 0, evaluate=short)


def test_tpe_tells_running_trials_apart_only_when_trials_are_batched(monkeypatch):
    import optuna

    built = []
    real = optuna.samplers.TPESampler

    def spy(**kw):
        built.append(kw)
        return real(**kw)

    monkeypatch.setattr(optuna.samplers, "TPESampler", spy)
    for batch in (1, 2, 3):
        search(_bowl, OracleConfig(coarse_step=0.5, trials=2, trial_batch=batch), 7)
    assert built == [{"seed": 7, "constant_liar": b} for b in (False, True, True)]


# ---------------------------------------------------------------- without the grid (analyze)


def _counting(fn):
    calls = []

    def objective(r):
        calls.append(r)
        return fn(r)

    return objective, calls


def _p99(curve):
    return lambda r: (curve(r), 1.0, curve(r))


def test_bracket_starts_at_the_previous_optimum_and_stops_on_a_flat_bracket():
    objective, calls = _counting(_p99(lambda r: 10.0 + 0.01 * abs(r - 0.42)))
    evals = search(objective, OracleConfig(), 0, grid=False, prev_r=0.42)
    # 0.32, 0.42, 0.52: both sides within 2 % of the best, so nothing more is evaluated
    assert sorted(calls) == [0.32, 0.42, 0.52] and best_of(evals, 0.02, 0.42)[0] == 0.42
    assert start_points(OracleConfig(), False, None) == [0.4, 0.5, 0.6]  # no previous: 0.5
    assert start_points(OracleConfig(), False, 0.95) == [0.85, 0.95, 1.0]  # clipped to [0, 1]


@pytest.mark.parametrize("target", [0.0, 0.03, 0.17, 0.37, 0.5, 0.81, 0.99, 1.0])
@pytest.mark.parametrize("prev", [None, 0.1, 0.9])
def test_bracket_lands_in_the_exhaustive_grids_flat_band_anywhere_on_the_lattice(target, prev):
    """A V-shaped P99 (10 % per 0.1 of r): the search must walk to it, into the flat band
    the exhaustive grid finds (r within 0.02 of the minimum: 2 % of P99)."""
    fn = _p99(lambda r: 1.0 + abs(r - target))
    objective, calls = _counting(fn)
    evals = search(objective, OracleConfig(), 0, grid=False, prev_r=prev)
    grid = search(fn, OracleConfig(grid_step=0.01), 0, grid=False)
    _, _, lo, hi = best_of(grid, 0.02)
    assert lo <= best_of(evals, 0.02, prev)[0] <= hi
    assert len(calls) == len(set(calls)) <= 16  # against 101 for the exhaustive grid
    assert all(abs(r * 100 - round(r * 100)) < 1e-6 for r in calls)


def test_bracket_finds_the_edge_of_a_cliff():
    """P99 falls towards small r, then jumps: EMB starved below 0.06 (the usual cliff)."""
    objective, _ = _counting(_p99(lambda r: 100.0 if r < 0.06 else 1.0 + r))
    evals = search(objective, OracleConfig(), 0, grid=False, prev_r=0.5)
    r, _, lo, hi = best_of(evals, 0.02, 0.5)
    assert r == 0.06 and lo == 0.06 and hi <= 0.08


def test_bracket_spends_at_most_trials_evaluations_after_the_first_three():
    objective, calls = _counting(_p99(lambda r: 1.0 + abs(r - 0.03)))
    search(objective, OracleConfig(trials=2), 0, grid=False, prev_r=0.9)
    assert len(calls) == 3 + 2
    objective, calls = _counting(_p99(lambda r: 1.0 + abs(r - 0.03)))
    search(objective, OracleConfig(trials=0), 0, grid=False, prev_r=0.9)
    assert sorted(calls) == [0.8, 0.9, 1.0]


def test_bracket_probes_both_open_sides_as_one_group_and_never_repeats():
    groups = []

    def in_order(objective, rs):
        groups.append(list(rs))
        return [objective(r) for r in rs]

    evals = search(_p99(lambda r: 1.0 + 4 * (r - 0.5) ** 2 + abs(r - 0.5)), OracleConfig(),
                   0, evaluate=in_order, grid=False)  # fmt: skip
    assert groups[0] == [0.4, 0.5, 0.6] and [len(g) for g in groups[1:3]] == [2, 2]
    flat = [r for g in groups for r in g]
    assert len(flat) == len(set(flat)) == len(evals)


def test_bracket_treats_an_unusable_ratio_as_the_worst():
    objective, _ = _counting(_bowl)  # NaN above 0.9, minimum at 0.37
    evals = search(objective, OracleConfig(), 0, grid=False, prev_r=0.95)
    assert best_of(evals, 0.02, 0.95)[0] == pytest.approx(0.37, abs=0.06)


def test_a_validation_grid_replaces_the_bracket():
    objective, calls = _counting(_bowl)
    search(objective, OracleConfig(grid_step=0.1), 0, grid=False, prev_r=0.3)
    assert sorted(calls) == [round(0.1 * k, 9) for k in range(11)]  # no coarse grid, no edges


def test_seed_points_join_every_search_s_first_points():
    # the bracketing start (0.4, 0.5, 0.6 without a previous r*), the grid and edges, and
    # best static's start (0, 0.38, 0.62, 1) each gain the seed point 0.01
    from helm_plan.oracle.static import static_start

    o = OracleConfig(seed_points=(0.01,))
    assert start_points(o, False, None) == [0.01, 0.4, 0.5, 0.6]
    assert 0.01 in first_points(o) and 0.01 not in first_points(OracleConfig())
    assert static_start(o) == [0.0, 0.01, 0.38, 0.62, 1.0]
    assert static_start(OracleConfig()) == [0.0, 0.38, 0.62, 1.0]
    assert start_points(OracleConfig(grid_step=0.5, seed_points=(0.01,)), False, None) == [
        0.0, 0.01, 0.5, 1.0]  # fmt: skip
