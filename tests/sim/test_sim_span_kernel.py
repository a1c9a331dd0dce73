"""The oracle's cold-start kernel equals the cache core's replay, request by request."""

from __future__ import annotations

import numpy as np
from conftest import small_table
from hypothesis import given, settings
from hypothesis import strategies as st

from helm_plan import arrays as A
from helm_plan.cache import core
from helm_plan.sim.span_kernel import cold_replay


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    emb_rows=st.integers(0, 80),
    kv_tokens=st.integers(0, 300),
    max_seq_len=st.integers(1, 40),
    start=st.integers(0, 150),
)
def test_cold_replay_equals_core(seed, emb_rows, kv_tokens, max_seq_len, start):
    a = A.from_table(small_table(300, n_users=15, n_items=60, max_new=5, n_candidates=4, seed=seed))
    state = core.CacheState.empty(a.n_items, a.n_users, emb_rows, kv_tokens)
    r = core.replay(a, state, start, 300, max_seq_len=max_seq_len)
    got = cold_replay(a, emb_rows, kv_tokens, start, 300, max_seq_len)
    want = np.stack([r.n_computed, r.n_reused, r.ctx_len, r.n_lookup, r.n_miss])
    np.testing.assert_array_equal(got, want)


def test_cold_replay_equals_core_with_queue_compaction():
    # many hits on a small cache force repeated queue compactions
    a = A.from_table(small_table(3000, n_users=50, n_items=400, n_candidates=32, seed=3))
    for emb in (1, 7, 64, 399, 10_000):
        state = core.CacheState.empty(a.n_items, a.n_users, emb, 500)
        r = core.replay(a, state, max_seq_len=50)
        got = cold_replay(a, emb, 500, 0, a.n_requests, 50)
        np.testing.assert_array_equal(got[4], r.n_miss)
