"""The trace's combined EMB+KV footprint: the pool size at which the caches stop competing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.arrays import TraceArrays
from helm_plan.profiles import ModelProfile


@dataclass(frozen=True)
class Footprint:
    """Bytes needed to hold every row and every user's final KV prefix at once."""

    n_items: int
    """Distinct items in histories and candidates (EMB rows)."""
    emb_bytes: int
    """n_items * row_bytes."""
    kv_tokens: int
    """Sum over users of min(final history length, max_seq_len)."""
    kv_bytes: int
    """kv_tokens * kv_bytes_per_token."""

    @property
    def total_bytes(self) -> int:
        """EMB plus KV footprint, bytes."""
        return self.emb_bytes + self.kv_bytes

    def fits(self, pool_bytes: int) -> bool:
        """True when the whole footprint fits in ``pool_bytes`` (the caches do not compete)."""
        return self.total_bytes <= pool_bytes


def footprint(arrays: TraceArrays, model: ModelProfile) -> Footprint:
    """distinct items * row_bytes + sum_u min(final history_u, max_seq_len) * kv_bytes_per_token."""
    final = np.diff(arrays.user_hist_offsets)
    kv_tokens = int(np.minimum(final, model.max_seq_len).sum())
    return Footprint(
        n_items=int(arrays.n_items),
        emb_bytes=int(arrays.n_items) * model.row_bytes,
        kv_tokens=kv_tokens,
        kv_bytes=kv_tokens * model.kv_bytes_per_token,
    )
