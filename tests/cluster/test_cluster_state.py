"""The cluster's stacked state arrays, field by field (issue 16, item 4).

Every array's shape, dtype and cold value is written out from the layout in the module's
docstring and the cold cache of ``CacheState.empty`` (-1 for "not cached"/"no link"/"no
request", 0 for counters, +inf for "no event", 1 for a request's share); the log size is
worked out by hand from its rule, twice min(keys, pool / smallest key) plus 1024 slots.
"""

from __future__ import annotations

import numpy as np
import pytest

from helm_plan.cache.core import CacheState, log_slots
from helm_plan.cluster.state import ClusterState, InternalError


def test_log_size_by_hand():
    assert log_slots(10**9, np.array([], np.int64)) == 1024
    kb = np.array([100, 200, 50], np.int64)
    assert log_slots(120, kb) == 2 * 2 + 1024  # 120 // 50 = 2 keys fit
    assert log_slots(149, kb) == 2 * 2 + 1024
    assert log_slots(150, kb) == 2 * 3 + 1024
    assert log_slots(10**6, kb) == 2 * 3 + 1024  # never more than the keys
    assert log_slots(3, np.array([0, 5], np.int64)) == 2 * 2 + 1024  # a 0-byte key counts as 1
    assert log_slots(1, np.array([0, 5], np.int64)) == 2 * 1 + 1024
    assert log_slots(0, kb) == 1024


def test_internal_error_exit_code():
    assert InternalError.exit_code == 1


def _state(counts: bool = True) -> ClusterState:
    # 3 nodes, 2 slots, 4 keys of 8..64 bytes, 5 users, 6 requests, a pool of 16 bytes
    return ClusterState(3, 2, np.array([8, 16, 32, 64]), 5, 6, 16, counts)


FIELDS = {
    # name: (shape, dtype, cold value)
    "e_last": ((3, 4), np.int32, -1),
    "e_qi": ((3, 2 * 2 + 1024), np.int32, 0),
    "e_meta": ((3, 7), np.int64, 0),
    "k_prev": ((5, 3), np.int32, -1),
    "k_next": ((5, 3), np.int32, -1),
    "k_len": ((5, 3), np.int64, -1),
    "k_start": ((5, 3), np.int64, 0),
    "k_meta": ((3, 4), np.int64, 0),
    "counts": ((3, 4), np.float32, 0),
    "free": ((3, 2), np.float64, 0),
    "load": ((3, 4), np.int64, 0),
    "q_head": ((3,), np.int64, -1),
    "q_len": ((3,), np.int64, 0),
    "q_kth": ((3,), np.int64, -1),
    "tail": ((3,), np.int64, -1),
    "sl_head": ((3, 2), np.int64, -1),
    "sl_tail": ((3, 2), np.int64, -1),
    "next_close": ((3,), np.float64, np.inf),
    "next_done": ((3,), np.float64, np.inf),
    "n_batch": ((3,), np.int64, 0),
    "rstate": ((1,), np.int64, 0),
    "res_h": ((3,), np.int64, 0),
    "res_c": ((3,), np.int64, 0),
    "node": ((6,), np.int32, -1),
    "out": ((7, 6), np.int64, 0),
    "start": ((6,), np.float64, 0),
    "finish": ((6,), np.float64, 0),
    "service": ((6,), np.float64, 0),
    "bsize": ((6,), np.int32, 0),
    "bno": ((6,), np.int64, 0),
    "shr": ((6,), np.float64, 1),
    "est": ((6,), np.int64, 0),
    "nxt": ((6,), np.int64, -1),
    "bnx": ((6,), np.int64, -1),
}


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_cold_arrays(name):
    shape, dtype, cold = FIELDS[name]
    a = getattr(_state(), name)
    assert a.shape == shape and a.dtype == dtype, name
    assert np.all(a == cold), name


def test_no_counts_and_key_bytes():
    s = _state(counts=False)
    assert s.counts.shape == (3, 0) and s.counts.dtype == np.float32
    assert s.key_bytes.dtype == np.int64 and s.key_bytes.tolist() == [8, 16, 32, 64]
    assert s.n_nodes == 3


def test_view_is_node_n_columns():
    s = _state()
    v = s.view(1)
    v.emb_last[2] = 7
    v.emb_qi[0], v.emb_meta[3] = 3, 11
    v.kv_prev[4], v.kv_next[4], v.kv_len[4], v.kv_start[4], v.kv_meta[1] = 1, 2, 3, 4, 5
    assert s.e_last[1, 2] == 7 and s.e_qi[1, 0] == 3
    assert s.e_meta[1, 3] == 11
    assert (s.k_prev[4, 1], s.k_next[4, 1], s.k_len[4, 1], s.k_start[4, 1]) == (1, 2, 3, 4)
    assert s.k_meta[1, 1] == 5
    assert v.key_bytes is s.key_bytes
    # the other nodes are untouched
    assert np.all(s.e_last[[0, 2]] == -1) and np.all(s.k_len[:, [0, 2]] == -1)


def test_load_from_copies_a_fresh_cache():
    s = _state()
    st = CacheState.empty(np.array([8, 16, 32, 64]), 5, 16, 100)
    st.emb_last[:] = [5, -1, 6, -1]
    st.emb_meta[5], st.emb_meta[6] = 1, 2  # QE, TL: a snapshot of one, two touched since
    st.emb_qi[:4] = [0, 2, 0, 1]
    st.kv_prev[:] = [1, 2, 3, 4, -1]
    st.kv_next[:] = [-1, 0, 1, 2, 3]
    st.kv_len[:] = [10, 20, -1, 30, 40]
    st.kv_start[:] = [0, 1, 2, 3, 4]
    counts = np.array([1.5, 0, 2, 0], np.float32)
    v = s.load_from(2, st, counts)
    assert s.e_last[2].tolist() == [5, -1, 6, -1]
    assert s.e_qi[2, :4].tolist() == [0, 2, 0, 0]  # only the first QE + TL entries are copied
    assert s.e_meta[2].tolist() == [0, 0, 0, 16, 0, 1, 2]
    assert s.k_prev[:, 2].tolist() == [1, 2, 3, 4, -1]
    assert s.k_next[:, 2].tolist() == [-1, 0, 1, 2, 3]
    assert s.k_len[:, 2].tolist() == [10, 20, -1, 30, 40]
    assert s.k_start[:, 2].tolist() == [0, 1, 2, 3, 4]
    assert s.k_meta[2].tolist() == [-1, -1, 0, 100]
    assert s.counts[2].tolist() == [1.5, 0, 2, 0] and np.all(s.counts[:2] == 0)
    assert v.emb_last.base is s.e_last and v.kv_len.base is s.k_len
    s.check_views(2, v)  # views of the stacked arrays pass
    # no counts: the row stays as it was
    s.load_from(0, st, None)
    assert np.all(s.counts[0] == 0)


def test_load_from_log_bound():
    s = _state()
    st = CacheState.empty(np.array([8, 16, 32, 64]), 5, 16, 100)
    n = s.e_qi.shape[1]
    st.emb_qi = np.zeros(n + 1, np.int32)
    st.emb_meta[5], st.emb_meta[6] = n - 1, 1  # QE + TL: exactly the stacked log: fine
    s.load_from(0, st, None)
    st.emb_meta[6] = 2
    with pytest.raises(InternalError, match=f"EMB log of {n + 1} entries exceeds") as e:
        s.load_from(0, st, None)
    assert "a bug in the cluster simulator" in e.value.hint


@pytest.mark.parametrize("field", ["emb_qi", "emb_last", "kv_len"])
def test_check_views_catches_a_reallocation(field):
    s = _state()
    v = s.view(1)
    s.check_views(1, v)
    setattr(v, field, getattr(v, field).copy())
    with pytest.raises(InternalError, match="node 1's caches left the stacked arrays") as e:
        s.check_views(1, v)
    assert "rerun with --debug" in e.value.hint


def test_log_size_of_one_key():
    # one key of 40 B: a pool of 100 B holds it (min(1, 100 // 40) = 1), one of 39 B does not
    assert log_slots(100, np.array([40], np.int64)) == 2 * 1 + 1024
    assert log_slots(39, np.array([40], np.int64)) == 1024


def test_key_bytes_are_stored_as_contiguous_int64():
    kb = np.array([8, 0, 16, 0, 32, 0, 64, 0], np.int32)[::2]  # int32, strided
    s = ClusterState(3, 2, kb, 5, 6, 16, True)
    assert s.key_bytes.dtype == np.int64 and s.key_bytes.flags.c_contiguous
    assert s.key_bytes.tolist() == [8, 16, 32, 64]
    assert s.e_last.shape == (3, 4) and s.counts.shape == (3, 4)
    assert s.e_qi.shape == (3, 2 * 2 + 1024)
