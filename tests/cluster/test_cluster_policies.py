"""Per-node policies (each sees only its own windows), fleet-wide best static, and the metrics.

The fleet-wide best-static search and the per-node policy specs, hand-worked (issue 16, item 4).

``fleet_best_static`` is driven through a scripted executor: it checks that every task is
``static_point`` on the shared ``(ctx, cfg)`` and answers each r with a (P99, attainment)
pair written down below, so the grid and edges, the bracket around the best point, the tie-breaks
(lower P99, then higher attainment, then smaller r; a NaN P99 is the worst, a NaN
attainment counts as 0) and the evaluated table are all worked out by hand, with no
simulation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from cluster_fixtures import context, small_model
from conftest import small_table

from helm_plan.cluster import ClusterConfig, simulate_cluster
from helm_plan.cluster import policies as CP
from helm_plan.cluster import sim as cluster_sim
from helm_plan.cluster.compare import router_ci, run_point
from helm_plan.cluster.policies import FleetStatic, fleet_best_static, node_policies, static_point
from helm_plan.errors import ConfigError
from helm_plan.exec import Executor
from helm_plan.oracle import OracleConfig
from helm_plan.policies import Built, PolicyEnv, PolicySpec
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


CTX = object()  # the scripted executor never simulates: any object stands for the context
CFG = ClusterConfig(nodes=2, router="jsq", node=NodeConfig(window_s=0.5))
NAN = float("nan")


class Scripted(Executor):
    """Answers ``static_point`` tasks from a table and records every map call."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.calls: list[list[float]] = []
        self.labels: list[str] = []
        self.progress: list[object] = []

    @property
    def workers(self) -> int:
        return 1

    def map(self, fn, items, *, shared=None, progress=None, label=None):
        assert fn is static_point
        assert shared[0] is CTX and shared[1] is CFG
        self.calls.append(list(items))
        self.labels += [label(r) for r in items]
        self.progress.append(progress)
        return [self.answer(r) for r in items]


def _grid(step: float) -> list[float]:
    return [round(k * step, 9) for k in range(round(1 / step) + 1)]


def test_key_by_hand():
    assert CP._key(0.3, (5.0, 0.9)) == (5.0, -0.9, 0.3)
    assert CP._key(0.7, (2.5, 0.0)) == (2.5, -0.0, 0.7)
    k = CP._key(0.1, (NAN, NAN))
    assert k == (math.inf, 0.0, 0.1)
    assert CP._key(0.2, (math.inf, 0.5)) == (math.inf, -0.5, 0.2)
    assert CP._key(0.2, (4.0, -math.inf)) == (4.0, 0.0, 0.2)


FIRST_01 = sorted([*_grid(0.1), 0.02, 0.98])  # the default grid and the edge points


def test_grid_then_the_bracket_around_the_best():
    # P99 = 1 + 100 |r - 0.44| ms: the coarse best is 0.4 (5 ms), neither neighbour flat.
    # Golden steps: snap(0.4 - 0.382 * 0.1) = 0.36 and snap(0.4 + 0.382 * 0.1) = 0.44 (1 ms,
    # the new best); around 0.44: snap(0.44 - 0.382 * 0.04) = 0.42, snap(0.44 + 0.382 * 0.06)
    # = 0.46; then 0.43 and 0.45, after which both gaps are one lattice step
    ex = Scripted(lambda r: (1 + 100 * abs(r - 0.44), 0.5 + r / 10))
    seen = object()
    fs = fleet_best_static(CTX, CFG, None, ex, seen)  # default oracle: step 0.1
    assert ex.calls == [FIRST_01, [0.36, 0.44], [0.42, 0.46], [0.43, 0.45]]
    assert ex.progress == [seen] * 4
    assert ex.labels[:3] == ["best static r=0", "best static r=0.02", "best static r=0.1"]
    assert ex.labels[-2:] == ["best static r=0.43", "best static r=0.45"]
    assert isinstance(fs, FleetStatic)
    assert fs.ratio == 0.44
    assert fs.p99_ms == pytest.approx(1.0)
    assert fs.slo_attainment == pytest.approx(0.544)
    ev = fs.evaluated
    assert ev.columns == ["r", "p99_ms", "slo_attainment"]
    rs = sorted([*FIRST_01, 0.36, 0.44, 0.42, 0.46, 0.43, 0.45])
    assert ev["r"].to_list() == rs
    np.testing.assert_allclose(ev["p99_ms"].to_numpy(), [1 + 100 * abs(r - 0.44) for r in rs])
    np.testing.assert_allclose(ev["slo_attainment"].to_numpy(), [0.5 + r / 10 for r in rs])


def test_the_bracket_stops_where_no_r_can_beat_the_best_by_flat_tol():
    # P99 = 3 + |r - 0.5|, step 0.25: 0.25 and 0.75 are 8% above the best, so 0.4 and 0.6
    # are probed; 0.4 and 0.6 are 3.3% above, so 0.46 and 0.54; those are within 2% and the
    # lines through the points beside them bound the gaps below at 3.0: the best stays 0.5
    ex = Scripted(lambda r: (3 + abs(r - 0.5), 0.9))
    fs = fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.25), ex)
    assert ex.calls == [[0.0, 0.02, 0.25, 0.5, 0.75, 0.98, 1.0], [0.4, 0.6], [0.46, 0.54]]
    assert (fs.ratio, fs.p99_ms, fs.slo_attainment) == (0.5, 3.0, 0.9)
    assert ex.progress == [None, None, None]
    assert fs.evaluated["r"].to_list() == [0.0, 0.02, 0.25, 0.4, 0.46, 0.5, 0.54, 0.6, 0.75,
                                           0.98, 1.0]  # fmt: skip


@pytest.mark.parametrize(
    ("best", "probes"),
    [(0.0, [0.01]), (1.0, [0.99]), (0.25, [0.16, 0.35])],
)
def test_the_bracket_stays_inside_0_1(best, probes):
    # P99 = 1 + 10 |r - best|: at an end only the inner gap is probed (0.02 * 0.382 -> 0.01)
    ex = Scripted(lambda r: (1 + 10 * abs(r - best), 0.5))
    fs = fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.25), ex)
    assert ex.calls[1] == probes
    assert fs.ratio == best
    assert all(0.0 <= r <= 1.0 for call in ex.calls for r in call)


@pytest.mark.parametrize("step", [0.1, 0.25, 0.4, 0.5])
def test_no_ratio_is_simulated_twice_and_the_minimum_is_found(step):
    def f(r):
        return 1 + abs(r - 0.63) + 5 * (r < 0.05)

    ex = Scripted(lambda r: (f(r), 0.5))
    fs = fleet_best_static(CTX, CFG, OracleConfig(coarse_step=step), ex)
    every = [r for call in ex.calls for r in call]
    assert len(every) == len(set(every)) == len(fs.evaluated)
    # a minimum off every grid: the search ends within flat_tol (2%) of the 0.01 lattice's
    # brute-force minimum
    assert fs.p99_ms <= 1.02 * min(f(k / 100) for k in range(101))


def test_ties_higher_attainment_then_smaller_r():
    # every r has the same P99 (so every side is flat: no probe); attainment peaks at 0.5 and
    # 0.75 (equal): the smaller wins
    att = {0.0: 0.1, 0.25: 0.2, 0.5: 0.9, 0.75: 0.9, 1.0: 0.3}
    ex = Scripted(lambda r: (7.0, att.get(r, 0.0)))
    fs = fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.25), ex)
    assert len(ex.calls) == 1
    assert (fs.ratio, fs.p99_ms, fs.slo_attainment) == (0.5, 7.0, 0.9)
    # a lower P99 beats any attainment
    ex = Scripted(lambda r: (6.0 if r == 1.0 else 7.0, 0.0 if r == 1.0 else 1.0))
    assert fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.25), ex).ratio == 1.0


def test_a_probe_tying_the_best_wins_by_smaller_r():
    # 0.4 (a probe, evaluated after the grid: snap(0.5 - 0.382 * 0.25)) ties the coarse best
    # 0.5: the smaller r wins although min() meets 0.5 first
    ex = Scripted(lambda r: (7.0 if r in (0.4, 0.5) else 9.0, 0.5))
    fs = fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.25), ex)
    assert ex.calls[1] == [0.4, 0.6]
    assert fs.ratio == 0.4


def test_nan_p99_is_worst_and_nan_attainment_counts_as_zero():
    # r = 0 has no P99 (NaN): it must lose to every finite P99, even though min() sees it first
    p99 = {0.0: NAN, 0.5: 9.0, 1.0: 9.0}
    att = {0.0: 1.0, 0.5: NAN, 1.0: 0.0}
    ex = Scripted(lambda r: (p99.get(r, 50.0), att.get(r, 0.0)))
    fs = fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.5), ex)
    # 0.5 (NaN attainment = 0) ties 1.0 (attainment 0): the smaller r wins, and the bracket
    # probes around it: snap(0.5 -+ 0.382 * 0.48) = 0.32, 0.68
    assert ex.calls[:2] == [[0.0, 0.02, 0.5, 0.98, 1.0], [0.32, 0.68]]
    assert fs.ratio == 0.5 and fs.p99_ms == 9.0 and math.isnan(fs.slo_attainment)
    # a NaN attainment loses to a positive one at the same P99
    att2 = {0.0: 1.0, 0.5: NAN, 1.0: 0.25}
    ex = Scripted(lambda r: (p99.get(r, 50.0), att2.get(r, 0.0)))
    assert fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.5), ex).ratio == 1.0
    # ... and beats a negative one (it counts as 0, not as worse than everything)
    att3 = {0.0: 1.0, 0.5: -0.5, 1.0: NAN}
    ex = Scripted(lambda r: (p99.get(r, 50.0), att3.get(r, 0.0)))
    assert fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.5), ex).ratio == 1.0


def test_an_executor_losing_a_task_is_an_error():
    # an executor that answers fewer tasks than it was given must not drop r values silently
    class Short(Scripted):
        def map(self, fn, items, **kw):
            return super().map(fn, items, **kw)[:-1]

    with pytest.raises(ValueError, match="zip"):
        fleet_best_static(CTX, CFG, OracleConfig(coarse_step=0.5), Short(lambda r: (1.0, 1.0)))


def test_static_point_is_the_cluster_run_at_r():
    table = small_table(300, n_users=20, n_items=80, n_candidates=4, rate_qps=300.0, seed=1)
    ctx = context(table, small_model(layers=1, d_model=8, max_seq_len=64), 20_000)
    cfg = ClusterConfig(nodes=2, router="round-robin", node=NodeConfig(window_s=0.5, slo_ms=0.645))
    p99, att = static_point((ctx, cfg), 0.3)
    res = simulate_cluster(ctx, [StaticPolicy(0.3), StaticPolicy(0.3)], cfg)
    m = res.window_idx >= 1  # the warm-up window is excluded
    assert p99 == pytest.approx(np.percentile(res.sojourn_s[m], 99) * 1e3)
    assert att == pytest.approx(np.mean(res.sojourn_s[m] * 1e3 <= 0.645))
    assert 0 < att < 1  # the SLO splits the requests, so p99 and attainment differ


@pytest.mark.parametrize("spec", ["oracle", "adaptive", "naive-adaptive"])
def test_oracle_schedules_are_refused_with_the_hint(spec):
    with pytest.raises(ConfigError) as e:
        node_policies(spec, CTX, CFG)
    assert str(e.value) == (
        f"policy {spec!r} labels one node's trace and has no per-node meaning in a cluster"
    )
    assert e.value.hint == (  # every spec a fleet can run, from the registry
        "use best-static (one r for the fleet), emb-max, kv-max, hill-climb, threshold[:T], "
        "controller[:PATH], static:R or schedule:FILE"
    )


def test_best_static_spec_searches_the_fleet_with_the_env():
    ex = Scripted(lambda r: (1 + abs(r - 0.5), 0.8))
    seen = object()
    env = PolicyEnv(oracle=OracleConfig(coarse_step=0.5), executor=ex, progress=seen)
    np_ = node_policies("best-static", CTX, CFG, env)
    # env's oracle step: 0.5 and the edges, then the bracket (0.32, 0.68 first)
    assert ex.calls[:2] == [[0.0, 0.02, 0.5, 0.98, 1.0], [0.32, 0.68]]
    assert ex.progress == [seen] * len(ex.calls)
    assert np_.spec == "best-static" and np_.cfg is CFG
    assert np_.fleet_static is not None and np_.fleet_static.ratio == 0.5
    assert isinstance(np_.policy, StaticPolicy)
    assert np_.policy.decide(Observation(3, 0.1)) == 0.5
    assert np_.policy.spec == "best-static"


@pytest.mark.parametrize(("spec", "r"), [("static:0.3", 0.3), ("emb-max", 1.0), ("kv-max", 0.0)])
def test_static_specs_keep_the_config(spec, r):
    cfg = ClusterConfig(nodes=2, node=NodeConfig(refill="throttled"))
    np_ = node_policies(spec, CTX, cfg)
    assert np_.cfg is cfg and np_.cfg.node.refill == "throttled"
    assert np_.spec == spec and np_.fleet_static is None
    assert np_.policy.decide(Observation(0, 0.5)) == r


@dataclass(frozen=True)
class _NeedsEager(PolicySpec):
    """A spec whose policy needs eager refill (as the refused oracle variants do)."""

    name: ClassVar[str] = "needs-eager"

    def build(self, ctx, node_cfg, env) -> Built:
        assert ctx is CTX and node_cfg is CFG.node and isinstance(env, PolicyEnv)
        return Built(StaticPolicy(0.25, "needs-eager"), "eager")


def test_a_spec_refill_replaces_the_node_refill(monkeypatch):
    monkeypatch.setattr(CP, "parse_policy", lambda spec: _NeedsEager())
    np_ = node_policies("needs-eager", CTX, CFG)
    assert np_.cfg.node.refill == "eager" and CFG.node.refill != "eager"
    # everything else is kept
    assert np_.cfg == dataclasses.replace(CFG, node=dataclasses.replace(CFG.node, refill="eager"))
    assert np_.spec == "needs-eager" and np_.policy.decide(Observation(0, 0.5)) == 0.25
