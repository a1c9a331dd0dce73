"""controller, hill-climb and threshold as policy specs in simulate and the cluster."""

from __future__ import annotations

import numpy as np
import pytest
from controller_fixtures import NODE, small_ctx

from helm_plan.errors import ConfigError, InputFileError
from helm_plan.policies import PolicyEnv, parse_policy
from helm_plan.policies.specs.controller import ControllerSpec
from helm_plan.sim import simulate_node


@pytest.mark.parametrize("spec", ["controller", "hill-climb", "threshold"])
def test_specs_drive_a_node(spec):
    ctx = small_ctx()
    built = parse_policy(spec).build(ctx, NODE, PolicyEnv())
    res = simulate_node(ctx, built.policy, NODE)
    assert np.all((res.ratios >= 0) & (res.ratios <= 1))
    assert res.ratios[0] == 0.5
    if spec == "hill-climb":  # fixed steps of 0.05
        d = np.abs(np.diff(res.ratios))
        assert np.all(np.isclose(d, 0) | np.isclose(d, 0.05))


def test_controller_path_spec(tmp_path):
    assert parse_policy("controller") == ControllerSpec()
    spec = parse_policy(f"controller:{tmp_path / 'missing.npz'}")
    assert spec.spec.endswith("missing.npz")
    with pytest.raises(InputFileError, match="not found"):
        spec.build(None, NODE, PolicyEnv())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="takes no argument"):
        parse_policy("hill-climb:3")


@pytest.mark.parametrize("spec", ["controller", "hill-climb", "threshold"])
def test_cluster_accepts_closed_loop_specs(spec):
    ctx = small_ctx()
    from helm_plan.cluster import ClusterConfig, simulate_cluster
    from helm_plan.cluster.policies import node_policies

    cfg = ClusterConfig(nodes=2, router="jsq", node=NODE)
    pol = node_policies(spec, ctx, cfg)
    res = simulate_cluster(ctx, pol.policy, pol.cfg)
    assert np.all((res.ratios >= 0) & (res.ratios <= 1))
    assert res.ratios.shape[1] == cfg.nodes  # one column per node: each decides on its own


def test_controller_spec_anchors_to_the_runs_best_static():
    from helm_plan.oracle import BestStatic

    ctx = small_ctx()
    bs = BestStatic.__new__(BestStatic)
    object.__setattr__(bs, "ratio", 0.7)
    built = parse_policy("controller").build(ctx, NODE, PolicyEnv(best_static=bs))
    assert built.policy.controller.anchor == 0.7
    assert parse_policy("controller").build(ctx, NODE, PolicyEnv()).policy.controller.anchor is None
