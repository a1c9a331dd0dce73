"""EMB cache keys: the (table, row) entries a model looks up for each item (DESIGN.md, Embedding tables).

A history token of item ``i`` looks up one row in every table with
``per_history_token = 1``; a candidate one row in every table with
``per_candidate = 1``. An ``identity`` table's row is the item itself; a
``hash`` table's row is ``splitmix64(item_id ^ salt(table)) mod rows``, a
deterministic stand-in for a feature that is a function of the item
(category, seller, brand). The (table, row) pairs the trace's items reach
are numbered densely, so the compiled LRU indexes flat arrays; each key
costs its table's row bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from helm_plan._hash import M1, mix64
from helm_plan.profiles import ModelProfile

_GOLDEN = M1  # SplitMix64's increment, added before the finaliser


@dataclass(frozen=True, eq=False)
class EmbKeys:
    """Dense EMB keys of a trace's items under one model's tables."""

    item_keys: np.ndarray
    """Key of each (dense item, table), int32, shape (n_items, n_tables)."""
    key_bytes: np.ndarray
    """Bytes of each key (its table's row bytes), int64."""
    hist_tables: np.ndarray
    """1 where a history token looks the table up, uint8 (n_tables)."""
    cand_tables: np.ndarray
    """1 where a candidate looks the table up, uint8 (n_tables)."""
    key_table: np.ndarray
    """Table index of each key, int16."""
    table_bytes: np.ndarray
    """Row bytes of each table, int64 (a key's bytes are its table's)."""
    direct_bytes: int = 0
    """Row bytes when the model has one identity table (key = dense item), else 0: the
    replay kernel then skips the item-to-key and key-to-bytes lookups."""

    @property
    def n_keys(self) -> int:
        return len(self.key_bytes)


def _salt(name: str) -> np.uint64:
    return np.uint64(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser, elementwise on uint64 (a fast, well-mixed integer hash)."""
    z = np.asarray(x, np.uint64) + _GOLDEN
    with np.errstate(over="ignore"):
        # the compiled finaliser's Python source, run by numpy: elementwise, no compile
        return mix64.py_func(z)


def table_rows(item_ids: np.ndarray, model: ModelProfile) -> np.ndarray:
    """Row of each original item id in each table, int64, shape (n_items, n_tables)."""
    ids = np.asarray(item_ids, np.int64)
    out = np.empty((len(ids), len(model.tables)), np.int64)
    for t, tab in enumerate(model.tables):
        if tab.key == "identity":
            out[:, t] = np.arange(len(ids))  # dense item ids: one row per distinct item
        else:
            h = splitmix64(ids.view(np.uint64) ^ _salt(tab.name))
            out[:, t] = (h % np.uint64(tab.rows)).astype(np.int64)
    return out


def emb_keys(item_ids: np.ndarray, model: ModelProfile) -> EmbKeys:
    """Number the (table, row) pairs of ``item_ids`` (the trace's dense items) densely."""
    rows = table_rows(item_ids, model)
    n_items, n_t = rows.shape
    item_keys = np.empty((n_items, n_t), np.int32)
    key_bytes: list[np.ndarray] = []
    key_table: list[np.ndarray] = []
    base = 0
    for t, tab in enumerate(model.tables):
        uniq, inv = np.unique(rows[:, t], return_inverse=True)
        item_keys[:, t] = base + inv.astype(np.int32)
        key_bytes.append(np.full(len(uniq), tab.row_bytes, np.int64))
        key_table.append(np.full(len(uniq), t, np.int16))
        base += len(uniq)
    single = n_t == 1 and model.tables[0].key == "identity"
    return EmbKeys(
        direct_bytes=model.tables[0].row_bytes if single else 0,
        item_keys=np.ascontiguousarray(item_keys),
        key_bytes=np.concatenate(key_bytes) if key_bytes else np.zeros(0, np.int64),
        hist_tables=np.array([t.per_history_token for t in model.tables], np.uint8),
        table_bytes=np.array([t.row_bytes for t in model.tables], np.int64),
        cand_tables=np.array([t.per_candidate for t in model.tables], np.uint8),
        key_table=np.concatenate(key_table) if key_table else np.zeros(0, np.int16),
    )
