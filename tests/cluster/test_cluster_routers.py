"""Router properties: bounded-load affinity, KV-home routing, and no look-ahead for every router.

Routers' registry, parameters, ring and seed, hand-worked.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from cluster_fixtures import coeff_latency, context, small_model
from conftest import small_table

from helm_plan import trace
from helm_plan.cluster import ROUTERS, ClusterConfig, simulate_cluster
from helm_plan.cluster.routers import base as R
from helm_plan.cluster.routers import build_ring, get_router, router_seed
from helm_plan.cluster.routers.affinity import Affinity, bounded_affinity
from helm_plan.cluster.routers.helm import Helm
from helm_plan.cluster.routers.jsq import Jsq, least_work
from helm_plan.cluster.routers.kv_overlap import KvOverlap
from helm_plan.cluster.routers.p2c import P2c
from helm_plan.cluster.routers.random import Random
from helm_plan.cluster.routers.round_robin import RoundRobin
from helm_plan.errors import ConfigError
from helm_plan.sim import NodeConfig

EPS = Affinity.eps


def _route_affinity(load_cnt, nodes, user, seed=7):
    """Route ``user`` with the given outstanding counts over the ring of ``nodes``."""
    ring_h, ring_n = build_ring(np.asarray(nodes), Affinity.vnodes, seed)
    load = np.zeros((len(load_cnt), R.N_LOAD), np.int64)
    load[:, R.CNT] = load_cnt
    return int(bounded_affinity(load, ring_h, ring_n, float(len(nodes)), EPS, seed, user))


def _cap(total, n):
    return math.ceil((1 + EPS) * (total + 1) / n)


def test_affinity_keeps_users_home_and_within_the_bound():
    rng = np.random.default_rng(0)
    n_nodes = 8
    nodes = list(range(n_nodes))
    home = {u: _route_affinity(np.zeros(n_nodes), nodes, u) for u in range(2000)}
    # every node owns a fair share of users (64 virtual points each)
    share = np.bincount(list(home.values()), minlength=n_nodes) / len(home)
    assert share.min() > 0.5 / n_nodes and share.max() < 1.6 / n_nodes
    for _ in range(3000):
        load = rng.integers(0, 20, n_nodes)
        u = int(rng.integers(0, 2000))
        n = _route_affinity(load, nodes, u)
        cap = _cap(int(load.sum()), n_nodes)
        assert load[n] + 1 <= cap  # the bound holds after the assignment
        if load[home[u]] + 1 <= cap:
            assert n == home[u]  # within the bound a user stays home


@pytest.mark.parametrize("change", ["remove", "add"])
def test_affinity_after_a_node_is_added_or_removed(change):
    rng = np.random.default_rng(1)
    before = list(range(6))
    after = [n for n in before if n != 2] if change == "remove" else [*before, 6]
    home_b = {u: _route_affinity(np.zeros(7), before, u) for u in range(3000)}
    home_a = {u: _route_affinity(np.zeros(7), after, u) for u in range(3000)}
    moved = [u for u in home_b if home_a[u] != home_b[u]]
    if change == "remove":  # only the removed node's users move
        assert all(home_b[u] == 2 for u in moved)
        assert len(moved) == sum(h == 2 for h in home_b.values())
    else:  # only users the new node takes move (about 1/7 of them)
        assert all(home_a[u] == 6 for u in moved)
        assert 0.08 < len(moved) / 3000 < 0.22
    for _ in range(2000):  # and the load bound holds on the new node set
        load = np.zeros(7, np.int64)
        load[after] = rng.integers(0, 15, len(after))
        n = _route_affinity(load, after, int(rng.integers(0, 3000)))
        assert n in after
        assert load[n] + 1 <= _cap(int(load.sum()), len(after))


def test_affinity_sticks_users_to_a_node_in_a_cluster_run():
    table = small_table(3000, n_users=200, n_items=300, n_candidates=4, rate_qps=200.0, seed=2)
    ctx = context(table, small_model(multi=False), 50_000)
    res = simulate_cluster(ctx, 0.5, ClusterConfig(nodes=6, router="affinity",
                                                   node=NodeConfig(window_s=1.0)))  # fmt: skip
    u = ctx.arrays.user
    stay = []
    for user in np.unique(u):
        nd = res.node[u == user]
        stay.append(np.bincount(nd).max() / len(nd))
    assert np.mean(stay) > 0.97  # light load: the bound hardly ever binds


def _two_visit_table(n_users=60, h0=40, seed=3):
    """Every user visits twice: a first request with ``h0`` history items, then 2 new items;
    requests are >= 40 ms apart, so every node is idle when one arrives."""
    rng = np.random.default_rng(seed)
    ts, users, counts, vals = [], [], [], []
    for u in range(n_users):
        t1 = u * 0.1
        for t, k in ((t1, h0), (t1 + 0.05 + rng.random() * 0.01, 2)):
            ts.append(t)
            users.append(u)
            counts.append(k)
            vals.extend(rng.integers(0, 400, k).tolist())
    order = np.argsort(ts, kind="stable")
    off = np.concatenate([[0], np.cumsum(counts)])
    new = [vals[off[i] : off[i + 1]] for i in order]
    off2 = np.concatenate([[0], np.cumsum([len(x) for x in new])])
    return trace.make_table(np.array(ts)[order], np.array(users)[order], off2,
                            np.concatenate(new), np.full(len(order), 4))  # fmt: skip


@pytest.mark.parametrize("router", ["kv-overlap", "helm"])
def test_kv_resident_user_goes_home_and_skips_the_prefill(router):
    table = _two_visit_table()
    m = small_model(multi=False, layers=1, d_model=8, max_seq_len=256)
    # a compute-bound model: the 40-token prefill costs 0.4 ms, against 1 ms of other work
    lat = coeff_latency(t_launch_s=1e-3, dense_s_per_token=1e-5, hbm_bw_Bps=2e12,
                        h2d_bw_Bps=2e10, host_gather_Bps=1e10, h2d_latency_s=1e-5)  # fmt: skip
    ctx = context(table, m, 400_000, latency=lat)
    cfg = ClusterConfig(nodes=4, router=router, node=NodeConfig(window_s=100.0))
    res = simulate_cluster(ctx, 0.5, cfg)
    u = ctx.arrays.user
    for user in np.unique(u):
        first, second = np.flatnonzero(u == user)
        assert res.node[second] == res.node[first]  # routed to its KV home
        assert res.n_reused[second] == 40 and res.n_computed[second] == 2  # prefill skipped
    # a KV-blind router sends most second visits elsewhere, recomputing the whole prefix
    rr = simulate_cluster(ctx, 0.5, ClusterConfig(nodes=4, router="round-robin", node=cfg.node))
    assert rr.n_computed.sum() > res.n_computed.sum() + 30 * 40


def _prefix_then(table, k, other):
    """The first ``k`` rows of ``table``, then ``other``'s rows moved after them in time."""
    a, b = table.slice(0, k), other
    t0 = a.column("ts_s").to_numpy()[-1]
    ts = b.column("ts_s").to_numpy() + t0 + 1e-3
    b = b.set_column(b.column_names.index("ts_s"), "ts_s", pa.array(ts))
    return pa.concat_tables([a, b.select(a.column_names)])


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_routers_cannot_see_the_future(router):
    table = small_table(900, n_users=40, n_items=200, n_candidates=6, rate_qps=300.0, seed=4,
                        with_candidates=False)  # fmt: skip
    other = small_table(500, n_users=70, n_items=500, n_candidates=9, rate_qps=900.0, seed=5,
                        with_candidates=False)  # fmt: skip
    k = 600
    changed = _prefix_then(table, k, other)
    m = small_model(layers=1, d_model=8, max_seq_len=64)
    cfg = ClusterConfig(nodes=4, router=router, node=NodeConfig(window_s=0.7, refill="lazy",
                                                               batch_max=4, batch_timeout_ms=2.0))  # fmt: skip
    a = simulate_cluster(context(table, m, 30_000), 0.4, cfg)
    b = simulate_cluster(context(changed, m, 30_000), 0.4, cfg)
    np.testing.assert_array_equal(a.node[:k], b.node[:k])
    np.testing.assert_array_equal(a.n_computed[:k], b.n_computed[:k])
    np.testing.assert_array_equal(a.miss_bytes[:k], b.miss_bytes[:k])
    # the later requests really differ (and load-aware routers route them differently)
    assert not np.array_equal(a.n_computed[k : k + 200], b.n_computed[k : k + 200])
    if router not in ("round-robin", "random"):
        assert not np.array_equal(a.node[k : k + 200], b.node[k : k + 200])


@pytest.mark.parametrize("router", sorted(set(ROUTERS) - {"round-robin"}))
def test_a_one_node_fleet_is_served_alike_behind_every_router(router):
    # plan shares a one-node fleet's evaluations between routers (plan.run._combos): no
    # router may change how its one node serves (state, draws, prefetch or batching)
    table = small_table(1500, n_users=60, n_items=300, n_candidates=6, rate_qps=900.0, seed=6)
    ctx = context(table, small_model(layers=1, d_model=8, max_seq_len=64), 30_000)
    node = NodeConfig(window_s=0.4, batch_max=4, batch_timeout_ms=2.0)
    for policy in (0.3, np.linspace(0.0, 1.0, ctx.n_windows(node.window_s))):
        want = simulate_cluster(ctx, policy, ClusterConfig(nodes=1, router="round-robin",
                                                           node=node, seed=2))  # fmt: skip
        got = simulate_cluster(ctx, policy, ClusterConfig(nodes=1, router=router, node=node,
                                                          seed=2))  # fmt: skip
        assert want.sojourn_s.max() > 3 * want.sojourn_s.min()  # requests queue: routers read load
        for f in ("sojourn_s", "n_computed", "miss_bytes", "batch_size"):
            np.testing.assert_array_equal(getattr(got, f), getattr(want, f))


@pytest.mark.parametrize("router", ["jsq", "helm"])
def test_the_rule_carries_the_type_numba_gives_it(router, monkeypatch):
    # the kernel's route argument skips numba's typing of it at every window: the type it
    # carries must be the one numba computes for the plain tuple (a first-class function)
    from numba.core import types

    from helm_plan.cluster import _kernel, sim

    seen = []
    real = sim.compiled_rule
    monkeypatch.setattr(sim, "compiled_rule", lambda r, v: seen.append(real(r, v)) or seen[-1])
    table = small_table(300, n_users=20, n_items=100, n_candidates=4, rate_qps=300.0, seed=1)
    ctx = context(table, small_model(layers=1, d_model=8, max_seq_len=64), 30_000)
    simulate_cluster(ctx, 0.5, ClusterConfig(nodes=2, router=router, node=NodeConfig()))
    (rule,) = seen
    want = _kernel.run_window.typeof_pyval(tuple(rule))
    assert isinstance(want[0], types.FunctionType)
    assert _kernel.run_window.typeof_pyval(rule) == want == rule.numba_type


def test_unknown_router_and_bad_node_count():
    with pytest.raises(ConfigError, match="unknown router 'fastest'"):
        get_router("fastest")
    with pytest.raises(ConfigError, match="nodes must be a positive integer"):
        ClusterConfig(nodes=0)


def test_jsq_breaks_ties_by_fewer_requests_then_from_the_request_index_on():
    n = 4
    load = np.zeros((n, R.N_LOAD), np.int64)
    # every node equal: request i goes to node i mod N (an even spread, not always node 0)
    assert [least_work(load, n, i) for i in range(9)] == [i % n for i in range(9)]
    # nodes 1 and 3 share the lowest backlog estimate; node 3 has fewer requests in flight
    load[:, R.EST] = [9, 5, 7, 5]
    load[:, R.CNT] = [0, 2, 0, 1]
    assert {least_work(load, n, i) for i in range(8)} == {3}
    # equal estimate and count: the first of them at or after i mod N, wrapping round
    load[3, R.CNT] = 2
    assert [least_work(load, n, i) for i in range(6)] == [1, 1, 3, 3, 1, 1]
    # a lower estimate wins whatever the counts
    load[:, R.EST] = [4, 5, 7, 5]
    load[:, R.CNT] = [9, 0, 0, 0]
    assert {least_work(load, n, i) for i in range(8)} == {0}


def test_jsq_spreads_requests_that_always_find_the_fleet_idle():
    # requests seconds apart on a 3-node fleet: every arrival sees three idle nodes (a tie),
    # so JSQ sends request k to node k mod 3
    table = small_table(30, rate_qps=0.5, seed=2)
    ctx = context(table, small_model(), 400_000)
    res = simulate_cluster(ctx, 0.5, ClusterConfig(nodes=3, router="jsq",
                                                   node=NodeConfig(window_s=30.0)))  # fmt: skip
    np.testing.assert_array_equal(res.node, np.arange(30) % 3)


# ---- routers -----------------------------------------------------------------------------


def test_registry_names_and_lookup():
    # every module of the package is a router, listed in its display order
    assert list(ROUTERS) == ["round-robin", "random", "jsq", "p2c", "affinity", "kv-overlap",
                             "helm"]  # fmt: skip
    for name, cls in ((" jsq ", Jsq), ("round-robin", RoundRobin), ("random\n", Random),
                      ("p2c", P2c), ("affinity", Affinity), ("kv-overlap", KvOverlap),
                      ("helm", Helm)):  # fmt: skip
        r = get_router(name)
        assert type(r) is cls and r.name == name.strip()
    with pytest.raises(ConfigError) as e:
        get_router("fastest")
    assert str(e.value) == "unknown router 'fastest'"
    assert e.value.hint == "use one of " + ", ".join(ROUTERS)


def test_router_parameters():
    for cls in (RoundRobin, Random, Jsq, P2c):
        np.testing.assert_array_equal(cls().params(5), [0.0, 0.0])
        h, n = cls().ring(np.arange(5), 3)
        assert h.dtype == np.uint64 and n.dtype == np.int64 and len(h) == len(n) == 1
    np.testing.assert_array_equal(Affinity().params(6), [0.25, 6.0])
    np.testing.assert_array_equal(KvOverlap().params(6), [1.0, 0.0])
    np.testing.assert_array_equal(Helm().params(6), [8.0, 8.0])
    # every shipped router has its own rule (the kernel calls the one it is handed)
    assert len({cls.route for cls in ROUTERS.values()}) == len(ROUTERS)


def _brute_ring(nodes, vnodes, seed):
    """Every (position, node) of the ring, sorted by position (ties keep node order)."""
    return sorted((int(R.ring_hash(seed, n, v)), n) for n in nodes for v in range(vnodes))


def test_ring_is_every_virtual_point_sorted():
    nodes, seed = [4, 1, 7], 11
    h, own = build_ring(np.array(nodes), 5, seed)
    assert list(zip(h.tolist(), own.tolist(), strict=True)) == _brute_ring(nodes, 5, seed)
    h, own = Affinity().ring(np.array(nodes, np.int32), seed)  # 64 points per node
    want = _brute_ring(nodes, Affinity.vnodes, seed)
    assert list(zip(h.tolist(), own.tolist(), strict=True)) == want
    with pytest.raises(ConfigError) as e:
        build_ring(np.array([], np.int64), 4, 0)
    assert str(e.value) == "a ring needs at least one node"
    assert e.value.hint == "pass --nodes >= 1"


def test_router_seed_is_seeded_and_apart_from_the_run_seed():
    seeds = [router_seed(s) for s in range(50)]
    assert all(isinstance(s, int) and 0 <= s < 2**32 for s in seeds)
    assert len(set(seeds)) == 50 and seeds == [router_seed(s) for s in range(50)]
    assert all(router_seed(s) != s for s in range(50))
