"""Dense arrays: history layout, capped context and seeded candidate draws."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.cache import _kernels as K
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
    """Without a candidates column the arrays keep the counts, the seed and the token offsets;
    the replay kernel draws the ids from the past (tests/cache/test_core.py checks the draws)."""
    t = small_table(300, with_candidates=False, seed=4)
    a = A.from_table(t, seed=7, candidate_window_tokens=50)
    assert not a.explicit_candidates and len(a.cand_values) == 0
    np.testing.assert_array_equal(a.n_cand, t.column("n_candidates").to_numpy())
    assert a.candidate_seed == 7 and a.candidate_window_tokens == 50
    stream = np.concatenate([np.asarray(x, np.int64) for x in t.column("new_items").to_pylist()])
    ring, top = K.new_ring(len(stream), len(stream))  # the whole stream, read from the histories
    K.ring_fill(a.n_requests - 1, ring, top, a.tok_off, a.user, a.hist_end,
                a.user_hist_offsets, a.hist_values)  # fmt: skip
    np.testing.assert_array_equal(a.item_ids[ring[: len(stream)]], stream)
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


def random_histories(seed: int, n: int = 400, n_users: int = 7):
    """A request-order token stream built by hand, and its per-user layout (as the arrays)."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, n_users, n).astype(np.int32)
    n_new = np.where(rng.random(n) < 0.4, 0, rng.integers(1, 6, n))
    stream = rng.integers(0, 1000, int(n_new.sum())).astype(np.int32)
    tok_off = np.concatenate([[0], np.cumsum(n_new)]).astype(np.int64)
    per_user: list[list[int]] = [[] for _ in range(n_users)]
    hist_end = np.empty(n, np.int64)
    for i in range(n):
        per_user[user[i]].extend(stream[tok_off[i] : tok_off[i + 1]].tolist())
        hist_end[i] = len(per_user[user[i]])
    uoff = np.concatenate([[0], np.cumsum([len(h) for h in per_user])]).astype(np.int64)
    hist = np.array([t for h in per_user for t in h], np.int32)
    return stream, (tok_off, user, hist_end, uoff, hist)


@pytest.mark.parametrize("seed", range(4))
def test_a_fresh_ring_reads_the_request_order_stream_from_the_histories(seed):
    """Filled from nothing at each request, a ring longer than the stream holds every position
    before it, read back through the per-user layout, equal to the request-order stream built
    by hand; many requests add nothing (flat ``tok_off`` runs), and the fill starts far behind
    the request (the galloping search's long jumps)."""
    stream, (tok_off, user, hist_end, uoff, hist) = random_histories(seed)
    for i in range(len(user)):
        ring, top = K.new_ring(len(stream), len(stream))
        K.ring_fill(i, ring, top, tok_off, user, hist_end, uoff, hist)
        assert ring[: tok_off[i + 1]].tolist() == stream[: tok_off[i + 1]].tolist(), i


@pytest.mark.parametrize("window", [1, 13, 64, 100, 5000])
def test_the_token_ring_holds_every_position_a_draw_can_reach(window):
    """Requests in order, skips ahead, and jumps back (a new replay span): after ``ring_fill``
    every position of the last ``window`` tokens up to the request is in its slot, with the
    ring shorter than the stream (it wraps) and longer (``window`` above the token count)."""
    stream, (tok_off, user, hist_end, uoff, hist) = random_histories(9)
    ring, top = K.new_ring(window, int(tok_off[-1]))
    assert len(ring) >= min(window, len(stream)) and len(ring) & (len(ring) - 1) == 0
    order = [*range(0, 150), *range(260, 300), *range(40, 90), 399, 7, *range(8, 400, 3)]
    for i in order:
        K.ring_fill(i, ring, top, tok_off, user, hist_end, uoff, hist)
        hi = int(tok_off[i + 1])
        want = stream[max(0, hi - window) : hi]
        got = [ring[p & (len(ring) - 1)] for p in range(max(0, hi - window), hi)]
        assert got == want.tolist(), i
        assert top[0] == hi
