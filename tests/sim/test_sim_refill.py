"""Refill modes on a regime switch: the directions the physics says (DESIGN.md, Reallocation)."""

from __future__ import annotations

import numpy as np
from brute import C, coeff_latency
from conftest import small_table
from test_sim_node import GPU, _model

from helm_plan import arrays as A
from helm_plan.sim import NodeConfig, prepare_context, simulate_node


def test_eager_spikes_and_recovers_first_lazy_recovers_last_throttled_neither_spikes():
    # A slow link makes the copy of the hot set take ~3.6 ms. EMB holds 10% of the pool,
    # then 90%: the rows counted hot before the switch are missing after it.
    c = dict(C, h2d_bw_Bps=2e8, host_gather_Bps=1e9)
    lat = coeff_latency(c)
    t = small_table(6000, n_users=400, n_items=3000, max_new=6, n_candidates=16,
                    rate_qps=400.0, seed=3)  # fmt: skip
    ctx = prepare_context(A.from_table(t), GPU, _model(), lat, pool_bytes=2_000_000)
    n_w = ctx.n_windows(1.0)
    up = n_w // 2
    ratios = np.where(np.arange(n_w) < up, 0.1, 0.9)
    s, e = ctx.edges(1.0)[up : up + 2]
    res, spike, hit_after = {}, {}, {}
    for mode in ("lazy", "throttled", "eager"):
        r = simulate_node(ctx, ratios, NodeConfig(window_s=1.0, refill=mode, throttle_share=0.3))
        res[mode] = r
        spike[mode] = r.sojourn_s[s:e].max()
        first = slice(s, s + 100)
        hit_after[mode] = 1 - r.miss_bytes[first].sum() / r.lookup_bytes[first].sum()
    # before the switch the three are the same node
    for mode in ("throttled", "eager"):
        np.testing.assert_array_equal(res[mode].sojourn_s[:s], res["lazy"].sojourn_s[:s])
    # eager: the node blocks for the copy, the worst spike at the boundary...
    blocked = res["eager"].windows["blocked_ms"].to_numpy()
    assert blocked[up] > 3.0 and blocked.sum() == blocked[up]
    assert spike["eager"] > 1.5 * max(spike["lazy"], spike["throttled"])
    # ...and the best hit rate right after; lazy refills on demand: the slowest recovery
    assert hit_after["eager"] >= hit_after["throttled"] > hit_after["lazy"] + 0.05
    assert res["lazy"].prefetch_bytes == 0 < res["throttled"].prefetch_bytes
    # throttled copies the same keys without blocking
    assert res["throttled"].blocked_s == 0 and res["lazy"].blocked_s == 0
    assert res["throttled"].prefetch_bytes == res["eager"].prefetch_bytes
