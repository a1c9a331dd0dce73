"""The closed-loop policies: the threshold rule and hill climbing against their definitions on
the node's own measurements, the controller policy's measured stats, and the catalogue specs."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from controller_fixtures import NODE, small_ctx

from helm_plan.controller.measure import NodeMeter
from helm_plan.controller.policy import (
    START_RATIO,
    THRESHOLD,
    ControllerPolicy,
    HillClimbPolicy,
    ThresholdPolicy,
)
from helm_plan.controller.runtime import Controller
from helm_plan.errors import ConfigError
from helm_plan.policies import PolicyEnv, parse_policy
from helm_plan.policies.specs.threshold import Threshold
from helm_plan.sim import simulate_node
from helm_plan.sim.metrics import window_features
from helm_plan.sim.step import NodeRunner


def _replay(ctx, ratios):
    """Serve ``ratios`` on a node and measure each window with a meter of its own."""
    node = NodeRunner(ctx, NODE)
    meter = NodeMeter(ctx, NODE)
    out = []
    for r in ratios:
        res = node.step(r)
        out.append(meter.measure(res, {}))
    return out


def test_threshold_rule_moves_to_the_mean_curves_optimum_only_past_the_threshold():
    ctx = small_ctx()
    res = simulate_node(ctx, ThresholdPolicy(ctx, NODE, threshold=0.01), NODE)
    assert res.ratios[0] == START_RATIO
    # the rule, written out: EWMA (1/2) of the busy-share curve, to its argmax when that beats
    # the current ratio by more than 1% of the busy time
    ms = _replay(ctx, res.ratios)
    curve, r = None, START_RATIO
    for w in range(1, len(res.ratios)):
        s = ms[w - 1].share
        curve = s if curve is None else 0.5 * curve + 0.5 * s
        k = int(np.argmax(curve))
        r = k / 100 if curve[k] - curve[round(r * 100)] > 0.01 else r
        assert res.ratios[w] == pytest.approx(r), w
    with pytest.raises(ConfigError, match="threshold must be in"):
        ThresholdPolicy(ctx, NODE, threshold=1.0)


def test_hill_climb_steps_toward_the_cache_that_saves_more():
    ctx = small_ctx()
    res = simulate_node(ctx, HillClimbPolicy(ctx, NODE), NODE)
    ms = _replay(ctx, res.ratios)
    # the meter of the replay used δ = 0.05 too: the same gains
    for w in range(1, len(res.ratios)):
        g, r = ms[w - 1].gains, res.ratios[w - 1]
        want = r + 0.05 if g.net_up_s > max(g.net_down_s, 0) else (
            r - 0.05 if g.net_down_s > max(g.net_up_s, 0) else r)  # fmt: skip
        assert res.ratios[w] == pytest.approx(float(np.clip(want, 0, 1)))
    with pytest.raises(ConfigError, match="hill-climb step must be in"):
        HillClimbPolicy(ctx, NODE, step=0.0)


def test_controller_policy_reports_what_it_measured():
    ctx = small_ctx()
    from helm_plan.controller.runtime import DEFAULT_PATH

    ctrl = Controller.load(DEFAULT_PATH)
    pol = ControllerPolicy(ctx, NODE, ctrl, "controller", anchor=0.6)
    res = simulate_node(ctx, pol, NODE)
    st = res.policy_stats
    assert res.ratios[0] == 0.6  # starts at its anchor
    assert st["decisions"] == len(res.ratios) - 1 == len(st["decision_latency_ns"])
    assert st["anchor"] == 0.6 and st["anchor_given"]
    assert st["decision_latency_ns"] == pol.controller.latency_ns
    # a policy copied per node shares the trace, not a copy of it
    twin = copy.deepcopy(pol)
    assert twin.ctx is pol.ctx and twin.meter.ghost.wl is pol.meter.ghost.wl
    assert twin.controller is not pol.controller


def test_threshold_spec():
    assert parse_policy("threshold") == Threshold() and Threshold().spec == "threshold"
    assert parse_policy("threshold:0.02").spec == "threshold:0.02"
    for bad in ("threshold:x", "threshold:1.5"):
        with pytest.raises(ConfigError, match="policy threshold"):
            parse_policy(bad)
    built = parse_policy("threshold:0.02").build(small_ctx(), NODE, PolicyEnv())
    assert isinstance(built.policy, ThresholdPolicy) and built.policy.threshold == 0.02
    assert Threshold().threshold == THRESHOLD


def test_features_of_a_window_are_its_arrival_features():
    # the policies read the arrival features simulate_node hands them: the same function
    ctx = small_ctx()
    node = NodeRunner(ctx, NODE)
    f = window_features(ctx.arrays.ts_s, node.edges, NODE.window_s, ctx.first_visit, ctx.ctx_len)
    res = node.step(0.5)
    m = NodeMeter(ctx, NODE).measure(res, {k: float(v[0]) for k, v in f.items()})
    assert m.x[6] == pytest.approx(min(max(f["cold_user_share"][0], 0), 1))
