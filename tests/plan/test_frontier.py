"""The headroom search (``plan/frontier.py``) over a stand-in fleet whose pass/fail at each
traffic growth is given, so the growths it tries, the bracket and the policy it simulates are
worked out by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from helm_plan.plan import frontier
from helm_plan.plan.config import PlanConfig
from helm_plan.plan.search import Point
from helm_plan.sim import NodeConfig

K = 3.0  # the planned traffic's factor


@pytest.fixture
def fleet(monkeypatch):
    """A fleet that holds the traffic up to +30 % growth; records (growth, spec, n, hint)."""
    seen = []
    monkeypatch.setattr(frontier, "scale_arrays", lambda t, k, **kw: (k, None))
    monkeypatch.setattr(frontier, "prepare_context", lambda t, *a, **kw: SimpleNamespace(k=t))

    def evaluate_size(ctx, ncfg, cfg, spec, router, n, hint):
        g = round(ctx.k / K - 1.0, 9)
        seen.append((g, spec, router, n, hint))
        return Point(n, g <= 0.3, 1.0, 1.0), None

    monkeypatch.setattr(frontier, "evaluate_size", evaluate_size)
    return seen


def _run(spec, hint, n=2, steps=2):
    setup = frontier.HeadroomSetup("TRACE", None, PlanConfig(), NodeConfig(), K, steps)
    gpu = SimpleNamespace(gpu=SimpleNamespace(name="a100-80g"), latency=None,
                          latency_profile=None)  # fmt: skip
    return frontier.headroom_task(setup, (gpu, "POOL", spec, "jsq", n, hint))


def test_best_static_is_held_at_the_split_the_plan_chose(fleet):
    # doubling from 1/N = 0.5 fails at once; two bisections: 0.25 passes, 0.375 fails
    h = _run("best-static", 0.15)
    assert (h.growth_lo, h.growth_hi, h.simulations) == (0.25, 0.375, 3)
    assert (h.policy, h.router, h.nodes) == ("best-static", "jsq", 2)
    # one simulation per growth, at r = 0.15: never a search over r
    assert fleet == [(0.5, "static:0.15", "jsq", 2, 0.15), (0.25, "static:0.15", "jsq", 2, 0.15),
                     (0.375, "static:0.15", "jsq", 2, 0.15)]  # fmt: skip


def test_other_policies_run_as_planned_and_a_missing_split_searches(fleet):
    h = _run("emb-max", 0.5, n=4, steps=1)  # 0.25 passes, 0.5 fails, 0.375 fails
    assert (h.growth_lo, h.growth_hi) == (0.25, 0.375)
    assert [(g, s) for g, s, *_ in fleet] == [(0.25, "emb-max"), (0.5, "emb-max"),
                                              (0.375, "emb-max")]  # fmt: skip
    fleet.clear()
    _run("best-static", math.nan, steps=0)  # no split known: best static searches its r
    assert [s for _, s, *_ in fleet] == ["best-static"]


def test_a_fleet_that_holds_the_largest_growth_is_capped(fleet, monkeypatch):
    monkeypatch.setattr(frontier, "MAX_GROWTH", 0.25)
    h = _run("best-static", 0.02, n=8)  # 0.125, then 0.25 (the cap): both pass
    assert (h.growth_lo, math.isnan(h.growth_hi), h.simulations) == (0.25, True, 2)
    assert [s for _, s, *_ in fleet] == ["static:0.02", "static:0.02"]
