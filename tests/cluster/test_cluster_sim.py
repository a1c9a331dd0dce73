"""The cluster simulator's window loop and its policy argument, checked by hand (issue 16, item 4).

``node_policies`` is checked on plain values (a policy, a list of them, one ratio, one per
window); the window loop on small runs whose observable effects are written down from the
module's rules: each node's policy sees the EMB share it runs at (NaN before window 0),
progress is reported once per window, and the reported policy name is the caller's, else the
first node's spec ("schedule" for fixed ratios).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cluster_fixtures import C, context, small_model
from conftest import small_table

from helm_plan.cluster import ClusterConfig, simulate_cluster
from helm_plan.cluster.sim import node_policies
from helm_plan.cluster.state import InternalError
from helm_plan.errors import ConfigError
from helm_plan.latency.model import LatencyModel
from helm_plan.sim import (
    NodeConfig,
    Observation,
    Policy,
    SchedulePolicy,
    StaticPolicy,
    simulate_node,
)
from helm_plan.sim.metrics import BURST_TRAILING
from helm_plan.sim.step import NodeRunner


class Steps(Policy):
    """Cycles through fixed ratios and records the share it was told it runs at."""

    def __init__(self, ratios=(0.2, 0.7, 0.4)) -> None:
        self.ratios = list(ratios)
        self.told: list[float] = []

    def reset(self) -> None:
        self.told = []

    def decide(self, obs: Observation) -> float:
        self.told.append(obs.ratio)
        return self.ratios[obs.window % len(self.ratios)]

    @property
    def spec(self) -> str:
        return "steps"


# ---- node_policies: the policy argument -------------------------------------------------------


def test_one_policy_is_deep_copied_per_node():
    p = Steps()
    p.told.append(9.0)
    out = node_policies(p, 3, 5)
    assert len(out) == 3
    assert all(isinstance(q, Steps) and q is not p for q in out)
    assert len({id(q) for q in out}) == 3
    # deep: each copy owns its record, so one node's history never leaks into another's
    assert len({id(q.told) for q in out} | {id(p.told)}) == 4
    assert all(q.told == [9.0] for q in out)


def test_a_list_of_policies_is_used_as_given():
    ps = [Steps(), Steps()]
    out = node_policies(ps, 2, 7)
    assert out == ps and out[0] is ps[0] and out[1] is ps[1]
    assert node_policies(tuple(ps), 2, 7) == ps


@pytest.mark.parametrize("n", [1, 3])
def test_a_list_of_the_wrong_length_is_refused(n):
    with pytest.raises(ConfigError) as e:
        node_policies([Steps() for _ in range(n)], 2, 4)
    assert str(e.value) == f"{n} policies for 2 nodes"
    assert e.value.hint == "pass one policy per node, or one for all"


def test_one_ratio_is_every_window_of_every_node():
    out = node_policies(0.3, 2, 4)
    assert len(out) == 2 and out[0] is not out[1]
    for q in out:
        assert isinstance(q, SchedulePolicy) and q.spec == "schedule"
        assert [q.decide(Observation(w, math.nan)) for w in range(4)] == [0.3] * 4
        assert q.ratios.dtype == np.float64 and q.ratios.shape == (4,)
    # an int and a one-element array mean the same
    assert node_policies(1, 1, 3)[0].ratios.tolist() == [1.0, 1.0, 1.0]
    assert node_policies(np.array([[0.5]]), 1, 2)[0].ratios.tolist() == [0.5, 0.5]


def test_one_ratio_per_window():
    out = node_policies([0.1, 0.9, 0.4], 2, 3)
    for q in out:
        assert [q.decide(Observation(w, math.nan)) for w in range(3)] == [0.1, 0.9, 0.4]
    # a column of ratios is flattened
    col = node_policies(np.array([[0.1], [0.9], [0.4]]), 1, 3)[0]
    assert col.ratios.tolist() == [0.1, 0.9, 0.4]


@pytest.mark.parametrize(("ratios", "n"), [([0.1, 0.2], 2), ([0.1, 0.2, 0.3, 0.4], 4), ([], 0)])
def test_wrong_ratio_count_is_refused(ratios, n):
    with pytest.raises(ConfigError) as e:
        node_policies(ratios, 2, 3)
    assert str(e.value) == f"{n} ratios for 3 windows"
    assert e.value.hint == "pass one ratio per window, or one for all"


# ---- simulate_cluster: the window loop ---------------------------------------------------------


def _ctx():
    table = small_table(300, n_users=20, n_items=80, n_candidates=4, rate_qps=300.0, seed=1)
    return context(table, small_model(layers=1, d_model=8, max_seq_len=64), 20_000)


CFG = ClusterConfig(nodes=2, router="round-robin", node=NodeConfig(window_s=0.25))


def test_each_policy_is_told_the_share_its_node_runs_at():
    ctx = _ctx()
    n_w = ctx.n_windows(0.25)
    assert n_w >= 4
    pols = [Steps((0.2, 0.7, 0.4)), Steps((0.9, 0.1))]
    res = simulate_cluster(ctx, pols, CFG)
    # before window 0 a node runs at no share (NaN); afterwards at what it decided last
    a = [0.2, 0.7, 0.4] * n_w
    b = [0.9, 0.1] * n_w
    for p, rs in ((pols[0], a), (pols[1], b)):
        assert math.isnan(p.told[0])
        assert p.told[1:] == rs[: n_w - 1]
    np.testing.assert_array_equal(res.ratios[:, 0], a[:n_w])
    np.testing.assert_array_equal(res.ratios[:, 1], b[:n_w])


def test_progress_once_per_window_and_the_policy_name():
    ctx = _ctx()
    n_w = ctx.n_windows(0.25)
    seen: list[tuple[int, int]] = []
    res = simulate_cluster(ctx, 0.5, CFG, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(w, n_w) for w in range(1, n_w + 1)]
    assert res.policy == "schedule"  # fixed ratios
    assert res.router == "round-robin"
    assert simulate_cluster(ctx, StaticPolicy(0.5), CFG).policy == "static:0.5"
    named = simulate_cluster(ctx, StaticPolicy(0.5), CFG, policy_name="mine")
    assert named.policy == "mine"
    np.testing.assert_array_equal(named.sojourn_s, res.sojourn_s)  # the same run


# ---- eager refill: the copy holds the node's streams from the boundary -----------------------


def _eager_ctx():
    # a slow host-to-device link (200 kB/s): a resize's eager copy blocks for tens of ms, longer
    # than the gaps between arrivals, so requests arriving during it must wait for its end
    table = small_table(260, n_users=25, n_items=90, max_new=5, n_candidates=4, rate_qps=120.0,
                        seed=3)  # fmt: skip
    return context(
        table, small_model(chunk=2), 9000, latency=LatencyModel(**{**C, "h2d_bw_Bps": 2e5})
    )


def _starts(ctx, res):
    ts = ctx.arrays.ts_s
    return ts + res.sojourn_s - res.service_s


@pytest.mark.parametrize("slots", [1, 2])
def test_an_eager_block_holds_one_node_as_simulate_node_does(slots):
    ctx = _eager_ctx()
    ws = 0.4
    ratios = np.resize([0.05, 0.95, 0.3, 0.6, 0.1], ctx.n_windows(ws))
    cfg = NodeConfig(window_s=ws, refill="eager", batch_max=2, batch_timeout_ms=1.0, slots=slots)
    res = simulate_cluster(ctx, ratios, ClusterConfig(nodes=1, router="jsq", node=cfg))
    ref = simulate_node(ctx, ratios, cfg)
    blocked = np.array(res.per_node[0].windows["blocked_ms"].to_list()) / 1e3
    assert 0.01 < blocked.max() < 1.0  # blocks of tens of ms, under a second
    np.testing.assert_array_equal(res.sojourn_s, ref.sojourn_s)
    np.testing.assert_array_equal(res.service_s, ref.service_s)
    assert res.per_node[0].windows.equals(ref.windows)


def test_an_eager_block_delays_every_request_of_its_window_on_its_node():
    ctx = _eager_ctx()
    ws, n = 0.4, 2
    n_w = ctx.n_windows(ws)
    ratios = np.array([np.resize(np.roll([0.05, 0.95, 0.3, 0.6], k), n_w) for k in range(n)]).T
    cfg = NodeConfig(window_s=ws, refill="eager", batch_max=2, batch_timeout_ms=1.0, slots=2)
    res = simulate_cluster(ctx, [SchedulePolicy(ratios[:, k]) for k in range(n)],
                           ClusterConfig(nodes=n, router="round-robin", node=cfg))  # fmt: skip
    ts, start = ctx.arrays.ts_s, _starts(ctx, res)
    waited = 0
    for k in range(n):
        blocked = np.array(res.per_node[k].windows["blocked_ms"].to_list()) / 1e3
        assert (blocked > 0).sum() >= 2
        for w in np.flatnonzero(blocked > 0):
            mine = (res.node == k) & (res.window_idx == w)
            tb = w * ws
            # no request of the window starts before the copy ends at tb + block
            assert np.all(start[mine] >= tb + blocked[w] - 1e-12)
            waited += int(np.sum(mine & (ts < tb + blocked[w])))
    assert waited > 0  # some arrivals fell inside a block (so the rule was exercised)


def test_a_reallocated_node_is_caught_at_the_next_boundary(monkeypatch):
    # a resize that swaps a node's arrays for new ones breaks the kernel's view of its caches:
    # the loop checks every node at every boundary and names the node
    ctx = _ctx()
    orig = NodeRunner.begin_window
    calls = []

    def begin(self, r):
        out = orig(self, r)
        calls.append(self)
        if len(calls) == 4:  # node 1 (second runner) at window 1
            self.state.emb_qi = self.state.emb_qi.copy()
        return out

    monkeypatch.setattr(NodeRunner, "begin_window", begin)
    with pytest.raises(InternalError, match="node 1's caches left the stacked arrays"):
        simulate_cluster(ctx, 0.5, CFG)
    assert len(calls) == 4 and calls[3] is calls[1]


def test_continuous_batching_reaches_the_kernel():
    # with a batch timeout, continuous batching (a request joins the running batch) differs
    # from static (a batch waits for its timeout): one node must serve as simulate_node does
    table = small_table(300, n_users=20, n_items=80, n_candidates=4, rate_qps=2000.0, seed=1)
    ctx = context(table, small_model(layers=1, d_model=8, max_seq_len=64), 20_000)
    soj = {}
    for b in ("static", "continuous"):
        cfg = NodeConfig(window_s=0.05, batch_max=4, batch_timeout_ms=2.0, slots=2, batching=b)
        res = simulate_cluster(ctx, 0.5, ClusterConfig(nodes=1, router="jsq", node=cfg))
        ref = simulate_node(ctx, 0.5, cfg)
        np.testing.assert_array_equal(res.sojourn_s, ref.sojourn_s)
        np.testing.assert_array_equal(res.batch_size, ref.batch_size)
        soj[b] = res.sojourn_s
    assert not np.array_equal(soj["static"], soj["continuous"])


class Features(Policy):
    """Records the features it is shown at every boundary."""

    def __init__(self) -> None:
        self.seen: list[dict[str, float]] = []

    def reset(self) -> None:
        self.seen = []

    def decide(self, obs: Observation) -> float:
        self.seen.append(dict(obs.features))
        return 0.5

    @property
    def spec(self) -> str:
        return "features"


def test_each_node_sees_the_features_of_its_own_requests_in_arrival_order():
    # about 50 requests per node and window (numpy's default sort reorders runs this long)
    table = small_table(600, n_users=30, n_items=80, n_candidates=4, rate_qps=2000.0, seed=2)
    ctx = context(table, small_model(layers=1, d_model=8, max_seq_len=64), 20_000)
    ws, n = 0.05, 2
    n_w = ctx.n_windows(ws)
    pols = [Features() for _ in range(n)]
    res = simulate_cluster(
        ctx, pols, ClusterConfig(nodes=n, router="random", node=NodeConfig(window_s=ws))
    )
    ts = ctx.arrays.ts_s
    for k, p in enumerate(pols):
        assert p.seen[0] == {} and len(p.seen) == n_w
        rates: list[float] = []
        for w in range(n_w - 1):
            mine = np.flatnonzero((res.node == k) & (res.window_idx == w))  # arrival order
            assert len(mine) >= 30
            rates.append(len(mine) / ws)
            gaps = np.diff(ts[mine])
            prev = rates[max(0, len(rates) - 1 - BURST_TRAILING) : -1]
            want = {
                "arrival_rate_rps": rates[-1],
                "rate_trend": rates[-1] / rates[-2] - 1 if w else 0.0,
                "burst_score": rates[-1] / np.mean(prev) if w else 1.0,
                "interarrival_cv": gaps.std() / gaps.mean(),
                "cold_user_share": ctx.first_visit[mine].mean(),
                "hist_len_mean": ctx.ctx_len[mine].mean(),
                "hist_len_p95": np.percentile(ctx.ctx_len[mine], 95),
            }
            got = p.seen[w + 1]
            assert got.keys() == want.keys()
            for key, v in want.items():
                assert got[key] == pytest.approx(v, rel=1e-12), (k, w, key)
