"""``sessionize`` on hand-worked logs: exact boundary cases of the session gap."""

from __future__ import annotations

import numpy as np

from helm_plan.ingest.sessions import Interactions, sessionize


def _log(user, item, ts) -> Interactions:
    n = len(user)
    return Interactions(
        np.array(user, np.int64), np.array(item, np.int64), np.array(ts, np.float64),
        np.arange(n, dtype=np.int64), "test", n,
    )  # fmt: skip


def _requests(req) -> list[tuple[int, float, list[int]]]:
    return [
        (int(req.user[i]), float(req.order_t[i]), req.items[req.offsets[i] : req.offsets[i + 1]].tolist())
        for i in range(req.n)
    ]  # fmt: skip


def test_a_gap_equal_to_the_threshold_joins_the_session_one_above_splits_it():
    # user 0: 0, 10 (gap 10 == threshold: same session), 20.5 (gap 10.5: new session)
    # user 1: 5, 15.25 (gap 10.25: new session)
    x = _log([0, 0, 0, 1, 1], [1, 2, 3, 4, 5], [0.0, 10.0, 20.5, 5.0, 15.25])
    got = _requests(sessionize(x, 10.0))
    # a request arrives at its session's last interaction; requests ordered by arrival
    assert got == [(1, 5.0, [4]), (0, 10.0, [1, 2]), (1, 15.25, [5]), (0, 20.5, [3])]


def test_sessions_order_items_by_time_then_file_row_and_ties_by_first_row():
    # user 2's rows out of time order in the file; user 3's session ends at the same time
    x = _log([2, 3, 2, 2], [7, 8, 9, 6], [4.0, 4.0, 1.0, 1.0])
    req = sessionize(x, 5.0)
    # user 2: items at t=1 (rows 2, 3 -> 9, 6) then t=4 (row 0 -> 7); first row 0 < user 3's 1
    assert _requests(req) == [(2, 4.0, [9, 6, 7]), (3, 4.0, [8])]
    np.testing.assert_array_equal(req.first_row, [0, 1])
    assert not req.real_time
