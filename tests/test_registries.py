"""A policy or a router is one registered class: the report's colours, the CLI's choices and
(for a router) the cluster kernel's dispatch follow with no other edit (issue 40, one home for
each fact)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
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
from helm_plan.policies import (  # noqa: E402
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
from helm_plan.policies import registry as reg  # noqa: E402
from helm_plan.report import colours  # noqa: E402
from helm_plan.sim import NodeConfig  # noqa: E402
from helm_plan.sim.policy import StaticPolicy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


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


# ---- one file --------------------------------------------------------------------------------

HALF = """
from dataclasses import dataclass
from typing import ClassVar

from helm_plan.policies.registry import Built, PolicySpec, register_policy
from helm_plan.sim.policy import StaticPolicy


@register_policy
@dataclass(frozen=True)
class Half(PolicySpec):
    \"\"\"r = 0.5 in every window.\"\"\"

    name: ClassVar[str] = "half"
    aliases: ClassVar[tuple[str, ...]] = ("r-half",)
    kind: ClassVar[str] = "static"
    colour: ClassVar[str] = "#123456"
    order: ClassVar[int] = -1
    defaults_of: ClassVar[tuple[str, ...]] = ("analyze", "plan")

    def build(self, ctx, node_cfg, env):
        return Built(StaticPolicy(0.5, self.name))
"""

PROBE = """
import json, typing
from helm_plan import policies as P
from helm_plan.analyze import policies_stage as stages
from helm_plan.analyze.config import AnalyzeConfig
from helm_plan.plan.config import DEFAULT_POLICIES
from helm_plan.report.colours import policy_colour
from helm_plan_cli.commands import cluster_cmd, simulate_cmd

print(json.dumps({
    "spec": [P.parse_policy("half").spec, P.parse_policy("r-half").spec],
    "static": P.is_static("r-half"), "colour": policy_colour("half"),
    "usage": P.usage(), "catalogue": P.catalogue().splitlines()[0],
    "analyze": stages.POLICY_NAMES, "adaptive": stages.ADAPTIVE_NAMES,
    "plan": DEFAULT_POLICIES, "analyze_plan": AnalyzeConfig().plan_policies,
    "simulate_help": typing.get_args(simulate_cmd.PolicyOpt)[1].help,
    "cluster_help": typing.get_args(cluster_cmd.PolicyOpt)[1].help,
}))
"""


def test_a_new_policy_is_one_new_file(tmp_path):
    # A copy of the tree with one module added to helm_plan/policies/specs/ and nothing else
    # edited: every place that lists, parses, draws or defaults to policies picks it up.
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    shutil.copytree(REPO / "helm_plan", tmp_path / "helm_plan", ignore=ignore)
    shutil.copytree(REPO / "cli", tmp_path / "helm_plan_cli", ignore=ignore)
    (tmp_path / "helm_plan/policies/specs/half.py").write_text(textwrap.dedent(HALF))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["spec"] == ["half", "half"] and got["static"] and got["colour"] == "#123456"
    # order -1 puts it first everywhere (its file name sorts between controller and hill_climb)
    assert got["usage"].startswith("use half, best-static, ")
    assert got["catalogue"] == "- ``half``: r = 0.5 in every window."
    assert got["analyze"][:2] == ["half", "best-static"] and "half" not in got["adaptive"]
    assert got["plan"][:2] == ["half", "best-static"] and "half" not in got["analyze_plan"]
    assert "half, best-static" in got["simulate_help"]
    assert "half, best-static (one r for the fleet)" in got["cluster_help"]


def test_each_shipped_spec_lives_in_the_module_named_after_it():
    for name, cls in POLICIES.items():
        assert cls.__module__ == f"helm_plan.policies.specs.{name.replace('-', '_')}", name
