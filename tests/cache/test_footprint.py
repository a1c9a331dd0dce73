"""cache/footprint.py on hand-worked inputs: the chunked-slide context, the footprint's figures.

Pins ``final_context`` (the chunked slide of DESIGN.md worked out by hand, int64 out),
``Footprint.fits`` at its boundary, and ``footprint`` on a three-request trace whose keys and
peak KV are counted by hand: a history-only and a candidate-only table both count, a table
no lookup uses does not, and the KV bytes are the peak tokens times the bytes per token.
"""

from __future__ import annotations

import numpy as np
from test_core import model

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core
from helm_plan.cache.footprint import Footprint, final_context, footprint
from helm_plan.profiles import EmbTable


def test_final_context_chunked_slide_by_hand():
    # max_seq_len 10, chunk 3: over = max(h - 10, 0); the start moves by whole chunks,
    # s0 = ceil(over / 3) * 3, and L = h - s0.
    h = np.array([0, 5, 10, 11, 12, 13, 14, 17], np.int32)
    # over:       0  0   0   1   2   3   4   7
    # s0:         0  0   0   3   3   3   6   9
    want = [0, 5, 10, 8, 9, 10, 8, 8]
    got = final_context(h, 10, 3)
    assert got.dtype == np.int64
    assert got.tolist() == want
    # chunk 1 is the plain sliding window: min(h, max_seq_len)
    assert final_context([3, 9, 25], 9, 1).tolist() == [3, 9, 9]


def test_fits_is_inclusive():
    fp = Footprint(n_keys=2, emb_bytes=10, kv_tokens=3, kv_bytes=6)
    assert fp.total_bytes == 16
    assert fp.fits(16) and fp.fits(17) and not fp.fits(15)


def test_footprint_hand_worked():
    tables = [
        EmbTable("hist", dim=4, dtype_bytes=1, per_candidate=0),  # 4 B, history only
        EmbTable("cand", dim=2, dtype_bytes=1, per_history_token=0),  # 2 B, candidates only
        EmbTable("none", dim=8, dtype_bytes=1, per_history_token=0, per_candidate=0),
    ]
    m = model(tables, max_seq_len=40, chunk=1)
    assert m.kv_bytes_per_token == 16  # 2 * 1 layer * d_model 8 * 1 byte
    # u0 +2 items, u1 +3 items, u0 +1 item; candidates 2 per request from {11, 12}
    t = trace.make_table(
        np.array([0.0, 1.0, 2.0]),
        np.array([0, 1, 0]),
        np.array([0, 2, 5, 6]),
        np.array([10, 11, 10, 11, 10, 11]),
        np.full(3, 2),
        candidates_offsets=np.array([0, 2, 4, 6]),
        candidates_values=np.array([11, 12, 12, 11, 11, 12]),
    )
    wl = core.Workload.of(A.from_table(t), m)
    fp = footprint(wl, m)
    # items {10, 11, 12}: one key each in every identity table; the unused table is left out
    assert fp.n_keys == 6
    assert fp.emb_bytes == 3 * 4 + 3 * 2
    # KV never evicting: u0 holds 2, then u1 3 (5 held), then u0's 2 is dropped and 3 held: 6
    assert fp.kv_tokens == 6
    assert fp.kv_bytes == 6 * 16
    assert fp.total_bytes == 18 + 96
