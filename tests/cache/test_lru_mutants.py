"""cache/lru.py's wrapper on hand-worked streams: edge cases, the error text and n_ids checks.

Pins what the brute-force comparison in ``test_stack.py`` leaves open: the exact figures of
an empty and a one-access stream (both counts), a sized and a unit LRU worked by hand, the
negative-capacity error's message and hint, and that an ``n_ids`` smaller than the stream's
id space is refused (by ``emb_lru`` and ``emb_lru_misses``) instead of inferred.
"""

from __future__ import annotations

import numpy as np
import pytest

from helm_plan.cache import lru
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
