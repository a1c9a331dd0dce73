"""plan/gpus.py: which GPUs a plan compares, at what price."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from helm_plan.errors import ConfigError
from helm_plan.plan import gpus as G
from helm_plan.plan.config import DEFAULT_POLICIES, PlanConfig
from helm_plan.profiles import DEFAULT_MODEL, load_model

PROFILES = Path(__file__).resolve().parents[2] / "profiles" / "gpu"


def _toml_price(name: str) -> float:
    return tomllib.loads((PROFILES / f"{name}.toml").read_text())["cost_per_hour"]


def test_default_policies_keep_only_the_catalogue(monkeypatch):
    assert G.default_policies() == DEFAULT_POLICIES  # this build has them all
    # a build without the controller (or hill climbing) plans the others, in order
    monkeypatch.setattr(G, "POLICIES", {"best-static": 1, "kv-max": 1, "emb-max": 1})
    assert G.default_policies() == ("best-static", "emb-max", "kv-max")


def test_setups_once_per_gpu_in_order_with_profile_prices():
    cfg = PlanConfig(gpus=("h100-80g", "a100-80g", "h100-80g"))
    out = G.gpu_setups(cfg, load_model(DEFAULT_MODEL))
    assert [s.gpu.name for s in out] == ["h100-80g", "a100-80g"]
    assert [s.price_per_hour for s in out] == [_toml_price("h100-80g"), _toml_price("a100-80g")]
    for s in out:  # each GPU's own shipped latency profile, for the plan's model
        assert (s.latency_profile.gpu, s.latency_profile.model) == (s.gpu.name, DEFAULT_MODEL)
    assert out[0].latency != out[1].latency


def test_price_overrides_by_name_or_by_the_path_given(tmp_path):
    m = load_model(DEFAULT_MODEL)
    cfg = PlanConfig(gpus=("a100-80g", "h100-80g"), cost_per_hour=(("a100-80g", 0.5),))
    assert [s.price_per_hour for s in G.gpu_setups(cfg, m)] == [0.5, _toml_price("h100-80g")]
    path = str(PROFILES / "a100-40g.toml")
    for key in (path, "a100-40g"):  # keyed by the path as given, or by the profile's name
        cfg = PlanConfig(gpus=(path,), cost_per_hour=((key, 0.25),))
        (s,) = G.gpu_setups(cfg, m)
        assert s.gpu.name == "a100-40g" and s.price_per_hour == 0.25
    # the profile's name wins over the path when both are given
    cfg = PlanConfig(gpus=(path,), cost_per_hour=((path, 0.25), ("a100-40g", 0.75)))
    assert G.gpu_setups(cfg, m)[0].price_per_hour == 0.75


def test_override_of_a_gpu_not_planned_is_an_error():
    cfg = PlanConfig(gpus=("a100-80g",), cost_per_hour=(("h200-141g", 3.0), ("b100", 1.0),
                                                         ("a100-80g", 1.0)))  # fmt: skip
    with pytest.raises(ConfigError) as e:
        G.gpu_setups(cfg, load_model(DEFAULT_MODEL))
    assert e.value.args[0] == "--cost-per-hour names GPUs not planned: b100, h200-141g"
    assert e.value.hint == "use the names given to --gpus"


def test_default_policies_match_a_parameterised_name_by_its_family(monkeypatch):
    # "static:0.3" belongs to the static family: kept when the catalogue has "static"
    monkeypatch.setattr(G, "DEFAULT_POLICIES", ("static:0.3", "oracle:x", "emb-max"))
    monkeypatch.setattr(G, "POLICIES", {"static": 1, "emb-max": 1})
    assert G.default_policies() == ("static:0.3", "emb-max")


def test_an_explicit_latency_profile_is_used():
    # the plan's model is gr-small (default); a gr-large profile for the same GPU is taken as
    # given, not replaced by the shipped gr-small one
    cfg = PlanConfig(gpus=("a100-80g",), latency="a100-80g_gr-large")
    (s,) = G.gpu_setups(cfg, load_model(DEFAULT_MODEL))
    assert s.latency_profile.name == "a100-80g_gr-large"
    large = tomllib.loads((PROFILES.parent / "latency" / "a100-80g_gr-large.toml").read_text())
    assert s.latency.t_launch_s == pytest.approx(large["t_launch_s"])
