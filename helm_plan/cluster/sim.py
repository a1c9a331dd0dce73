"""The cluster simulator: N nodes, each a :class:`~helm_plan.sim.step.NodeRunner` with its own
policy, served by one compiled request kernel per window.

The window loop runs here, in Python. At each boundary every node's policy
decides its ``r`` from that node's own previous window (an
:class:`~helm_plan.sim.policy.Observation` built from its own
``WindowResult`` and its own arrivals' features), and ``begin_window(r)``
does the node's boundary work (hotness decay, resize, refill plan). Then
:func:`helm_plan.cluster._kernel.run_window` routes and serves the window's
requests on all nodes in arrival order, and each node's ``finish_window``
closes its window from the requests it served. Eager-refill blocks hold a
node's streams from the boundary, before its first request, as on one node.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np

from helm_plan.cache import _kernels as K
from helm_plan.cache.core import ReplayResult, token_ring
from helm_plan.cluster import _kernel
from helm_plan.cluster.config import ClusterConfig
from helm_plan.cluster.result import ClusterResult, build_result
from helm_plan.cluster.routers import (
    DYNAMO_BLOCK_TOKENS,
    RouteView,
    compiled_rule,
    get_router,
    router_seed,
)
from helm_plan.cluster.state import ClusterState
from helm_plan.errors import ConfigError
from helm_plan.io import release_spilled
from helm_plan.sim import metrics
from helm_plan.sim.batching import BatchResult
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import collect
from helm_plan.sim.policy import Observation, Policy, SchedulePolicy, runner_config
from helm_plan.sim.step import NodeRunner, WindowResult

PolicyArg = Policy | Sequence[Policy] | float | np.ndarray


def node_policies(policy: PolicyArg, n_nodes: int, n_windows: int) -> list[Policy]:
    """One independent policy per node: a list of N, copies of one policy, or fixed ratios."""
    if isinstance(policy, Policy):
        return [copy.deepcopy(policy) for _ in range(n_nodes)]
    if isinstance(policy, Sequence) and not isinstance(policy, str | bytes) and len(policy) and \
            isinstance(policy[0], Policy):  # fmt: skip
        if len(policy) != n_nodes:
            raise ConfigError(f"{len(policy)} policies for {n_nodes} nodes",
                              hint="pass one policy per node, or one for all")  # fmt: skip
        return list(policy)  # type: ignore[arg-type]
    r = np.asarray(policy, np.float64).reshape(-1)
    if len(r) == 1:
        r = np.full(n_windows, r[0])
    if len(r) != n_windows:
        raise ConfigError(f"{len(r)} ratios for {n_windows} windows",
                          hint="pass one ratio per window, or one for all")  # fmt: skip
    return [SchedulePolicy(r, "schedule") for _ in range(n_nodes)]


def simulate_cluster(
    ctx: NodeContext,
    policy: PolicyArg,
    cfg: ClusterConfig,
    *,
    progress: Callable[[int, int], None] | None = None,
    policy_name: str | None = None,
) -> ClusterResult:
    """Serve the whole trace on ``cfg.nodes`` nodes routed by ``cfg.router``.

    ``policy`` is one :class:`Policy` (copied to every node), one per node, or
    fixed ratios (one, or one per window) for every node.
    """
    ncfg = cfg.node.for_context(ctx)
    n_nodes = cfg.nodes
    n_w = ctx.n_windows(ncfg.window_s)
    policies = node_policies(policy, n_nodes, n_w)
    runners = [NodeRunner(ctx, runner_config(ncfg, policies)) for _ in range(n_nodes)]
    edges = runners[0].edges
    for p in policies:
        p.reset()
    router = get_router(cfg.router)
    rseed = router_seed(cfg.seed)
    rp = router.params(n_nodes)
    ring_h, ring_n = router.ring(np.arange(n_nodes), rseed)
    a, wl, model = ctx.arrays, ctx.workload, ctx.model
    keys = wl.keys
    st = ClusterState(n_nodes, ncfg.slots, keys.key_bytes, a.n_users, a.n_requests,
                      ctx.pool_bytes, runners[0].counts is not None)  # fmt: skip
    results: list[list[WindowResult]] = [[] for _ in range(n_nodes)]
    last: list[WindowResult | None] = [None] * n_nodes
    feats: list[dict[str, float]] = [{} for _ in range(n_nodes)]
    rates: list[list[float]] = [[] for _ in range(n_nodes)]
    served: list[np.ndarray | None] = [None] * n_nodes
    ts = a.ts_s
    tok_ring = token_ring(a)  # the windows run in order: the ring carries across them
    # what the router reads: the simulator's own arrays, built once (none is ever replaced)
    view = RouteView(
        st.load, st.k_len, st.k_start, st.e_last, st.rstate, rp, ring_h, ring_n, rseed,
        DYNAMO_BLOCK_TOKENS, st.res_h, st.res_c, ncfg.slots, ctx.latency.coeffs,
        model.token_lookup_bytes, model.candidate_lookup_bytes, a.user, a.user_ids, a.hist_end,
        a.user_hist_offsets, a.hist_values, a.tok_off, *tok_ring, a.cand_offsets, a.cand_values,
        a.explicit_candidates, a.candidate_seed, a.candidate_window_tokens, keys.item_keys,
        keys.hist_tables, keys.cand_tables, keys.key_bytes, wl.direct_bytes,
    )  # fmt: skip
    route = compiled_rule(router, view)
    for w in range(n_w):
        s, e = int(edges[w]), int(edges[w + 1])
        tb = w * ncfg.window_s
        blocks = np.zeros(n_nodes)
        for n, run in enumerate(runners):
            # each node's own requests: its ghost caches see only what its caches saw
            r = policies[n].decide(Observation(w, run.ratio, last[n], feats[n], served[n]))
            blocks[n] = run.begin_window(r)
            assert run.state is not None
            if w == 0:
                v = st.load_from(n, run.state, run.counts)
                run.adopt(v, st.counts[n] if run.counts is not None else None)
            st.check_views(n, run.state)
            if blocks[n] > 0:  # the eager copy holds every stream from the boundary
                st.free[n] = max(tb, float(st.free[n].max())) + blocks[n]
        pend = [run.pending_prefetch for run in runners]
        pf_hi = np.cumsum([len(k) for k, _ in pend]).astype(np.int64)
        pf_pos = np.concatenate([[0], pf_hi[:-1]]).astype(np.int64)
        pf_keys = np.concatenate([k for k, _ in pend]).astype(np.int32, copy=False)
        pf_t = np.concatenate([t for _, t in pend]).astype(np.float64, copy=False)
        share = np.stack([run.h2d_share(ts[s:e]) for run in runners])
        _kernel.run_window(
            s, e, ts, a.user, a.hist_end, a.user_hist_offsets, a.hist_values, a.tok_off,
            *tok_ring, a.cand_offsets, a.cand_values, a.n_cand, a.explicit_candidates,
            a.candidate_seed, a.candidate_window_tokens, wl.max_seq_len, wl.kv_slide_chunk,
            keys.item_keys, keys.hist_tables, keys.cand_tables, keys.key_bytes, keys.table_bytes,
            wl.direct_bytes,
            st.e_last, st.e_qi, st.e_meta, st.k_prev, st.k_next, st.k_len, st.k_start,
            st.k_meta, st.counts, pf_keys, pf_t, pf_pos, pf_hi, share,
            ctx.latency.coeffs, ncfg.batch_max, ncfg.batch_timeout_ms / 1e3,
            ncfg.batching == "continuous", st.free, route, view, DYNAMO_BLOCK_TOKENS,
            st.load, st.q_head, st.q_len, st.q_kth, st.tail, st.sl_head, st.sl_tail,
            st.next_close, st.next_done, st.n_batch, st.node, st.out, st.start, st.finish,
            st.service, st.bsize, st.bno, st.shr, st.est, st.nxt, st.bnx,
        )  # fmt: skip
        release_spilled()  # the window's pages of spilled tokens
        nd = st.node[s:e]
        order = np.argsort(nd, kind="stable") + s
        cuts = np.searchsorted(nd[order - s], np.arange(n_nodes + 1))
        for n, run in enumerate(runners):
            idx = order[cuts[n] : cuts[n + 1]]
            served[n] = idx
            last[n] = _finish(run, st, n, idx, blocks[n], ts)
            results[n].append(last[n])
            rates[n].append(len(idx) / ncfg.window_s)
            feats[n] = metrics.window_feature_row(
                ts[idx], 0, len(idx), np.array(rates[n]), ctx.first_visit[idx], ctx.ctx_len[idx]
            )
        if progress:
            progress(w + 1, n_w)
    per_node = [collect(r, ncfg) for r in results]
    o = st.out
    out = {
        "sojourn_s": st.finish - ts, "service_s": st.service, "batch_size": st.bsize,
        "finish_s": st.finish, "n_computed": o[K.OUT_COMPUTED], "n_reused": o[K.OUT_REUSED],
        "ctx_len": o[K.OUT_CTX], "lookup_bytes": o[K.OUT_LOOKUP_B], "miss_bytes": o[K.OUT_MISS_B],
    }  # fmt: skip
    name = policy_name or (policies[0].spec if policies else "")
    return build_result(cfg.router, name, ncfg, edges, st.node, out, per_node)


def _finish(run: NodeRunner, st: ClusterState, n: int, idx: np.ndarray, block_s: float,
            ts: np.ndarray) -> WindowResult:  # fmt: skip
    """Close a node's window from the requests it served (``idx``, in arrival order)."""
    o = st.out[:, idx]
    res = ReplayResult(
        n_computed=o[K.OUT_COMPUTED], n_reused=o[K.OUT_REUSED], ctx_len=o[K.OUT_CTX],
        n_cand=o[K.OUT_CAND], lookup_bytes=o[K.OUT_LOOKUP_B], miss_bytes=o[K.OUT_MISS_B],
        n_miss=o[K.OUT_MISS], prefetched=0,
    )  # fmt: skip
    bno = st.bno[idx]
    q = BatchResult(st.start[idx], st.finish[idx], st.service[idx], st.bsize[idx],
                    bno - bno[0] if len(idx) else bno, block_s, st.free[n].copy())  # fmt: skip
    wr = run.finish_window(ts[idx], res, q, block_s)
    run.free_at_s = q.free_at_s
    return wr
