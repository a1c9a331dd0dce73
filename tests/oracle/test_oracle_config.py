"""OracleConfig's checks, value by value: each bound accepted at its edge, refused past it.

Pins every check of ``OracleConfig.__post_init__`` (DESIGN.md, Oracle): the exact problem
message (``"<field> must be ..., got <value>"``, the format of ``helm_plan.config``'s
``require_*`` helpers) and the sampler/warm-up hints listing the valid choices, the lower and
upper edges of every range (inclusive), ``None`` allowed for the two optional steps, and the
"multiple of 0.01" rule of ``coarse_step`` on both sides of a lattice point.
"""

from __future__ import annotations

import pytest

from helm_plan.errors import ConfigError
from helm_plan.oracle.config import OracleConfig


def _err(**kw: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        OracleConfig(**kw)  # type: ignore[arg-type]
    return info.value


def test_defaults_and_edges_are_accepted():
    c = OracleConfig()
    assert (c.trials, c.sampler, c.grid_step, c.ratio_step, c.coarse_step) == (
        20,
        "tpe",
        None,
        0.01,
        0.1,
    )
    assert (c.seed, c.warmup_windows, c.warmup, c.flat_tol) == (0, 1, "carry", 0.02)
    # every lower and upper edge is inside its range
    OracleConfig(trials=0, seed=0, warmup_windows=0, flat_tol=0.0)
    OracleConfig(flat_tol=1.0, sampler="gp", warmup="window")
    OracleConfig(grid_step=1.0, ratio_step=1.0, coarse_step=1.0)
    OracleConfig(grid_step=1e-9, ratio_step=1e-9, coarse_step=0.01)
    OracleConfig(grid_step=0.5, ratio_step=0.5, coarse_step=0.5)
    OracleConfig(ratio_step=None)  # continuous search
    # lattice multiples of 0.01, with the float error of *100 (0.07 * 100 = 7.000000000000001)
    for step in (0.07, 0.29, 0.57, 0.99, 0.05):
        assert OracleConfig(coarse_step=step).coarse_step == step


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"trials": -1}, "trials must be an integer >= 0, got -1"),
        ({"trials": 2.0}, "trials must be an integer >= 0, got 2.0"),
        ({"trial_batch": 0}, "trial_batch must be a positive integer, got 0"),
        ({"trial_batch": 1.5}, "trial_batch must be a positive integer, got 1.5"),
        ({"grid_step": 0.0}, "grid_step must be positive, got 0.0"),
        ({"grid_step": -0.5}, "grid_step must be positive, got -0.5"),
        ({"grid_step": 1.5}, "grid_step must be in [0.0, 1.0], got 1.5"),
        ({"ratio_step": 0.0}, "ratio_step must be positive, got 0.0"),
        ({"ratio_step": -0.5}, "ratio_step must be positive, got -0.5"),
        ({"ratio_step": 1.5}, "ratio_step must be in [0.0, 1.0], got 1.5"),
        ({"coarse_step": 0.0}, "coarse_step must be positive, got 0.0"),
        ({"coarse_step": 0.005}, "coarse_step must be in [0.01, 1.0], got 0.005"),
        ({"coarse_step": 1.01}, "coarse_step must be in [0.01, 1.0], got 1.01"),
        ({"coarse_step": 0.125}, "coarse_step must be a multiple of 0.01, got 0.125"),
        # 12.4 rounds down and 12.6 rounds up: the distance to the lattice is taken both ways
        ({"coarse_step": 0.124}, "coarse_step must be a multiple of 0.01, got 0.124"),
        ({"coarse_step": 0.126}, "coarse_step must be a multiple of 0.01, got 0.126"),
        ({"coarse_step": 0.0101}, "coarse_step must be a multiple of 0.01, got 0.0101"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"warmup_windows": -1}, "warmup_windows must be an integer >= 0, got -1"),
        ({"flat_tol": -0.01}, "flat_tol must be in [0.0, 1.0], got -0.01"),
        ({"flat_tol": 1.01}, "flat_tol must be in [0.0, 1.0], got 1.01"),
        ({"seed_points": (0.5, 1.5)}, "seed_points must be in [0.0, 1.0], got 1.5"),
        ({"seed_points": (-0.01,)}, "seed_points must be in [0.0, 1.0], got -0.01"),
    ],
)
def test_each_bad_value_names_its_field(kw, message):
    assert str(_err(**kw)) == message


def test_multiple_of_001_hint():
    assert _err(coarse_step=0.125).hint == "use e.g. 0.1 or 0.05"


def test_unknown_sampler_and_warmup_list_the_choices():
    e = _err(sampler="cma")
    assert (str(e), e.hint) == ("unknown sampler 'cma'", "use one of tpe, gp")
    e = _err(warmup="forever")
    assert (str(e), e.hint) == ("unknown warmup 'forever'", "use one of window, carry")
