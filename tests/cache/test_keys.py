"""EMB key numbering (``cache/keys.py``) against hand-worked and pure-Python references.

Pins what the brute-force replay tests only reach indirectly: the SplitMix64 finaliser on
edge values (0, the wrap past 2**64, a negative item id read as its two's complement), the
per-table salt (SHA-256 of the table name, first 8 bytes little-endian), the dense numbering
of the (table, row) pairs in table order then row order, and the documented dtypes and
``direct_bytes`` rule of :class:`EmbKeys`.
"""

from __future__ import annotations

import warnings

import numpy as np
from brute import M64, salt, splitmix
from test_core import model

from helm_plan.cache.keys import emb_keys, splitmix64, table_rows
from helm_plan.profiles import EmbTable


def test_splitmix64_matches_python_ints_on_edge_values():
    xs = [0, 1, 2, 12345, 2**63, M64, M64 - 0x9E3779B97F4A7C15 + 1]
    got = splitmix64(np.array(xs, np.uint64))
    assert got.dtype == np.uint64
    assert [int(v) for v in got] == [splitmix(x) for x in xs]
    # a list of Python ints is converted to uint64 first
    assert int(splitmix64([7])[0]) == splitmix(7)


def test_splitmix64_of_a_scalar_wraps_silently():
    # numpy warns on scalar overflow unless told not to: the multiplications must wrap mod
    # 2**64 without a RuntimeWarning (arrays never warn, so only a scalar shows it)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = splitmix64(np.uint64(M64))
    assert int(got) == splitmix(M64)


def test_table_rows_identity_is_dense_and_hash_uses_the_salted_splitmix():
    tabs = [
        EmbTable("item", dim=2, dtype_bytes=1),
        EmbTable("cat", dim=1, dtype_bytes=1, rows=5, key="hash"),
        EmbTable("brand", dim=1, dtype_bytes=1, rows=1000, key="hash"),
    ]
    ids = [40, 7, -3, 2**40 + 1]
    rows = table_rows(np.array(ids), model(tabs))
    assert rows.dtype == np.int64 and rows.shape == (4, 3)
    assert rows[:, 0].tolist() == [0, 1, 2, 3]  # dense item ids, not the raw ids
    for t, name, n in ((1, "cat", 5), (2, "brand", 1000)):
        want = [splitmix((i & M64) ^ salt(name)) % n for i in ids]
        assert rows[:, t].tolist() == want, name
    # two tables of the same size but different names hash differently (the salt)
    assert salt("cat") != salt("brand")
    # narrower integer ids are widened to int64 first (a uint64 view needs 8 bytes)
    narrow = table_rows(np.array(ids[:3], np.int32), model(tabs))
    assert narrow.tolist() == rows[:3].tolist()


def test_emb_keys_numbers_pairs_table_by_table_hand_worked():
    tabs = [
        EmbTable("item", dim=4, dtype_bytes=1),  # 4 bytes, identity
        EmbTable("cat", dim=2, dtype_bytes=1, rows=3, key="hash", per_candidate=0),  # 2 bytes
        EmbTable("ctx", dim=3, dtype_bytes=2, rows=7, key="hash", per_history_token=0),  # 6
    ]
    ids = [11, 5, 11 + 3 * 7 * 1000, 2]
    m = model(tabs)
    k = emb_keys(np.array(ids), m)
    # reference: per table, the sorted distinct rows get consecutive keys after the
    # previous tables' keys
    raw = [
        list(range(len(ids))),
        [splitmix(i ^ salt("cat")) % 3 for i in ids],
        [splitmix(i ^ salt("ctx")) % 7 for i in ids],
    ]
    base, want_keys, want_bytes, want_table = 0, [[0] * 3 for _ in ids], [], []
    for t, col in enumerate(raw):
        uniq = sorted(set(col))
        for i, v in enumerate(col):
            want_keys[i][t] = base + uniq.index(v)
        want_bytes += [tabs[t].row_bytes] * len(uniq)
        want_table += [t] * len(uniq)
        base += len(uniq)
    assert k.item_keys.dtype == np.int32 and k.item_keys.flags.c_contiguous
    assert k.item_keys.tolist() == want_keys
    assert k.key_bytes.dtype == np.int64 and k.key_bytes.tolist() == want_bytes
    assert k.key_table.dtype == np.int16 and k.key_table.tolist() == want_table
    assert k.n_keys == base == len(want_bytes)
    assert k.hist_tables.dtype == np.uint8 and k.hist_tables.tolist() == [1, 1, 0]
    assert k.cand_tables.dtype == np.uint8 and k.cand_tables.tolist() == [1, 0, 1]
    assert k.table_bytes.dtype == np.int64 and k.table_bytes.tolist() == [4, 2, 6]
    assert k.direct_bytes == 0  # three tables: the kernel must look keys up


def test_emb_keys_hash_table_collisions_share_one_key():
    # rows=1: every item hashes to row 0, so the table has one key shared by all items
    tabs = [EmbTable("item", dim=1, dtype_bytes=1), EmbTable("c", dim=5, dtype_bytes=1, rows=1,
                                                             key="hash")]  # fmt: skip
    k = emb_keys(np.array([9, 8, 7]), model(tabs))
    assert k.item_keys.tolist() == [[0, 3], [1, 3], [2, 3]]
    assert k.key_bytes.tolist() == [1, 1, 1, 5] and k.key_table.tolist() == [0, 0, 0, 1]


def test_direct_bytes_only_for_one_identity_table():
    ident = EmbTable("item", dim=3, dtype_bytes=2)
    hashed = EmbTable("h", dim=3, dtype_bytes=2, rows=4, key="hash")
    ids = np.array([3, 1, 2])
    one = emb_keys(ids, model([ident]))
    assert one.direct_bytes == 6
    assert one.item_keys[:, 0].tolist() == [0, 1, 2]  # key == dense item
    assert emb_keys(ids, model([hashed])).direct_bytes == 0
    assert emb_keys(ids, model([ident, hashed])).direct_bytes == 0
    assert emb_keys(ids, model([hashed, ident])).direct_bytes == 0


def test_emb_keys_of_a_model_without_tables_is_empty():
    k = emb_keys(np.array([1, 2]), model([]))
    assert k.n_keys == 0 and k.direct_bytes == 0
    assert k.key_bytes.dtype == np.int64 and k.key_table.dtype == np.int16
    assert k.item_keys.shape == (2, 0) and k.item_keys.dtype == np.int32
    assert k.hist_tables.tolist() == [] and k.table_bytes.tolist() == []
    assert k.key_bytes.tolist() == [] and k.key_table.tolist() == []
    assert k.table_bytes.dtype == np.int64  # not numpy's float64 of an empty list
