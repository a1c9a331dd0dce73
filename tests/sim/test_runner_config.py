"""A run that never raises r steps its nodes with lazy refill: no hotness counts, same results.

Only a growing EMB cache is refilled, so a static split (the best-static search, emb-max,
kv-max) or a schedule that only ever lowers r never reads the counts its refill mode keeps.
The cluster's case is in ``tests/cluster/test_cluster_policies.py``. Each test runs the
same policy through the path as it was (the configured refill, counting
every lookup) and checks the results agree exactly, and that the counting really stopped.
"""

from __future__ import annotations

import numpy as np
import pytest
from brute import C, coeff_latency
from conftest import small_table
from test_sim_node import GPU, _model

from helm_plan import arrays as A
from helm_plan.cache import core
from helm_plan.sim import (
    NodeConfig,
    Observation,
    Policy,
    SchedulePolicy,
    StaticPolicy,
    prepare_context,
)
from helm_plan.sim import node as node_mod
from helm_plan.sim.policy import runner_config


def _regime_ctx():
    """The refill tests' node: a slow link, a pool where the split matters."""
    lat = coeff_latency(dict(C, h2d_bw_Bps=2e8, host_gather_Bps=1e9))
    t = small_table(6000, n_users=400, n_items=3000, max_new=6, n_candidates=16,
                    rate_qps=400.0, seed=3)  # fmt: skip
    return prepare_context(A.from_table(t), GPU, _model(), lat, pool_bytes=2_000_000)


class Climber(Policy):
    """A closed loop: it may raise r at any boundary, so it must keep its counts."""

    def decide(self, obs: Observation) -> float:
        return min(0.1 * (obs.window + 1), 1.0)

    @property
    def spec(self) -> str:
        return "climber"


def test_which_policies_may_raise_r():
    assert not StaticPolicy(0.4).raises_ratio
    assert not SchedulePolicy(np.array([0.9, 0.9, 0.2, 0.2])).raises_ratio
    assert SchedulePolicy(np.array([0.9, 0.2, 0.3])).raises_ratio
    assert Climber().raises_ratio  # the protocol's default: a closed loop may
    cfg = NodeConfig(refill="throttled")
    assert runner_config(cfg, [StaticPolicy(0.4), StaticPolicy(0.7)]).refill == "lazy"
    assert runner_config(cfg, [StaticPolicy(0.4), Climber()]) is cfg
    lazy = NodeConfig(refill="lazy")
    assert runner_config(lazy, [StaticPolicy(0.4)]) is lazy

    class Duck:  # the protocol's methods, registered rather than subclassed: it may raise r
        def decide(self, obs: Observation) -> float:
            return 0.5

    Policy.register(Duck)
    assert runner_config(cfg, [StaticPolicy(0.4), Duck()]) is cfg


def _spy_counts(monkeypatch) -> list[object]:
    seen: list[object] = []
    real = core.replay

    def spy(*args, **kw):
        seen.append(kw.get("counts"))
        return real(*args, **kw)

    monkeypatch.setattr(core, "replay", spy)
    return seen


@pytest.mark.parametrize("mode", ["throttled", "eager"])
@pytest.mark.parametrize("shape", ["constant", "falling"])
def test_a_node_run_that_never_raises_r_counts_nothing_and_gives_the_same_results(
    monkeypatch, mode, shape
):
    ctx = _regime_ctx()
    n_w = ctx.n_windows(1.0)
    r = np.full(n_w, 0.4) if shape == "constant" else np.where(np.arange(n_w) < n_w // 2, 0.9, 0.1)
    cfg = NodeConfig(window_s=1.0, refill=mode, throttle_share=0.3)
    seen = _spy_counts(monkeypatch)
    new = node_mod.simulate_node(ctx, r, cfg)
    assert len(seen) == n_w and all(c is None for c in seen)
    seen.clear()
    monkeypatch.setattr(node_mod, "runner_config", lambda c, _: c)  # the path as it was
    old = node_mod.simulate_node(ctx, r, cfg)
    assert len(seen) == n_w and all(c is not None for c in seen)
    np.testing.assert_array_equal(new.sojourn_s, old.sojourn_s)
    np.testing.assert_array_equal(new.miss_bytes, old.miss_bytes)
    assert new.windows.equals(old.windows)


def test_a_node_run_that_raises_r_keeps_its_counts(monkeypatch):
    ctx = _regime_ctx()
    n_w = ctx.n_windows(1.0)
    seen = _spy_counts(monkeypatch)
    rising = np.where(np.arange(n_w) < n_w // 2, 0.1, 0.9)
    node_mod.simulate_node(ctx, rising, NodeConfig(window_s=1.0, refill="throttled"))
    assert len(seen) == n_w and all(c is not None for c in seen)
