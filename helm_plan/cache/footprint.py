"""The trace's combined EMB+KV footprint: the pool size at which the caches stop competing.

EMB: the bytes of every (table, row) key the trace's items reach in a table
that is looked up. Every key any lookup stream of the trace touches is among
them, so an EMB cache this large never evicts; it is an upper bound, equal
to the distinct bytes of the KV-0 stream when every item is looked up in
every table it reaches (tests compare both).

KV: the peak tokens held by a KV cache that never evicts (same admission
rules as ``core.replay``, through ``_kernels.context``/``kv_admit``). From
this capacity up the KV cache never evicts, so it is exactly where the KV
curve stops rising. With the chunked slide a context can shrink and a
context the next token would invalidate is not admitted, so the sum of final
contexts would overstate it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from helm_plan.cache import _kernels as K
from helm_plan.cache.core import Workload
from helm_plan.profiles import ModelProfile


@dataclass(frozen=True)
class Footprint:
    """Bytes at which neither cache ever evicts: every reachable EMB key, the peak KV held."""

    n_keys: int
    """Distinct (table, row) keys the trace's items reach in the looked-up tables."""
    emb_bytes: int
    """Their bytes."""
    kv_tokens: int
    """Peak KV tokens held by a KV cache that never evicts (module docstring)."""
    kv_bytes: int
    """kv_tokens * kv_bytes_per_token."""

    @property
    def total_bytes(self) -> int:
        """EMB plus KV footprint, bytes."""
        return self.emb_bytes + self.kv_bytes

    def fits(self, pool_bytes: int) -> bool:
        """True when the whole footprint fits in ``pool_bytes`` (then some split evicts
        nothing: :attr:`helm_plan.sim.context.NodeContext.fit_band`)."""
        return self.total_bytes <= pool_bytes


def final_context(history: np.ndarray, max_seq_len: int, chunk: int) -> np.ndarray:
    """Context length L of histories of ``history`` tokens (the chunked slide of DESIGN.md)."""
    h = np.asarray(history, np.int64)
    over = np.maximum(h - max_seq_len, 0)
    s0 = -(-over // chunk) * chunk
    return h - s0


def footprint(wl: Workload, model: ModelProfile) -> Footprint:
    """Σ bytes of the reachable keys + the peak KV occupancy · kv_bytes_per_token."""
    k, a = wl.keys, wl.arrays
    used = (k.hist_tables | k.cand_tables).astype(bool)
    in_use = used[k.key_table]
    kv_tokens = int(_kv_peak(a.user, a.hist_end, wl.max_seq_len, wl.kv_slide_chunk, a.n_users))
    return Footprint(
        n_keys=int(in_use.sum()),
        emb_bytes=int(k.key_bytes[in_use].sum()),
        kv_tokens=kv_tokens,
        kv_bytes=kv_tokens * model.kv_bytes_per_token,
    )


@nb.njit(cache=True)
def _kv_peak(user, hist_end, max_seq_len, chunk, n_users):
    held = np.zeros(n_users, np.int64)
    used = 0
    peak = 0
    for i in range(user.shape[0]):
        u = user[i]
        full = hist_end[i]
        s0, L = K.context(full, max_seq_len, chunk)
        used -= held[u]  # the user's old entry is dropped first, as in kv_access
        held[u] = 0
        if K.kv_admit(full, s0, max_seq_len) and L > 0:
            held[u] = L
            used += L
            peak = max(peak, used)
    return peak
