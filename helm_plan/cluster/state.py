"""Every node's caches and queue bookkeeping in stacked arrays the request kernel indexes.

Layout (one column or row per node, so one kernel serves any node):

- EMB residency ``e_last`` is nodes × keys, one contiguous row per node
  (measured: 10-20% less CPU than keys × nodes on a 32-node run, although
  the router's cross-node check of a key then reads N lines);
- the EMB access logs ``e_qi`` are nodes × log slots, sized up front
  for the largest capacity a node can get (the whole pool), so
  ``CacheState.resize`` never reallocates them and the views stay valid;
- the KV lists and the KV directory ``k_prev``/``k_next``/``k_len``/``k_start``
  are users × nodes: the KV-aware routers read a user's row on every node;
- refill hotness ``counts`` is nodes × keys (a node halves its own row).

Each node's :class:`~helm_plan.cache.core.CacheState` is a set of views into
these arrays, adopted by its :class:`~helm_plan.sim.step.NodeRunner`
(``adopt``), so the boundary logic (resize, refill planning) works on the
memory the kernel serves from. The per-request arrays (outcomes, batch
times, FIFO links) span the whole trace: a node's FIFO and its unfinished
batches cross window boundaries.
"""

from __future__ import annotations

import numpy as np

from helm_plan.cache import _kernels as K
from helm_plan.cache._emblog import N_META
from helm_plan.cache.core import CacheState, log_slots
from helm_plan.cluster.routers.base import N_LOAD
from helm_plan.errors import HelmPlanError

_BUG = "a bug in the cluster simulator; rerun with --debug and report the traceback"


class InternalError(HelmPlanError):
    """A broken invariant of the cluster simulator (a bug, not a user error)."""

    exit_code = 1


class ClusterState:
    """Stacked per-node cache arrays, per-node queue state and per-request outputs."""

    def __init__(
        self, n_nodes: int, slots: int, key_bytes: np.ndarray, n_users: int, n_requests: int,
        pool_bytes: int, counts: bool,
    ) -> None:  # fmt: skip
        kb = np.ascontiguousarray(key_bytes, np.int64)
        # every node's log sized for the whole pool as EMB, as CacheState sizes its own
        nk, q, nn = len(kb), log_slots(pool_bytes, kb), n_nodes
        self.key_bytes = kb
        self.e_last = np.full((nn, nk), -1, np.int32)
        self.e_qi = np.zeros((nn, q), np.int32)
        self.e_meta = np.zeros((nn, N_META), np.int64)
        self.k_prev = np.full((n_users, nn), -1, np.int32)
        self.k_next = np.full((n_users, nn), -1, np.int32)
        self.k_len = np.full((n_users, nn), -1, np.int64)
        self.k_start = np.zeros((n_users, nn), np.int64)
        self.k_meta = np.zeros((nn, 4), np.int64)
        self.counts = np.zeros((nn, nk if counts else 0), np.float32)
        # batching and router counters
        self.free = np.zeros((nn, slots), np.float64)
        self.load = np.zeros((nn, N_LOAD), np.int64)
        self.q_head = np.full(nn, -1, np.int64)
        self.q_len = np.zeros(nn, np.int64)
        self.q_kth = np.full(nn, -1, np.int64)
        self.tail = np.full(nn, -1, np.int64)
        self.sl_head = np.full((nn, slots), -1, np.int64)
        self.sl_tail = np.full((nn, slots), -1, np.int64)
        self.next_close = np.full(nn, np.inf)
        self.next_done = np.full(nn, np.inf)
        self.n_batch = np.zeros(nn, np.int64)
        self.rstate = np.zeros(1, np.int64)
        self.res_h = np.zeros(nn, np.int64)
        self.res_c = np.zeros(nn, np.int64)
        # per request (whole trace)
        n = n_requests
        self.node = np.full(n, -1, np.int32)
        self.out = np.zeros((K.N_OUT, n), np.int64)
        self.start = np.zeros(n, np.float64)
        self.finish = np.zeros(n, np.float64)
        self.service = np.zeros(n, np.float64)
        self.bsize = np.zeros(n, np.int32)
        self.bno = np.zeros(n, np.int64)
        self.shr = np.ones(n, np.float64)
        self.est = np.zeros(n, np.int64)
        self.nxt = np.full(n, -1, np.int64)
        self.bnx = np.full(n, -1, np.int64)

    @property
    def n_nodes(self) -> int:
        return self.e_meta.shape[0]

    def view(self, n: int) -> CacheState:
        """Node ``n``'s caches as views into the stacked arrays."""
        return CacheState(
            emb_last=self.e_last[n], emb_qi=self.e_qi[n], emb_meta=self.e_meta[n],
            kv_prev=self.k_prev[:, n], kv_next=self.k_next[:, n], kv_len=self.k_len[:, n],
            kv_start=self.k_start[:, n], kv_meta=self.k_meta[n],
            key_bytes=self.key_bytes,
        )  # fmt: skip

    def load_from(self, n: int, st: CacheState, counts: np.ndarray | None) -> CacheState:
        """Copy a node's own (fresh) caches into column ``n``; returns the views to adopt."""
        v = self.view(n)
        q = int(st.emb_meta[K.QE] + st.emb_meta[K.TL])  # the snapshot and touched keys
        if q > v.emb_qi.shape[0]:
            raise InternalError(f"EMB log of {q} entries exceeds the stacked log", hint=_BUG)
        v.emb_last[:] = st.emb_last
        v.emb_qi[:q] = st.emb_qi[:q]
        v.emb_meta[:] = st.emb_meta
        for a, b in ((v.kv_prev, st.kv_prev), (v.kv_next, st.kv_next), (v.kv_len, st.kv_len),
                     (v.kv_start, st.kv_start), (v.kv_meta, st.kv_meta)):  # fmt: skip
            a[:] = b
        if counts is not None:
            self.counts[n] = counts
        return v

    def check_views(self, n: int, st: CacheState) -> None:
        """A resize must never have swapped a node's arrays for new ones."""
        if not (st.emb_qi.base is self.e_qi and st.emb_last.base is self.e_last
                and st.kv_len.base is self.k_len):  # fmt: skip
            raise InternalError(
                f"node {n}'s caches left the stacked arrays (a resize reallocated)", hint=_BUG
            )
