"""The plan config's checks (``plan/config.py``): each bad field is named with its value, each
boundary value is accepted, and the cross-field rules hold."""

from __future__ import annotations

import math
import re

import pytest

from helm_plan.cluster import MAX_NODES
from helm_plan.errors import ConfigError
from helm_plan.plan.config import PlanConfig


def test_defaults_and_boundaries_are_accepted():
    PlanConfig()
    edge = PlanConfig(
        gpus=("a100-80g",), latency="some-profile", slo_ms=0.5, attainment=1e-9, policies=("x",),
        routers=("jsq",), baseline_router="helm", peak_qps=1e-3, scale_by="time", max_nodes=1,
        cost_per_hour=(("a100-80g", 0.0),), load_refine_steps=0, load_max_requests=1, n_boot=10,
        ci_level=0.0, seed=0,
    )  # fmt: skip
    assert edge.price_overrides == {"a100-80g": 0.0}
    PlanConfig(attainment=1.0, ci_level=1.0, max_nodes=MAX_NODES, load_refine_steps=30,
               scale=1e-3, scale_by="users")  # fmt: skip
    # several GPUs with their shipped latency profiles, several prices
    c = PlanConfig(gpus=("a", "b"), cost_per_hour=(("a", 2.5), ("b", 4.0)))
    assert c.price_overrides == {"a": 2.5, "b": 4.0}
    assert PlanConfig().price_overrides == {}


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"gpus": ()}, "plan needs at least one GPU"),
        ({"gpus": ("a", "b"), "latency": "p"}, "one latency profile for 2 GPUs"),
        ({"slo_ms": 0.0}, "slo_ms must be positive, got 0.0"),
        ({"slo_ms": -2.0}, "slo_ms must be positive, got -2.0"),
        ({"attainment": 1.5}, "attainment must be in (0, 1], got 1.5"),
        ({"attainment": -0.01}, "attainment must be in (0, 1], got -0.01"),
        ({"attainment": 0.0}, "attainment must be in (0, 1], got 0.0"),
        ({"routers": ()}, "plan needs at least one router"),
        ({"routers": ("jsq", "fastest")}, "unknown router 'fastest'"),
        ({"baseline_router": "slowest"}, "unknown router 'slowest'"),
        ({"policies": ()}, "plan needs at least one policy"),
        ({"peak_qps": 100.0, "scale": 2.0}, "give --peak-qps or --scale, not both"),
        ({"peak_qps": 0.0}, "peak_qps must be positive, got 0.0"),
        ({"scale": -1.0}, "scale must be positive, got -1.0"),
        ({"scale_by": "rows"}, "unknown scaling 'rows'"),
        ({"max_nodes": 0}, "max_nodes must be a positive integer, got 0"),
        ({"max_nodes": 4097}, "max_nodes must be at most 4,096 (every node's caches and queue are simulated in memory; plan a share of the traffic), got 4,097"),
        ({"cost_per_hour": (("a100-80g", -1.0),)},
         "cost_per_hour for a100-80g must be finite and >= 0, got -1.0"),
        ({"cost_per_hour": (("h100-80g", 2.0), ("h200-141g", math.inf))},
         "cost_per_hour for h200-141g must be finite and >= 0, got inf"),
        ({"cost_per_hour": (("a100-80g", math.nan),)},
         "cost_per_hour for a100-80g must be finite and >= 0, got nan"),
        ({"load_refine_steps": -1}, "load_refine_steps must be an integer in [0, 30], got -1"),
        ({"load_refine_steps": 31}, "load_refine_steps must be an integer in [0, 30], got 31"),
        ({"load_max_requests": 0}, "load_max_requests must be a positive integer, got 0"),
        ({"n_boot": 9}, "n_boot must be an integer >= 10, got 9"),
        ({"ci_level": 1.5}, "ci_level must be in [0.0, 1.0], got 1.5"),
        ({"ci_level": -0.5}, "ci_level must be in [0.0, 1.0], got -0.5"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
    ],
)  # fmt: skip
def test_bad_fields_are_named_with_their_value(kw, msg):
    with pytest.raises(ConfigError, match=f"^{re.escape(msg)}$"):
        PlanConfig(**kw)


@pytest.mark.parametrize(
    ("kw", "hint"),
    [
        ({"gpus": ()}, "pass --gpus a100-80g,..."),
        ({"gpus": ("a", "b"), "latency": "p"},
         "drop --latency (each GPU uses its shipped profile) or plan one GPU"),
        ({"routers": ()}, "pass --routers jsq,helm"),
        ({"policies": ()}, "pass --policies best-static"),
        ({"peak_qps": 100.0, "scale": 2.0}, "drop one of the two"),
        ({"scale_by": "rows"}, "use users or time"),
        ({"cost_per_hour": (("a", -1.0),)}, "pass --cost-per-hour GPU=USD with a price in dollars"),
    ],
)  # fmt: skip
def test_errors_say_how_to_fix_them(kw, hint):
    with pytest.raises(ConfigError) as e:
        PlanConfig(**kw)
    assert e.value.hint == hint


def test_one_gpu_may_take_a_latency_profile_and_many_without_one():
    assert PlanConfig(gpus=("a",), latency="p").latency == "p"
    assert PlanConfig(gpus=("a", "b", "c")).latency is None
    with pytest.raises(ConfigError, match="^one latency profile for 3 GPUs$"):
        PlanConfig(gpus=("a", "b", "c"), latency="p")


def test_peak_qps_or_scale_alone_is_fine():
    assert PlanConfig(peak_qps=100.0).scale is None
    assert PlanConfig(scale=2.0).peak_qps is None
