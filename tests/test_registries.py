"""A policy or a router is one registered class: the report's colours and the CLI's choices
follow with no other edit (issue 40, one home for each fact)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import pytest

from helm_plan.cluster import routers as R
from helm_plan.errors import ConfigError
from helm_plan.policies import (
    ALIASES,
    POLICIES,
    POLICY_FACTS,
    Built,
    PolicySpec,
    canonical,
    is_static,
    parse_policy,
    usage,
)
from helm_plan.policies import registry as reg
from helm_plan.report import colours
from helm_plan.sim.policy import StaticPolicy


@pytest.fixture
def throwaway(monkeypatch):
    # Registries are module dicts: the copies keep the test from leaking its classes.
    monkeypatch.setattr(reg, "POLICIES", dict(POLICIES))
    monkeypatch.setattr(reg, "POLICY_FACTS", dict(POLICY_FACTS))
    monkeypatch.setattr(reg, "ALIASES", dict(ALIASES))
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


# ---- aliases ---------------------------------------------------------------------------------


def test_every_alias_parses_to_its_spec_and_outputs_spell_the_name():
    assert ALIASES == {"best_static": "best-static", "emb_max": "emb-max", "kv_max": "kv-max",
                       "naive_adaptive": "naive-adaptive", "hill_climb": "hill-climb"}  # fmt: skip
    for alias, name in ALIASES.items():
        spec = parse_policy(f" {alias} ")
        assert type(spec) is POLICIES[name] and spec == parse_policy(name)
        assert spec.spec == name and canonical(alias) == name
        assert is_static(alias) == is_static(name)
        assert colours.policy_colour(alias) == POLICY_FACTS[name].colour
    assert canonical(" kv_max:3 ") == "kv-max:3" and canonical("nonesuch:1") == "nonesuch:1"
    with pytest.raises(ConfigError, match="policy 'kv-max' takes no argument, got 'kv_max:3'"):
        parse_policy("kv_max:3")


def test_an_unknown_name_lists_the_canonical_names_only():
    with pytest.raises(ConfigError) as ei:
        parse_policy("kv-maxx")
    hint = ei.value.hint
    assert hint == usage()
    assert all((cls.usage or name) in hint for name, cls in POLICIES.items())
    assert not any(alias in hint for alias in ALIASES)


def _spec(name: str, aliases: tuple[str, ...] = ()) -> type[PolicySpec]:
    """An unregistered spec class (``kind`` static, so no baseline clash)."""

    @dataclass(frozen=True)
    class Other(PolicySpec):
        def build(self, ctx, node_cfg, env):
            return Built(StaticPolicy(0.5, self.name))

    Other.name, Other.aliases, Other.kind = name, aliases, "static"
    Other.colour, Other.order = "#000000", 50
    return Other


@pytest.mark.parametrize(
    ("name", "aliases", "error"),
    [
        ("other", ("kv-max",), "policy 'other': alias 'kv-max' is the name of the policy 'kv-max'"),
        ("other", ("kv_max",), "policy 'other': alias 'kv_max' is already an alias of 'kv-max'"),
        ("other", ("fleet-static",), "alias 'fleet-static' is the name of the policy 'fleet-static'"),
        ("other", ("other",), "policy 'other': alias 'other' is its own name"),
        ("other", ("o", "o"), "policy 'other': alias 'o' is declared twice"),
        ("other", ("o:1",), "alias 'o:1' is not a bare name"),
        ("other", (" o",), "alias ' o' is not a bare name"),
        ("best_static", (), "policy 'best_static': the name is already an alias of 'best-static'"),
        ("kv-max", (), "policy 'kv-max': the name is already taken by "
                       "helm_plan.policies.specs.kv_max.KvMax"),
        ("fleet-static", (), "policy 'fleet-static': the name is already taken by analyze's own"),
    ],
)  # fmt: skip
def test_a_name_or_alias_another_policy_answers_to_is_refused(throwaway, name, aliases, error):
    before = (dict(reg.POLICIES), dict(reg.POLICY_FACTS), dict(reg.ALIASES))
    with pytest.raises(ValueError, match=re.escape(error)):
        reg.register_policy(_spec(name, aliases))
    assert before == (reg.POLICIES, reg.POLICY_FACTS, reg.ALIASES)  # nothing half-registered


def test_a_spec_registered_again_keeps_only_its_new_aliases(throwaway):
    half = throwaway[0]
    half.aliases = ("r-half",)
    reg.register_policy(half)
    assert isinstance(parse_policy("r-half"), half)
    half.aliases = ("half-r",)
    reg.register_policy(half)
    assert reg.ALIASES.get("r-half") is None and reg.ALIASES["half-r"] == "half"


def test_analyze_hands_its_plan_the_names_of_aliased_policies():
    from helm_plan.analyze.config import AnalyzeConfig
    from helm_plan.analyze.operating import capacity_inputs

    cfg = AnalyzeConfig(plan_policies=("kv_max", "best-static", "controller:x.npz", "nonesuch"))
    assert capacity_inputs(cfg).plan.policies == ("kv-max", "best-static", "controller:x.npz")
