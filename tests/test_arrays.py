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


def test_implicit_candidates_are_counted_not_materialised():
    """Without a candidates column the arrays keep the counts, the seed and the token stream;
    the replay kernel draws the ids from the past (tests/cache/test_core.py checks the draws)."""
    t = small_table(300, with_candidates=False, seed=4)
    a = A.from_table(t, seed=7, candidate_window_tokens=50)
    assert not a.explicit_candidates and len(a.cand_values) == 0
    np.testing.assert_array_equal(a.n_cand, t.column("n_candidates").to_numpy())
    assert a.candidate_seed == 7 and a.candidate_window_tokens == 50
    stream = np.concatenate([np.asarray(x, np.int64) for x in t.column("new_items").to_pylist()])
    np.testing.assert_array_equal(a.item_ids[a.tok_stream], stream)
    lens = [len(x) for x in t.column("new_items").to_pylist()]
    np.testing.assert_array_equal(np.diff(a.tok_off), lens)


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
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="window_s must be"):
            A.window_edges(ts, bad)


def test_window_count_is_bounded_by_requests_not_span():
    # Two requests 1e9 s apart at 10 s windows would need 1e8 windows: refused at once
    # (no allocation by the span), with the smallest window length that works.
    ts = np.array([0.0, 1e9])
    with pytest.raises(ConfigError, match="100,000,001 windows for 2 requests") as ei:
        A.window_edges(ts, 10.0)
    assert ei.value.hint.startswith("raise --window-s to at least 1e+03 s")
    assert len(A.window_edges(ts, 1e3)) - 1 == 1_000_001 <= A.max_windows(2)  # the hint works
    with pytest.raises(ConfigError):
        A.window_edges(np.array([0.0, 1.0]), 1e-7)
