"""Batched service: ``slots`` streams form batches from one FIFO queue (DESIGN.md, Batching).

A node has ``slots`` independent streams (MIG or MPS partitions). A free
stream takes the next batch from the head of the FIFO queue:

- ``static`` (a Triton-style dynamic batcher): the batch closes when it holds
  ``batch_max`` requests or ``batch_timeout_ms`` after its first request
  arrived, whichever comes first, but never before the stream is free; it
  takes every request waiting by then, up to ``batch_max``;
- ``continuous`` (greedy, as vLLM/SGLang schedule single-pass requests): a
  free stream starts at once with everything waiting, up to ``batch_max``.

All members of a batch start and finish together: ``service = T(B)`` from the
latency model over the batch's sums (:mod:`helm_plan.latency.kernel`), and
``sojourn = finish − arrival``. With ``batch_max = 1`` this is the plain FIFO
of per-request service times (the reference ``fifo`` in ``tests/queueing.py``). A blocking
job (an eager refill copy) enters the queue at its time: the batch being
formed stops at it, it waits for every stream to be idle, then holds them all
for its duration. The simulators serve one window per call, so a batch never
spans a window boundary (the split changes only between batches).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numba as nb
import numpy as np

from helm_plan.config import require_int
from helm_plan.errors import ConfigError
from helm_plan.latency.kernel import attention_pairs, batch_time_s
from helm_plan.latency.model import TERMS, LatencyModel, batch_sums


class Batching(StrEnum):
    """How a free stream forms its next batch."""

    STATIC = "static"
    CONTINUOUS = "continuous"


@dataclass(frozen=True)
class BatchResult:
    """When every request of a span started and finished, and its batch."""

    start_s: np.ndarray
    """Batch start per request, seconds."""
    finish_s: np.ndarray
    """Batch end per request, seconds."""
    service_s: np.ndarray
    """Batch time T(B) per request, seconds."""
    batch_size: np.ndarray
    """Requests in the request's batch, int32."""
    batch_id: np.ndarray
    """The request's batch, numbered from 0 in this span in start order, int64."""
    blocked_s: float
    """Time all streams were held by blocking jobs, seconds."""
    free_at_s: np.ndarray
    """When each stream frees after the span: the backlog the next span starts from."""

    @property
    def n_batches(self) -> int:
        """Batches served in the span."""
        return int(self.batch_id[-1]) + 1 if len(self.batch_id) else 0


_NO_T = np.zeros(0, np.float64)


def serve(
    arrival_s: np.ndarray,
    n_computed: np.ndarray,
    ctx_len: np.ndarray,
    n_cand: np.ndarray,
    lookup_bytes: np.ndarray,
    miss_bytes: np.ndarray,
    coeffs: np.ndarray,
    *,
    slots: int = 1,
    batch_max: int = 1,
    batch_timeout_s: float = 0.0,
    batching: str = "static",
    h2d_share: np.ndarray | None = None,
    block_at_s: np.ndarray | None = None,
    block_dur_s: np.ndarray | None = None,
    free_at_s: np.ndarray | None = None,
) -> BatchResult:
    """Serve a span of requests (sorted by arrival) in batches on ``slots`` streams."""
    require_int("slots", slots, 1)
    require_int("batch_max", batch_max, 1)
    if not (np.isfinite(batch_timeout_s) and batch_timeout_s >= 0):
        raise ConfigError(
            f"batch_timeout_s must be finite and >= 0, got {batch_timeout_s}",
            hint="pass --batch-timeout-ms >= 0",
        )
    if batching not in set(Batching):
        raise ConfigError(
            f"unknown batching {batching!r}", hint=f"use one of {', '.join(Batching)}"
        )
    mode = Batching(batching)
    arr = np.ascontiguousarray(arrival_s, np.float64)
    n = len(arr)
    cols = [np.ascontiguousarray(x, np.float64) for x in
            (n_computed, ctx_len, n_cand, lookup_bytes, miss_bytes)]  # fmt: skip
    if any(c.shape != (n,) for c in cols):
        raise ConfigError(
            "every per-request array must have one entry per arrival",
            hint="pass one value per arrival in every array",
        )
    share = np.ones(n) if h2d_share is None else np.ascontiguousarray(h2d_share, np.float64)
    if share.shape != (n,) or (n and not (share.min() > 0 and share.max() <= 1)):
        raise ConfigError(
            "h2d_share must hold one value in (0, 1] per request",
            hint="pass one share in (0, 1] per request",
        )
    bt = _NO_T if block_at_s is None else np.ascontiguousarray(block_at_s, np.float64)
    bd = _NO_T if block_dur_s is None else np.ascontiguousarray(block_dur_s, np.float64)
    if bt.shape != bd.shape:
        raise ConfigError(
            "block_at_s and block_dur_s must have the same length",
            hint="pass one duration per blocking job",
        )
    free = np.zeros(slots) if free_at_s is None else np.array(free_at_s, np.float64)
    if free.shape != (slots,):
        raise ConfigError(
            f"free_at_s must hold one time per slot ({slots}), got {free.shape}",
            hint="pass one free time per slot",
        )
    start, finish, service = np.empty(n), np.empty(n), np.empty(n)
    size = np.empty(n, np.int32)
    bid = np.empty(n, np.int64)
    c = np.ascontiguousarray(coeffs, np.float64)
    blocked = _serve(arr, *cols, share, c, batch_max, float(batch_timeout_s),
                     mode is Batching.CONTINUOUS, bt, bd, free, start, finish, service, size,
                     bid)  # fmt: skip
    return BatchResult(start, finish, service, size, bid, float(blocked), free)


@nb.njit(cache=True, nogil=True)
def _serve(arr, n_comp, ctx, ncand, look_b, miss_b, share, c, bmax, timeout, greedy,
           bt, bd, free, start, finish, service, size, bid):  # fmt: skip
    n = arr.shape[0]
    nb_ = 0
    slots = free.shape[0]
    nblk = bt.shape[0]
    b = 0
    blocked = 0.0
    i = 0
    while i < n:
        # a blocking job queued before request i takes every stream once they are idle
        while b < nblk and bt[b] <= arr[i]:
            t = bt[b]
            for k in range(slots):
                if free[k] > t:
                    t = free[k]
            t += bd[b]
            for k in range(slots):
                free[k] = t
            blocked += bd[b]
            b += 1
        k = 0
        for s in range(1, slots):
            if free[s] < free[k]:
                k = s
        close = arr[i]
        if not greedy and bmax > 1:
            close = arr[i] + timeout
            last = i + bmax - 1
            if last < n and arr[last] < close:
                close = arr[last]
            if b < nblk and bt[b] < close:
                close = bt[b]  # the queue splits at the next blocking job
        if free[k] > close:
            close = free[k]
        limit = bt[b] if b < nblk else np.inf
        j = i
        tokens = 0.0
        pairs = 0.0
        lb = 0.0
        mb = 0.0
        mbs = 0.0
        while j < n and j - i < bmax and arr[j] <= close and (j == i or arr[j] < limit):
            tokens += n_comp[j] + ncand[j]
            pairs += attention_pairs(n_comp[j], ctx[j], ncand[j])
            lb += look_b[j]
            mb += miss_b[j]
            mbs += miss_b[j] / share[j]
            j += 1
        t_b = batch_time_s(c, float(j - i), tokens, pairs, lb, mb, mbs)
        fin = close + t_b
        for q in range(i, j):
            start[q] = close
            finish[q] = fin
            service[q] = t_b
            size[q] = j - i
            bid[q] = nb_
        nb_ += 1
        free[k] = fin
        i = j
    while b < nblk:  # blocks after the last arrival hold the streams too
        t = bt[b]
        for k in range(slots):
            if free[k] > t:
                t = free[k]
        t += bd[b]
        for k in range(slots):
            free[k] = t
        blocked += bd[b]
        b += 1
    return blocked


def batch_terms(
    q: BatchResult,
    n_computed: np.ndarray,
    ctx_len: np.ndarray,
    n_cand: np.ndarray,
    lookup_bytes: np.ndarray,
    miss_bytes: np.ndarray,
    h2d_share: np.ndarray,
    lat: LatencyModel,
) -> dict[str, float]:
    """Each term of T(B) (``latency.model.TERMS``) summed over a span's batches, seconds.

    The terms of each batch add up to its T(B), so over a span they add up to
    the summed batch times (a request's share of its batch's terms, e.g. for
    a per-request mean, is the batch's terms over its size).
    """
    if len(q.batch_id) == 0:
        return dict.fromkeys(TERMS, 0.0)
    sums, _ = batch_sums(n_computed, ctx_len, n_cand, lookup_bytes, miss_bytes, h2d_share,
                         q.batch_id)  # fmt: skip
    return {k: float(v.sum()) for k, v in lat.batch_terms_s(*sums).items()}
