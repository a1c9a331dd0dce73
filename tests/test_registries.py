"""A policy or a router is one registered class: the report's colours and the CLI's choices
follow with no other edit (issue 40, one home for each fact)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from helm_plan.cluster import routers as R
from helm_plan.errors import ConfigError
from helm_plan.policies import POLICIES, POLICY_FACTS, Built, PolicySpec, parse_policy, usage
from helm_plan.policies import registry as reg
from helm_plan.report import colours
from helm_plan.sim.policy import StaticPolicy


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
        code = R.ROUTERS["jsq"].code
        colour = "#654321"
        symbol = "hexagon"

    return Half, Nearest


def test_a_registered_policy_is_drawn_parsed_and_listed(throwaway):
    assert colours.policy_colour("half") == "#123456"
    assert reg.is_static("half") and isinstance(parse_policy("half"), throwaway[0])
    assert usage().endswith(", schedule:FILE or half")  # the CLI's --policy help and hints
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


def test_a_second_baseline_is_refused():
    with pytest.raises(ValueError, match="second baseline"):
        reg.register_facts(reg.PolicyFacts("other", "baseline", "#000000", 0))
