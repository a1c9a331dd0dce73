"""Per-node policies (each sees only its own windows), fleet-wide best static, and the metrics."""

from __future__ import annotations

import numpy as np
import pytest
from cluster_fixtures import context, small_model
from conftest import small_table

from helm_plan.cluster import ClusterConfig, simulate_cluster
from helm_plan.cluster import sim as cluster_sim
from helm_plan.cluster.compare import router_ci, run_point
from helm_plan.cluster.policies import fleet_best_static, node_policies
from helm_plan.errors import ConfigError
from helm_plan.oracle import OracleConfig
from helm_plan.sim import NodeConfig, Observation, Policy, SchedulePolicy, StaticPolicy


class Recorder(Policy):
    """Moves r by what its node saw last window, and records every observation."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, float]] = []

    def reset(self) -> None:
        self.seen = []

    def decide(self, obs: Observation) -> float:
        if obs.last is None:
            return 0.5
        self.seen.append((obs.window, obs.last.requests, obs.features["arrival_rate_rps"]))
        return 0.2 if obs.last.requests % 2 else 0.8

    @property
    def spec(self) -> str:
        return "recorder"


def _ctx(n=1500, seed=0):
    table = small_table(n, n_users=60, n_items=150, n_candidates=5, rate_qps=300.0, seed=seed)
    return context(table, small_model(layers=1, d_model=8, max_seq_len=64), 30_000)


def test_each_node_decides_from_its_own_windows_only():
    ctx = _ctx()
    cfg = ClusterConfig(nodes=3, router="p2c", node=NodeConfig(window_s=0.5))
    pols = [Recorder() for _ in range(3)]
    res = simulate_cluster(ctx, pols, cfg)
    for n, p in enumerate(pols):
        w = res.per_node[n].windows
        assert [s[0] for s in p.seen] == list(range(1, len(w)))
        assert [s[1] for s in p.seen] == w["requests"].to_list()[:-1]
        np.testing.assert_allclose([s[2] for s in p.seen], w["requests"].to_numpy()[:-1] / 0.5)
        np.testing.assert_array_equal(res.ratios[:, n], w["ratio"].to_numpy())
    assert res.windows["ratio_spread"].max() == pytest.approx(0.6)  # nodes split differently
    # one Policy given: every node gets its own copy
    res2 = simulate_cluster(ctx, Recorder(), cfg)
    np.testing.assert_array_equal(res2.ratios, res.ratios)


def test_metrics_from_their_definitions():
    ctx = _ctx()
    ws = 0.5
    n_w = ctx.n_windows(ws)
    pols = [SchedulePolicy(np.full(n_w, r)) for r in (0.1, 0.5, 0.9)]
    res = simulate_cluster(ctx, pols, ClusterConfig(nodes=3, router="random",
                                                    node=NodeConfig(window_s=ws)))  # fmt: skip
    m = res.window_idx >= 1
    work = np.bincount(res.node[m], weights=(res.service_s / res.batch_size)[m], minlength=3)
    assert res.imbalance_max_mean == pytest.approx(work.max() / work.mean())
    assert res.imbalance_cv == pytest.approx(work.std() / work.mean())
    np.testing.assert_allclose(res.node_table["work_s"].to_numpy(), work)
    assert res.ratio_spread == pytest.approx(0.8)
    assert res.p99_ms == pytest.approx(np.percentile(res.sojourn_s[m], 99) * 1e3)
    assert res.emb_hit_rate == pytest.approx(
        1 - res.miss_bytes[m].sum() / res.lookup_bytes[m].sum()
    )
    assert res.h2d_bytes == sum(int(p.windows["h2d_bytes"][1:].sum()) for p in res.per_node)
    assert res.requests == sum(p.requests for p in res.per_node) == m.sum()


def test_best_static_is_one_ratio_for_the_fleet():
    ctx = _ctx(900)
    cfg = ClusterConfig(nodes=2, router="jsq", node=NodeConfig(window_s=0.5))
    fs = fleet_best_static(ctx, cfg, OracleConfig(coarse_step=0.25))
    ev = fs.evaluated
    assert len(ev) >= 5 and fs.p99_ms == ev["p99_ms"].min()
    res = simulate_cluster(ctx, fs.ratio, cfg)
    assert res.p99_ms == fs.p99_ms and set(res.ratios.ravel()) == {fs.ratio}
    pol = node_policies("best-static", ctx, cfg, None)
    assert pol.fleet_static is not None and pol.policy.decide(
        Observation(0, np.nan)
    ) == pytest.approx(fleet_best_static(ctx, cfg).ratio)


@pytest.mark.parametrize("spec", ["oracle", "adaptive", "naive-adaptive"])
def test_oracle_schedules_are_refused(spec):
    with pytest.raises(ConfigError, match="no per-node meaning in a cluster"):
        node_policies(spec, _ctx(300), ClusterConfig(nodes=2))


def test_router_ci_is_paired_and_centred():
    ctx = _ctx(3000)
    cfg = ClusterConfig(nodes=3, node=NodeConfig(window_s=0.5, slo_ms=2.0))
    a = run_point(ctx, ClusterConfig(**{**cfg.__dict__, "router": "jsq"}), "static:0.5")
    b = run_point(ctx, ClusterConfig(**{**cfg.__dict__, "router": "random"}), "static:0.5")
    same = router_ci(a.sojourn_s, a.sojourn_s, a.window_idx, 2.0, n_boot=200)
    assert same.p99_cut == 0 and same.p99_lo == 0 and same.p99_hi == 0
    ci = router_ci(a.sojourn_s, b.sojourn_s, a.window_idx, 2.0, n_boot=300)
    assert ci.p99_lo <= ci.p99_cut <= ci.p99_hi
    assert ci.att_lo <= ci.attainment_gain <= ci.att_hi
    assert ci.attainment_gain == pytest.approx(
        a.overall["slo_attainment"] - b.overall["slo_attainment"]
    )


def test_a_static_cluster_counts_nothing_and_gives_the_same_results(monkeypatch):
    """Nodes that never raise r step with lazy refill (``runner_config``): no counts, and the
    results of the configured refill that counted every lookup."""
    ctx = _ctx()
    cfg = ClusterConfig(nodes=3, router="jsq", node=NodeConfig(window_s=1.0, refill="throttled"))
    flags: list[bool] = []
    real = cluster_sim.ClusterState

    def spy(*args):
        flags.append(args[-1])  # whether the nodes keep hotness counts
        return real(*args)

    monkeypatch.setattr(cluster_sim, "ClusterState", spy)
    new = simulate_cluster(ctx, StaticPolicy(0.6), cfg)
    monkeypatch.setattr(cluster_sim, "runner_config", lambda c, _: c)
    old = simulate_cluster(ctx, StaticPolicy(0.6), cfg)
    assert flags == [False, True]
    for name in ("node", "sojourn_s", "miss_bytes", "ratios"):
        np.testing.assert_array_equal(getattr(new, name), getattr(old, name))
    assert new.windows.equals(old.windows) and new.p99_ms == old.p99_ms
