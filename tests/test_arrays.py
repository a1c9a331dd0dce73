"""Dense arrays: history layout, capped context and seeded candidate draws."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.errors import ConfigError


def test_history_layout_matches_python():
    t = small_table(300, with_candidates=False, seed=4)
    a = A.from_table(t)
    users = t.column("user_id").to_pylist()
    new = t.column("new_items").to_pylist()
    hist: dict[int, list[int]] = {}
    for i, (u, items) in enumerate(zip(users, new, strict=True)):
        hist.setdefault(u, []).extend(items)
        du = a.user[i]
        assert a.user_ids[du] == u
        assert a.hist_end[i] == len(hist[u])
        lo = a.user_hist_offsets[du]
        got = a.item_ids[a.hist_values[lo : lo + a.hist_end[i]]].tolist()
        assert got == hist[u]
    np.testing.assert_array_equal(a.history_len(5), np.minimum(a.hist_end, 5))


def test_candidates_are_seeded_and_from_trailing_history():
    t = small_table(300, with_candidates=False, seed=4)
    a1 = A.from_table(t, seed=7, candidate_window_tokens=50)
    a2 = A.from_table(t, seed=7, candidate_window_tokens=50)
    a3 = A.from_table(t, seed=8, candidate_window_tokens=50)
    np.testing.assert_array_equal(a1.cand_values, a2.cand_values)
    assert not np.array_equal(a1.cand_values, a3.cand_values)
    np.testing.assert_array_equal(a1.n_candidates, t.column("n_candidates").to_numpy())
    # every drawn candidate is an item from the global stream's trailing 50 tokens (or the first 50)
    stream = np.concatenate([np.asarray(x, np.int64) for x in t.column("new_items").to_pylist()])
    pos = np.concatenate([[0], np.cumsum([len(x) for x in t.column("new_items").to_pylist()])])
    for i in range(0, 300, 37):
        hi = max(pos[i], min(50, len(stream)))
        allowed = set(stream[max(hi - 50, 0) : hi].tolist())
        got = a1.item_ids[a1.cand_values[a1.cand_offsets[i] : a1.cand_offsets[i + 1]]]
        assert set(got.tolist()) <= allowed


def test_explicit_candidates_share_item_ids():
    t = small_table(100, with_candidates=True)
    a = A.from_table(t)
    got = a.item_ids[a.cand_values].tolist()
    want = [x for row in t.column("candidates").to_pylist() for x in row]
    assert got == want


def test_window_edges():
    ts = np.array([0.0, 0.5, 1.0, 1.5, 3.2])
    np.testing.assert_array_equal(A.window_edges(ts, 1.0), [0, 2, 4, 4, 5])
    with pytest.raises(ConfigError, match="window_s must be positive, got -3"):
        A.window_edges(ts, -3)
