"""The router comparison (``cluster/compare.py``): the paired router CI and what a grid point keeps.

``router_ci`` is checked on windows whose bootstrap distribution is known in closed form;
``run_point`` and ``compare`` on stand-ins for the policy build and the cluster run.
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from helm_plan.cluster import ClusterConfig
from helm_plan.cluster.compare import compare, router_ci
from helm_plan.errors import ConfigError
from helm_plan.exec import SerialExecutor
from helm_plan.oracle import OracleConfig

C = importlib.import_module("helm_plan.cluster.compare")  # the package exports compare()


# ---- paired router CI --------------------------------------------------------------------


def test_router_ci_on_identical_windows_has_a_degenerate_interval():
    # every window holds the same requests, so any resample of windows is the same sample:
    # the interval collapses onto the point estimate
    a_w = np.array([0.001, 0.002, 0.004, 0.010])  # ms: 1, 2, 4, 10
    b_w = np.array([0.002, 0.002, 0.008, 0.020])
    w = np.repeat(np.arange(5) * 3, 4)  # window ids need not be 0..n-1
    ci = router_ci(np.tile(a_w, 5), np.tile(b_w, 5), w, 5.0, n_boot=50, seed=3)
    # P99 of 20 values, rank 0.99 * 19 = 18.81 between the two largest (10, 10 and 20, 20)
    assert ci.p99_cut == pytest.approx(1 - 10 / 20)
    assert ci.p99_lo == pytest.approx(0.5) and ci.p99_hi == pytest.approx(0.5)
    # within 5 ms: 3 of 4 for A, 2 of 4 for B
    assert ci.attainment_gain == pytest.approx(0.25)
    assert ci.att_lo == pytest.approx(0.25) and ci.att_hi == pytest.approx(0.25)
    assert (ci.level, ci.n_boot, ci.n_windows) == (0.95, 50, 5)


def test_router_ci_attainment_interval_is_the_bootstrap_of_window_means():
    # A meets the SLO in window 0 only (4 of 4), never in window 1; B never. Each resample of
    # two windows draws window 0 k ~ Binomial(2, 1/2) times: gain k/2 in {0, 1/2, 1}
    a = np.array([0.001] * 4 + [0.1] * 4)
    b = np.full(8, 0.1)
    w = np.repeat([0, 1], 4)
    ci = router_ci(a, b, w, 10.0, n_boot=400, level=0.9, seed=1)
    assert ci.attainment_gain == pytest.approx(0.5)
    assert ci.att_lo == 0.0 and ci.att_hi == 1.0  # 5% and 95% quantiles of {0, .5, 1} draws
    # B's P99 is 100 ms in every resample; A's is 100 ms unless window 1 was never drawn
    assert ci.p99_cut == pytest.approx(0.0)
    assert ci.p99_lo == pytest.approx(0.0) and ci.p99_hi == pytest.approx(0.99)
    narrow = router_ci(a, b, w, 10.0, n_boot=400, level=0.2, seed=1)
    assert narrow.att_lo == narrow.att_hi == 0.5  # the middle 20% of draws are all k = 1
    # level 0.4: the 30% and 70% quantiles, both inside k = 1's half of the draws (25%..75%)
    mid = router_ci(a, b, w, 10.0, n_boot=2000, level=0.4, seed=2)
    assert mid.att_lo == mid.att_hi == 0.5


def test_router_ci_rejects_bad_input():
    with pytest.raises(ConfigError, match="equal non-empty arrays, got 2, 3, 2"):
        router_ci(np.ones(2), np.ones(3), np.zeros(2), 5.0)
    with pytest.raises(ConfigError, match="got 0, 0, 0"):
        router_ci(np.ones(0), np.ones(0), np.zeros(0), 5.0)
    with pytest.raises(ConfigError, match="got 2, 2, 1"):
        router_ci(np.ones(2), np.ones(2), np.zeros(1), 5.0)
    with pytest.raises(ConfigError, match=r"^level must be in \[0.0, 1.0\], got 1.5") as e:
        router_ci(np.ones(2), np.ones(2), np.zeros(2), 5.0, level=1.5)
    with pytest.raises(ConfigError) as e:
        router_ci(np.ones(1), np.ones(2), np.zeros(1), 5.0)
    assert e.value.hint == "pass both routers' sojourns of the same requests and their windows"


def test_router_ci_of_one_request():
    ci = router_ci(np.array([0.004]), np.array([0.008]), np.array([7]), 5.0, n_boot=20)
    assert ci.p99_cut == pytest.approx(0.5) and ci.p99_lo == pytest.approx(0.5)
    assert ci.attainment_gain == 1.0 and ci.att_hi == 1.0 and ci.n_windows == 1


def test_router_ci_counts_a_sojourn_at_the_slo_as_met():
    # 5 ms is exactly the SLO (5 / 1e3 is the float 0.005): met; 5.01 ms is not
    a = np.array([0.005, 0.005, 0.001, 0.00501])
    b = np.array([0.005, 0.00501, 0.001, 0.00501])
    ci = router_ci(a, b, np.zeros(4), 5.0, n_boot=10)
    assert ci.attainment_gain == pytest.approx(3 / 4 - 2 / 4)


def test_router_ci_is_seeded_with_1000_resamples_by_default():
    rng = np.random.default_rng(9)
    a, b = rng.exponential(0.004, 2000), rng.exponential(0.005, 2000)
    w = rng.integers(0, 40, 2000)
    ci = router_ci(a, b, w, 5.0)
    assert ci.n_boot == 1000 and ci.level == 0.95 and ci.n_windows == 40
    assert ci == router_ci(a, b, w, 5.0, n_boot=1000, seed=0) == router_ci(a, b, w, 5.0)
    other = router_ci(a, b, w, 5.0, seed=1)
    assert (other.p99_lo, other.p99_hi) != (ci.p99_lo, ci.p99_hi)
    assert ci.p99_lo < ci.p99_cut < ci.p99_hi and ci.att_lo < ci.attainment_gain < ci.att_hi


def test_compare_needs_a_router_and_a_policy():
    for routers, policies in (([], ["emb-max"]), (["jsq"], []), ([], [])):
        with pytest.raises(ConfigError) as e:
            compare(None, routers, policies, None)
        assert str(e.value) == "compare needs at least one router and one policy"
        assert e.value.hint == "pass --routers and --policies as comma lists"


# ---- run_point and compare: what a grid point keeps -------------------------------------


@pytest.fixture
def fake_cluster(monkeypatch):
    """Stand-ins for the policy build and the cluster run; records what each was given."""
    seen: dict = {}

    def policies(spec, ctx, cfg, env):
        seen["policies"] = (spec, ctx, cfg, env)
        fs = SimpleNamespace(ratio=0.35) if spec == "best-static" else None
        node_cfg = SimpleNamespace(node=SimpleNamespace(refill="lazy"))
        return SimpleNamespace(spec=f"canon:{spec}", policy="POLICY", cfg=node_cfg,
                               fleet_static=fs)  # fmt: skip

    def simulate(ctx, policy, cfg, *, policy_name, progress):
        seen["simulate"] = (ctx, policy, cfg, policy_name, progress)
        return SimpleNamespace(
            window_idx=np.array([0, 0, 1, 1, 2]), measured_from_window=1,
            sojourn_s=np.array([0.1, 0.2, 0.3, 0.4, 0.5]), overall=lambda: {"p99_ms": 7.0},
            node_table=pl.DataFrame({"node": [0]}), windows=pl.DataFrame({"window": [0]}),
        )  # fmt: skip

    monkeypatch.setattr(C, "node_policies", policies)
    monkeypatch.setattr(C, "simulate_cluster", simulate)
    return seen


def test_run_point_keeps_the_measured_requests_and_the_refill(fake_cluster):
    cfg = ClusterConfig(nodes=2, router="p2c")
    orc, ex = OracleConfig(coarse_step=0.25), SerialExecutor()

    def prog(done, total):
        return None

    pt = C.run_point("CTX", cfg, "emb-max", orc, ex, prog)
    assert (pt.router, pt.policy) == ("p2c", "canon:emb-max")
    # windows 1 and 2 are measured (the first measured window included)
    np.testing.assert_array_equal(pt.sojourn_s, [0.3, 0.4, 0.5])
    np.testing.assert_array_equal(pt.window_idx, [1, 1, 2])
    assert pt.overall == {"p99_ms": 7.0, "refill": "lazy"}
    assert pt.node_table["node"].to_list() == [0] and pt.windows["window"].to_list() == [0]
    assert pt.fleet_static is None
    spec, ctx, c, env = fake_cluster["policies"]
    assert (spec, ctx, c) == ("emb-max", "CTX", cfg)
    assert env.oracle is orc and env.executor is ex and env.progress is prog
    ctx, pol, c, name, progress = fake_cluster["simulate"]
    assert (ctx, pol, name, progress) == ("CTX", "POLICY", "canon:emb-max", prog)
    assert c.node.refill == "lazy"  # the spec's config, not the caller's
    pt = C.run_point("CTX", cfg, "best-static")
    assert pt.overall == {"p99_ms": 7.0, "refill": "lazy", "best_static_r": 0.35}
    assert pt.fleet_static.ratio == 0.35
    env = fake_cluster["policies"][3]
    assert env.oracle == OracleConfig() and env.executor is None and env.progress is None


def test_compare_is_router_major_over_every_pair(monkeypatch):
    seen = []

    def point(ctx, cfg, spec, oracle):
        seen.append((ctx, cfg, spec, oracle))
        if (cfg.router, spec) == ("helm", "b"):
            raise ConfigError("boom")
        return (cfg.router, spec)

    monkeypatch.setattr(C, "run_point", point)
    base = ClusterConfig(nodes=3, router="jsq", seed=4)
    orc = OracleConfig(coarse_step=0.25)
    out = compare("CTX", ["random", "p2c"], ["a", "b", "c"], base, oracle=orc)
    assert out == [("random", "a"), ("random", "b"), ("random", "c"),
                   ("p2c", "a"), ("p2c", "b"), ("p2c", "c")]  # fmt: skip
    for ctx, cfg, _, oracle in seen:
        assert ctx == "CTX" and oracle is orc
        assert cfg.nodes == 3 and cfg.seed == 4 and cfg.node == base.node
    seen.clear()
    ticks = []
    out = compare("CTX", ["jsq"], ["a"], base, progress=lambda d, t: ticks.append((d, t)))
    assert out == [("jsq", "a")] and ticks == [(0, 1), (1, 1)]
    assert seen[0][3] == OracleConfig()
    # a failing point is named by its router and policy
    with pytest.raises(ConfigError, match="^router helm, policy b: boom"):
        compare("CTX", ["helm"], ["a", "b"], base, executor=SerialExecutor())
