"""tests/stream_lru.py's wrapper on hand-worked streams: edge cases, the error text and n_ids checks.

Pins what the brute-force comparison in ``test_stack.py`` leaves open: the exact figures of
an empty and a one-access stream (both counts), a sized and a unit LRU worked by hand, the
negative-capacity error's message and hint, and that an ``n_ids`` smaller than the stream's
id space is refused (by ``emb_lru`` and ``emb_lru_misses``) instead of inferred, and that the
position array handed to the kernel can hold the positions of a stream past 2**31 accesses.
"""

from __future__ import annotations

import numpy as np
import pytest
import stream_lru as lru

from helm_plan.errors import ConfigError


def test_negative_capacity_message_and_hint():
    with pytest.raises(ConfigError) as e:
        lru.emb_lru(np.array([1, 2]), -1)
    assert str(e.value) == "capacity must be >= 0, got -1"
    assert e.value.hint == "pass a capacity in bytes"


def test_zero_capacity_caches_nothing():
    # every key (1 byte) is larger than a 0-byte cache: fetched, never cached
    assert lru.emb_lru(np.array([1, 1, 2, 1]), 0) == (4, 4)
    assert lru.emb_lru_misses(np.array([1, 1, 2, 1]), 0) == 4


def test_empty_and_single_access_streams():
    assert lru.emb_lru(np.zeros(0, np.int32), 5) == (0, 0)
    assert lru.emb_lru(np.zeros(0, np.int32), 5, np.array([3, 4]), 2) == (0, 0)
    assert lru.emb_lru(np.array([1]), 10, np.array([3, 7])) == (1, 7)
    assert lru.emb_lru_misses(np.array([0]), 3) == 1


def test_sized_lru_by_hand():
    # sizes 0:3, 1:2, 2:4 bytes, capacity 6
    # 0 miss (used 3), 1 miss (5), 0 hit (LRU order 1, 0), 2 miss: evict 1 (3), still
    # 3 + 4 > 6, evict 0 (0), insert (4); 1 miss: 4 + 2 = 6 fits
    ids = np.array([0, 1, 0, 2, 1])
    assert lru.emb_lru(ids, 6, np.array([3, 2, 4])) == (4, 3 + 2 + 4 + 2)
    # a key larger than the capacity is fetched but not cached: 2 (4 B) at capacity 3
    assert lru.emb_lru(np.array([2, 2, 0, 0]), 3, np.array([3, 2, 4])) == (3, 4 + 4 + 3)


def test_unit_lru_by_hand():
    # 2 rows: 0 m, 1 m, 2 m (evicts 0), 0 m (evicts 1), 3 m (evicts 2), 0 hit
    assert lru.emb_lru_misses(np.array([0, 1, 2, 0, 3, 0]), 2) == 5
    assert lru.emb_lru(np.array([0, 1, 2, 0, 3, 0]), 2) == (5, 5)


def test_n_ids_smaller_than_the_stream_is_refused():
    with pytest.raises(ConfigError, match="n_ids=3"):
        lru.emb_lru(np.array([5, 1]), 4, None, 3)
    with pytest.raises(ConfigError, match="n_ids=3"):
        lru.emb_lru_misses(np.array([5, 1]), 4, 3)
    # a larger id space than the stream uses is fine
    assert lru.emb_lru_misses(np.array([5, 1, 5]), 4, 100) == 2


@pytest.mark.parametrize("n", [2**31 - 1, 2**31 + 1, 2**32 + 1])
def test_log_positions_fit_streams_past_int32(monkeypatch, n):
    """The kernel stores log positions 0..len-1 in ``last``: its dtype must hold them.

    A zero-stride view stands in for a stream of ``n`` accesses (no memory), and the kernel
    is replaced by a spy, so only the array ``emb_lru`` hands it is checked.
    """
    seen = {}

    def spy(ids, sizes, last, cap):
        seen["len"], seen["last"] = len(ids), last
        return 0, 0

    monkeypatch.setattr(lru, "as_ids", lambda ids, n_ids: (ids, 1))
    monkeypatch.setattr(lru, "stream_sizes", lambda ids, kb, sizes: ids)
    monkeypatch.setattr(lru, "_lru_log", spy)
    stream = np.broadcast_to(np.int32(0), (n,))
    assert lru.emb_lru(stream, 1) == (0, 0)
    assert seen["len"] == n
    assert seen["last"].shape == (1,) and seen["last"][0] < 0  # one key, not cached yet
    assert np.iinfo(seen["last"].dtype).max >= n - 1
