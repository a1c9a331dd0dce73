"""One node of a fleet as the router fed it (``plan/routed.py``): replayed alone with the
fleet's static split, it reproduces the fleet's node request for request."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import small_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from cluster_fixtures import context, small_model  # noqa: E402

from helm_plan.cluster import ClusterConfig, simulate_cluster  # noqa: E402
from helm_plan.errors import ConfigError  # noqa: E402
from helm_plan.plan.routed import node_rows, routed_arrays, routed_node  # noqa: E402
from helm_plan.sim import NodeConfig, simulate_node  # noqa: E402


def _fleet(explicit: bool, router: str, node: NodeConfig, nodes: int = 3, r: float = 0.4):
    t = small_table(900, n_users=60, n_items=400, max_new=5, n_candidates=6, seed=8,
                    with_candidates=explicit, rate_qps=400.0)  # fmt: skip
    model = small_model(chunk=4)
    ctx = context(t, model, pool_bytes=12_000, seed=3)
    res = simulate_cluster(ctx, float(r), ClusterConfig(nodes=nodes, router=router, node=node,
                                                        seed=5))  # fmt: skip
    return ctx, res


NODES = [
    NodeConfig(window_s=0.5, slo_ms=5.0),
    NodeConfig(window_s=0.5, slo_ms=5.0, batch_max=4, batch_timeout_ms=2.0, slots=2),
    NodeConfig(window_s=0.5, slo_ms=5.0, batch_max=3, batching="continuous"),
]


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("router", ["jsq", "round-robin", "affinity"])
@pytest.mark.parametrize("ncfg", range(len(NODES)))
def test_a_routed_node_replayed_alone_is_the_fleets_node(explicit, router, ncfg):
    node = NODES[ncfg]
    ctx, fleet = _fleet(explicit, router, node)
    for k in range(fleet.nodes):
        rows = np.flatnonzero(fleet.node == k)
        sub = routed_node(ctx, node_rows(fleet.node, k, ctx.arrays.n_requests))
        alone = simulate_node(sub, 0.4, node)
        np.testing.assert_array_equal(alone.sojourn_s, fleet.sojourn_s[rows])
        np.testing.assert_array_equal(alone.batch_size, fleet.batch_size[rows])
        np.testing.assert_array_equal(alone.n_computed, fleet.n_computed[rows])
        np.testing.assert_array_equal(alone.miss_bytes, fleet.miss_bytes[rows])
        mine = fleet.node_table.filter(fleet.node_table["node"] == k)
        assert alone.p99_ms == mine["p99_ms"][0]
        assert alone.slo_attainment == mine["slo_attainment"][0]


def test_the_routed_trace_keeps_whole_histories_and_the_fleets_draws():
    ctx, fleet = _fleet(False, "jsq", NODES[0])
    a = ctx.arrays
    rows = np.flatnonzero(fleet.node == 1)
    sub = routed_arrays(a, rows)
    np.testing.assert_array_equal(sub.hist_end, a.hist_end[rows])  # the user's whole history
    assert sub.hist_values is a.hist_values  # shared, not copied
    # n_new: tokens since the user's previous request on this node, by brute force
    last: dict[int, int] = {}
    for j, i in enumerate(rows):
        u = int(a.user[i])
        assert sub.n_new[j] == a.hist_end[i] - last.get(u, 0)
        last[u] = int(a.hist_end[i])
    assert sub.explicit_candidates and sub.holds_tokens
    # the draws: request i's k-th candidate from the last W tokens of the whole trace's stream
    stream = np.concatenate(
        [a.hist_values[a.user_hist_offsets[u] + e - n: a.user_hist_offsets[u] + e]
         for u, e, n in zip(a.user, a.hist_end, a.n_new, strict=True)]
    )  # fmt: skip
    from helm_plan.cache._kernels import draw_position

    for j, i in enumerate(rows[:50]):
        got = sub.cand_values[sub.cand_offsets[j] : sub.cand_offsets[j + 1]]
        pos = [draw_position(a.candidate_seed, i, k, a.tok_off, a.candidate_window_tokens)
               for k in range(a.n_cand[i])]  # fmt: skip
        want = [stream[p] if p >= 0 else -1 for p in pos]
        assert got.tolist() == want


def test_bad_rows_are_refused():
    ctx, fleet = _fleet(False, "jsq", NODES[0])
    with pytest.raises(ConfigError, match="no requests"):
        routed_arrays(ctx.arrays, np.zeros(0, np.int64))
    with pytest.raises(ConfigError, match="distinct request indices"):
        routed_arrays(ctx.arrays, np.array([3, 2]))
    with pytest.raises(ConfigError, match="routed requests for a trace"):
        node_rows(fleet.node[:-1], 0, ctx.arrays.n_requests)
