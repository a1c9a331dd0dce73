"""The cluster kernel against simulate_node (one node) and the brute-force cluster (every router)."""

from __future__ import annotations

import numpy as np
import pytest
from brute import BruteNodeConfig
from brute_cluster import simulate_cluster as brute_cluster
from cluster_fixtures import C, context, small_model
from conftest import small_table

from helm_plan.cluster import ROUTERS, ClusterConfig, simulate_cluster
from helm_plan.cluster.routers import router_seed
from helm_plan.sim import NodeConfig, SchedulePolicy, simulate_node

ALL = sorted(ROUTERS)
CASES = [
    # (refill, batch_max, timeout_ms, batching, slots)
    ("lazy", 1, 0.0, "static", 1),
    ("eager", 1, 0.0, "static", 1),
    ("throttled", 4, 3.0, "static", 1),
    ("eager", 8, 0.0, "continuous", 2),
    ("lazy", 3, 50.0, "static", 3),
]


def _cfg(refill, bmax, timeout_ms, batching, slots, ws):
    return NodeConfig(window_s=ws, refill=refill, batch_max=bmax, batch_timeout_ms=timeout_ms,
                      batching=batching, slots=slots, throttle_share=0.4)  # fmt: skip


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("router", ALL)
def test_one_node_equals_simulate_node(case, router):
    table = small_table(260, n_users=25, n_items=90, max_new=5, n_candidates=4, rate_qps=120.0,
                        seed=3)  # fmt: skip
    ctx = context(table, small_model(chunk=2), 9000)
    ws = 0.4
    ratios = np.resize([0.05, 0.95, 0.3, 0.6, 0.1], ctx.n_windows(ws))
    cfg = _cfg(*case, ws)
    ref = simulate_node(ctx, ratios, cfg)
    res = simulate_cluster(ctx, ratios, ClusterConfig(nodes=1, router=router, node=cfg))
    np.testing.assert_array_equal(res.sojourn_s, ref.sojourn_s)
    np.testing.assert_array_equal(res.service_s, ref.service_s)
    np.testing.assert_array_equal(res.n_computed, ref.n_computed)
    np.testing.assert_array_equal(res.miss_bytes, ref.miss_bytes)
    np.testing.assert_array_equal(res.batch_size, ref.batch_size)
    assert res.per_node[0].windows.equals(ref.windows)
    assert res.p99_ms == ref.p99_ms and res.emb_hit_rate == ref.emb_hit_rate


@pytest.mark.parametrize("case", CASES[::2] + CASES[3:4])
@pytest.mark.parametrize("router", ALL)
def test_cluster_equals_the_brute_force_cluster(case, router):
    seed = ALL.index(router)
    table = small_table(240, n_users=20, n_items=80, max_new=4, n_candidates=5, rate_qps=400.0,
                        seed=seed)  # fmt: skip
    # a small KV row (32 B/token) so prefixes fit and get reused
    m = small_model(chunk=4 + seed % 5, layers=1, d_model=8, max_seq_len=64)
    ctx = context(table, m, 12_000)
    ws, n_nodes = 0.15, 3
    n_w = ctx.n_windows(ws)
    # every node moves its split differently
    ratios = np.array([np.resize(np.roll([0.05, 0.9, 0.3, 0.6], n), n_w) for n in range(n_nodes)]).T
    cfg = _cfg(*case, ws)
    res = simulate_cluster(ctx, [SchedulePolicy(ratios[:, n]) for n in range(n_nodes)],
                           ClusterConfig(nodes=n_nodes, router=router, node=cfg, seed=seed))  # fmt: skip
    bcfg = BruteNodeConfig(ws, cfg.slots, cfg.batch_max, cfg.batch_timeout_ms / 1e3, cfg.batching,
                           cfg.refill, 0.4)  # fmt: skip
    ref = brute_cluster(table, m, ctx.pool_bytes, C, bcfg, n_nodes, router, ratios.tolist(),
                        router_seed(seed))  # fmt: skip
    np.testing.assert_array_equal(res.node, ref.node)
    out = np.array(ref.outcomes, np.int64)
    np.testing.assert_array_equal(res.n_computed, out[:, 0])
    np.testing.assert_array_equal(res.n_reused, out[:, 1])
    np.testing.assert_array_equal(res.miss_bytes, out[:, 5])
    np.testing.assert_allclose(res.service_s, ref.service, rtol=1e-9)
    np.testing.assert_allclose(res.sojourn_s, ref.sojourn, rtol=1e-9, atol=1e-12)
    for n in range(n_nodes):
        assert res.per_node[n].windows["h2d_bytes"].to_list() == ref.h2d_bytes[n]
    # the case exercises routing and both caches
    assert len(np.unique(res.node)) == n_nodes
    assert res.n_reused.sum() > 0 and res.miss_bytes.sum() < res.lookup_bytes.sum()
