"""Fixtures of the controller tests (traces: controller_fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_fixtures import NODE, small_synth

from helm_plan import trace
from helm_plan.sim import load_context


@pytest.fixture(scope="session")
def ctx():
    return load_context(small_synth(), pool_fraction=0.1, seed=3)


@pytest.fixture(scope="session")
def label_trace(ctx):
    from helm_plan.controller import dataset
    from helm_plan.oracle import OracleConfig

    return dataset.build(ctx, NODE, OracleConfig(trials=0), "small-burst")


@pytest.fixture
def synth_trace_file(tmp_path: Path) -> Path:
    p = tmp_path / "small-burst.parquet"
    trace.write(small_synth(), p, {"source": "tests.controller", "seed": 3})
    return p
