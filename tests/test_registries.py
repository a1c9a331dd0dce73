"""A policy or a router is one registered class: the report's colours, the CLI's choices and
(for a router) the cluster kernel's dispatch follow with no other edit (issue 40, one home for
each fact)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import small_table

sys.path.insert(0, str(Path(__file__).resolve().parent / "cluster"))
from cluster_fixtures import context, small_model  # noqa: E402

from helm_plan.cluster import ClusterConfig, _kernel, simulate_cluster  # noqa: E402
from helm_plan.cluster.routers import base as R  # noqa: E402
from helm_plan.errors import ConfigError  # noqa: E402
from helm_plan.policies import POLICIES, POLICY_FACTS, Built, PolicySpec, parse_policy, usage  # noqa: E402
from helm_plan.policies import registry as reg  # noqa: E402
from helm_plan.report import colours  # noqa: E402
from helm_plan.sim import NodeConfig  # noqa: E402
from helm_plan.sim.policy import StaticPolicy  # noqa: E402


@pytest.fixture
def throwaway(monkeypatch):
    # Registries are module dicts: the copies keep the test from leaking its classes.
    monkeypatch.setattr(reg, "POLICIES", dict(POLICIES))
    monkeypatch.setattr(reg, "POLICY_FACTS", dict(POLICY_FACTS))
    monkeypatch.setattr(colours, "POLICY_FACTS", reg.POLICY_FACTS)
    monkeypatch.setattr(R, "ROUTERS", dict(R.ROUTERS))
    monkeypatch.setattr(colours, "ROUTERS", R.ROUTERS)

    @reg.register_policy
    @dataclass(frozen=True)
    class Half(PolicySpec):
        name: ClassVar[str] = "half"
        kind: ClassVar[str] = "static"
        colour: ClassVar[str] = "#123456"
        order: ClassVar[int] = 99

        def build(self, ctx, node_cfg, env):
            return Built(StaticPolicy(0.5, self.name))

    @R.register_router
    class Nearest(R.Router):
        name = "nearest"
        colour = "#654321"
        symbol = "hexagon"

        @staticmethod
        def route(q, v):
            # no shipped router does this: every request to the last node
            return v.load.shape[0] - 1, 0.0

    return Half, Nearest


def test_a_registered_policy_is_drawn_parsed_and_listed(throwaway):
    assert colours.policy_colour("half") == "#123456"
    assert reg.is_static("half") and isinstance(parse_policy("half"), throwaway[0])
    assert usage().endswith(", threshold[:T] or half")  # the CLI's --policy help and hints
    with pytest.raises(ConfigError) as ei:
        parse_policy("nonesuch")
    assert "half" in ei.value.hint


def test_a_registered_router_is_drawn_and_listed(throwaway):
    assert (colours.router_colour("nearest"), colours.router_symbol("nearest")) == (
        "#654321", "hexagon")  # fmt: skip
    assert isinstance(R.get_router("nearest"), throwaway[1])
    with pytest.raises(ConfigError) as ei:
        R.get_router("nonesuch")
    assert "nearest" in ei.value.hint  # the CLI's --router choices
    assert list(R.ROUTERS)[-1] == "nearest"  # listed after the shipped routers


def test_a_router_without_a_rule_is_refused(throwaway):
    class Nothing(R.Router):
        name = "nothing"

    with pytest.raises(TypeError, match="Nothing has no rule"):
        R.register_router(Nothing)
    assert "nothing" not in R.ROUTERS


def test_a_registered_router_is_dispatched_to_by_the_cached_kernel(throwaway):
    ctx = context(small_table(60, seed=3), small_model(), 30_000)
    cfg = ClusterConfig(nodes=3, router="jsq", node=NodeConfig(window_s=0.5))
    jsq = simulate_cluster(ctx, 0.4, cfg)
    compiled = list(_kernel.run_window.overloads)
    res = simulate_cluster(ctx, 0.4, dataclasses.replace(cfg, router="nearest"))
    assert (res.node == 2).all() and len(set(jsq.node.tolist())) == 3
    # the kernel names no router: the new one ran through the very compiled code the shipped
    # one did (no new specialisation), so a kernel loaded from numba's on-disk cache, compiled
    # before this router existed, dispatches to it just the same
    assert list(_kernel.run_window.overloads) == compiled


def test_a_second_baseline_is_refused():
    with pytest.raises(ValueError, match="second baseline"):
        reg.register_facts(reg.PolicyFacts("other", "baseline", "#000000", 0))
