"""Dense integer views of a trace, built once and shared by every simulator.

Users and items are remapped to dense ids ``0..n-1`` so compiled loops index
flat arrays. Each user's history is laid out contiguously (``hist_values``
from ``user_hist_offsets[u]``) so a request's last ``n`` history tokens are a
slice, and ``hist_end[i]`` is the user's full history length after request i.
The same tokens in request order (request ``i``'s from ``tok_off[i]``) are the
global interaction stream implicit candidates are drawn from
(:func:`helm_plan.cache._kernels.draw_candidate`). That stream is not stored,
since a second copy of every token would be the largest array of all: a
replay keeps its last ``candidate_window_tokens`` in a ring filled from the
histories (:func:`helm_plan.cache._kernels.ring_fill`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from helm_plan import trace
from helm_plan._densify import BATCH_ROWS, Batches, densify, table_batches
from helm_plan.config import require_positive
from helm_plan.errors import ConfigError


@dataclass(frozen=True)
class TraceArrays:
    """A trace as dense numpy arrays (one entry per request unless noted)."""

    ts_s: np.ndarray
    """Arrival times, float64 seconds, non-decreasing."""
    user: np.ndarray
    """Dense user id per request, int32."""
    n_new: np.ndarray
    """Number of new history items per request, int32."""
    hist_end: np.ndarray
    """User's full history length after the request (tokens), int64."""
    user_hist_offsets: np.ndarray
    """Start of each dense user's history in ``hist_values`` (n_users + 1), int64."""
    hist_values: np.ndarray
    """Dense item ids of every user's history, contiguous per user, int32."""
    tok_off: np.ndarray
    """Start of each request's new items in the request-order token stream (n + 1), int64."""
    n_cand: np.ndarray
    """Candidates scored per request, int64."""
    explicit_candidates: bool
    """True when the trace lists candidate ids (``cand_values``); else they are drawn."""
    cand_offsets: np.ndarray
    """Start of each request's explicit candidates in ``cand_values`` (n + 1), int64."""
    cand_values: np.ndarray
    """Dense item ids of explicit candidates, int32 (empty when drawn)."""
    n_users: int
    """Number of distinct users."""
    n_items: int
    """Number of distinct items (history and candidates)."""
    user_ids: np.ndarray
    """Original user id of each dense user, int64."""
    item_ids: np.ndarray
    """Original item id of each dense item, int64."""
    candidate_seed: int = 0
    """Seed of the implicit candidate draws."""
    candidate_window_tokens: int = 100_000
    """Implicit candidates come from this many most recent tokens before each request."""
    latency_ms: np.ndarray | None = None
    """Observed latency per request, if the trace has it."""

    @property
    def n_requests(self) -> int:
        return len(self.ts_s)

    @property
    def holds_tokens(self) -> bool:
        """False for a columns-only load (:mod:`helm_plan.cache.sampled`): nothing to replay."""
        # a routed node's share (plan.routed) names only a prefix of some users' histories
        toks = int(self.tok_off[-1]) <= len(self.hist_values)
        return toks and len(self.cand_values) == int(self.cand_offsets[-1])

    def history_len(self, max_seq_len: int) -> np.ndarray:
        """Context length L per request, capped at ``max_seq_len``."""
        return np.minimum(self.hist_end, max_seq_len)


def from_table(
    table: pa.Table, *, seed: int = 0, candidate_window_tokens: int = 100_000
) -> TraceArrays:
    """Build dense arrays from a validated canonical table.

    Without a ``candidates`` column, each request's ``n_candidates`` ids are
    drawn (seeded) from the trailing item popularity when the caches replay it:
    uniform positions in the last ``candidate_window_tokens`` tokens of the
    global interaction stream **before** the request, which samples items in
    proportion to their recent frequency and never looks ahead.
    """
    check_window(candidate_window_tokens)
    return _build(table_batches(table), table.column_names, seed, candidate_window_tokens)


def from_file(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    candidate_window_tokens: int = 100_000,
    batch_rows: int = BATCH_ROWS,
    spill_dir: str | os.PathLike[str] | None = None,
) -> TraceArrays:
    """Read, validate and densify a trace file batch by batch.

    The same arrays as ``from_table(trace.read(path))`` (timestamps rebased the
    same way), but the file is streamed twice instead of held: peak memory is the
    arrays themselves (4 bytes per history token, about 50 per request) plus one
    batch, where reading the table first costs its Arrow copy as well. With
    ``spill_dir`` the history tokens live in a file there instead of memory
    (:func:`helm_plan.io.spill_array`; the kernels drop their pages between windows).
    """
    check_window(candidate_window_tokens)
    names, checked, id_lists = file_batches(path, batch_rows)
    return _build(checked, names, seed, candidate_window_tokens, id_batches=id_lists,
                  spill_dir=spill_dir)  # fmt: skip


def file_batches(
    path: str | os.PathLike[str], batch_rows: int = BATCH_ROWS
) -> tuple[list[str], Batches, Batches]:
    """A trace file's columns, and its two passes: every column validated, then the id lists."""
    names = trace.column_names(path)
    lists = [c for c in ("new_items", "candidates") if c in names]

    def checked() -> Iterator[pa.Table]:  # pass 1 validates every column
        return trace.iter_batches(path, batch_rows=batch_rows)

    def id_lists() -> Iterator[pa.Table]:  # pass 2 re-reads only the id lists it maps
        return trace.iter_batches(path, columns=lists, batch_rows=batch_rows, check=False)

    return names, checked, id_lists


def _build(
    batches: Batches,
    names: list[str],
    seed: int,
    candidate_window_tokens: int,
    id_batches: Batches | None = None,
    spill_dir: str | os.PathLike[str] | None = None,
) -> TraceArrays:
    fields = densify(
        batches,
        has_candidates="candidates" in names,
        has_latency="latency_ms" in names,
        id_batches=id_batches,
        spill_dir=spill_dir,
    )
    return TraceArrays(
        **fields, candidate_seed=int(seed), candidate_window_tokens=int(candidate_window_tokens)
    )


def check_window(candidate_window_tokens: int) -> None:
    """Refuse a non-positive implicit-candidate window."""
    if candidate_window_tokens <= 0:
        raise ConfigError(
            f"candidate_window_tokens must be positive, got {candidate_window_tokens}",
            hint="set candidate_window_tokens > 0",
        )


def max_windows(n_requests: int) -> int:
    """Most windows :func:`window_edges` will lay out for ``n_requests`` requests."""
    return 10 * n_requests + 1_000_000


def window_edges(ts_s: np.ndarray, window_s: float) -> np.ndarray:
    """Request indices that start each ``window_s`` window, plus the end (len = windows + 1).

    Windows are dense from t = 0, empty ones included, so their number follows
    the time span, not the requests. A span that needs more than
    :func:`max_windows` windows (tiny ``window_s``, or requests far apart) is
    refused with a clear error instead of allocating by the span.
    """
    require_positive("window_s", window_s)
    if len(ts_s) == 0:
        return np.zeros(1, np.int64)
    n_win_f = np.floor(ts_s[-1] / window_s) + 1
    if n_win_f > max_windows(len(ts_s)):
        raise ConfigError(
            f"window_s {window_s:g} cuts the trace's {ts_s[-1]:,.6g} s span into "
            f"{n_win_f:,.0f} windows for {len(ts_s):,} requests",
            hint=f"raise --window-s to at least {ts_s[-1] / max_windows(len(ts_s)):.3g} s "
            "(or shorten the trace's idle gaps)",
        )
    n_win = int(n_win_f)
    bounds = np.arange(n_win + 1, dtype=np.float64) * window_s
    edges = np.searchsorted(ts_s, bounds, side="left").astype(np.int64)
    edges[-1] = len(ts_s)
    return edges
