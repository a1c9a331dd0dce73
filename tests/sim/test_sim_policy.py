"""The primitive policies and ``fill_forward``: checks against their documented contracts.

Pins :mod:`helm_plan.sim.policy` (issue 16 mutation survivors): ``StaticPolicy`` and
``SchedulePolicy`` accept exactly the ratios in [0, 1] (both ends included) with precise
errors otherwise, answer their ratio per window, and report their spec; ``fill_forward``
is compared with a plain-Python forward/backward fill.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helm_plan.errors import ConfigError
from helm_plan.sim.policy import Observation, SchedulePolicy, StaticPolicy, fill_forward


def _obs(w: int) -> Observation:
    return Observation(window=w, ratio=math.nan)


@pytest.mark.parametrize("r", [0.0, 1.0, 0.25])
def test_static_accepts_the_closed_interval(r: float) -> None:
    p = StaticPolicy(r)
    assert p.decide(_obs(0)) == r and p.decide(_obs(7)) == r
    assert p.spec == {0.0: "static:0", 1.0: "static:1", 0.25: "static:0.25"}[r]
    p.reset()  # stateless: nothing to forget
    assert p.decide(_obs(3)) == r


@pytest.mark.parametrize("r", [-1e-9, 1 + 1e-9, math.nan, math.inf])
def test_static_rejects_outside(r: float) -> None:
    with pytest.raises(ConfigError) as e:
        StaticPolicy(r)
    assert e.value.one_line() == (
        f"static ratio must be in [0, 1], got {r}; pass static:R with R in [0, 1]"
    )


def test_static_spec_name_overrides() -> None:
    assert StaticPolicy(0.3, name="best-static").spec == "best-static"
    assert StaticPolicy(1 / 3).spec == "static:0.333333"  # %g: 6 significant digits


def test_schedule_answers_each_window_and_checks_length() -> None:
    p = SchedulePolicy([[0.0, 0.5], [1.0, 0.25]])  # flattened in order
    assert p.ratios.dtype == np.float64 and p.ratios.shape == (4,)
    got = [p.decide(_obs(w)) for w in range(4)]
    assert got == [0.0, 0.5, 1.0, 0.25] and all(type(x) is float for x in got)
    assert p.spec == "schedule"
    assert SchedulePolicy(np.array([0.1]), name="labels.parquet").spec == "labels.parquet"
    with pytest.raises(ConfigError) as e:
        p.decide(_obs(4))
    assert e.value.one_line() == (
        "the schedule has 4 windows; window 4 has no ratio; "
        "make the schedule for this trace and window length"
    )
    empty = SchedulePolicy(np.zeros(0))
    assert empty.ratios.shape == (0,)
    with pytest.raises(ConfigError, match="the schedule has 0 windows; window 0 has no ratio"):
        empty.decide(_obs(0))


def test_schedule_integer_ratios_become_floats() -> None:
    p = SchedulePolicy(np.array([0, 1, 1, 0]))
    assert p.ratios.dtype == np.float64
    assert p.decide(_obs(1)) == 1.0 and type(p.decide(_obs(1))) is float


@pytest.mark.parametrize(
    ("ratios", "bad"),
    [
        ([0.2, 1.5, -1.0], "1.5"),
        ([0.2, -1e-9, 1.5], "-1e-09"),
        ([0.0, 1.0, math.nan], "nan"),
        ([math.inf], "inf"),
        ([1.0 + 1e-12], str(1.0 + 1e-12)),
    ],
)
def test_schedule_rejects_the_first_bad_ratio(ratios: list[float], bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        SchedulePolicy(np.array(ratios))
    assert e.value.one_line() == f"ratio must be in [0, 1], got {bad}; fix the schedule"


def _brute_fill(r: list[float]) -> list[float]:
    finite = [x for x in r if not math.isnan(x)]
    out, last = [], finite[0]
    for x in r:
        if not math.isnan(x):
            last = x
        out.append(last)
    return out


@pytest.mark.parametrize(
    "r",
    [
        [0.3],
        [0.1, 0.2, 0.3],
        [math.nan, math.nan, 0.4, math.nan, 0.1, math.nan, math.nan],
        [math.nan, 0.0, 1.0],
        [0.5, math.nan, math.nan],
        [math.nan, math.nan, math.nan, 0.7],
        [0.0, math.nan, 0.9, math.nan, math.nan, 0.2],
    ],
)
def test_fill_forward_matches_brute_force(r: list[float]) -> None:
    a = np.array(r)
    got = fill_forward(a)
    assert got.dtype == np.float64
    assert got.tolist() == _brute_fill(r)
    np.testing.assert_array_equal(a, np.array(r))  # the input is not modified


def test_fill_forward_empty_and_all_nan() -> None:
    out = fill_forward(np.zeros(0))
    assert out.shape == (0,) and out.dtype == np.float64
    for bad in ([math.nan], [math.nan, math.inf]):
        with pytest.raises(ConfigError) as e:
            fill_forward(np.array(bad))
        assert e.value.one_line() == (
            "schedule has no finite ratio (every window is empty); check the labels file"
        )


def test_fill_forward_infinite_counts_as_missing() -> None:
    # "finite" ratios: an infinite one is replaced like a NaN
    assert fill_forward(np.array([0.2, math.inf, 0.4])).tolist() == [0.2, 0.2, 0.4]
    ints = fill_forward(np.array([1, 0]))
    assert ints.dtype == np.float64 and ints.tolist() == [1.0, 0.0]
