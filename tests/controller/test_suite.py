"""The training suite and its held-out split: disjoint, varied, and loaded as asked."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helm_plan.controller import suite
from helm_plan.profiles import load_model
from helm_plan.sim import simulate_node


def test_held_out_shares_nothing_with_training():
    train, held = suite.TRAIN, suite.HELD_OUT
    assert not {s.seed for s in train} & {s.seed for s in held}
    assert not {s.name for s in train} & {s.name for s in held}
    # the public log the validation reads is never trained on
    assert {s.source for s in train if s.kind == "log"} == {"amazon"}
    assert {s.source for s in held if s.kind == "log"} == {"movielens"}
    assert len({s.name for s in train}) == len(train)


def test_suite_covers_models_regimes_pools_loads_and_scales():
    t = suite.TRAIN
    assert {s.model for s in t} == {"gr-small", "gr-large", "gr-prod"}
    assert {s.source for s in t if s.kind == "synth"} == {"steady", "trend", "burst", "mixed"}
    assert any(s.kind == "scenario" for s in t) and any(s.kind == "log" for s in t)
    assert len({s.pool_fraction for s in t}) >= 3 and len({s.items for s in t}) >= 2
    assert min(s.util for s in t) < 0.2 and max(s.util for s in t) >= 0.7


def test_slo_is_the_models_default_unless_the_spec_sets_one():
    s = suite.TRAIN[2]
    assert s.node().slo_ms == load_model(s.model).default_slo_ms
    assert dataclasses.replace(s, slo_ms=3.0).node().slo_ms == 3.0
    assert s.node().window_s == suite.WINDOW_S


def test_calibrated_load_keeps_the_node_as_busy_as_asked():
    spec = suite.TraceSpec("synth", "steady", "gr-large", 0.1, 0.4, 99, duration_s=60.0)
    ctx, ncfg = suite.build(spec)
    res = simulate_node(ctx, np.array([0.5]), dataclasses.replace(ncfg, refill="lazy"))
    i0 = len(res.service_s) - res.requests
    busy = res.service_s[i0:].sum() / (60.0 - ncfg.window_s)
    assert busy == pytest.approx(0.4, rel=0.25)  # the pilot is shorter and colder
    with pytest.raises(Exception, match="datasets folder"):
        suite.build(dataclasses.replace(suite.HELD_OUT[-1]), None)
