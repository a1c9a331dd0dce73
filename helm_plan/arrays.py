"""Dense integer views of a trace, built once and shared by every simulator.

Users and items are remapped to dense ids ``0..n-1`` so compiled loops index
flat arrays. Each user's history is laid out contiguously (``hist_values``
from ``user_hist_offsets[u]``) so a request's last ``n`` history tokens are a
slice, and ``hist_end[i]`` is the user's full history length after request i.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    cand_offsets: np.ndarray
    """Start of each request's candidates in ``cand_values`` (n + 1), int64."""
    cand_values: np.ndarray
    """Dense item ids of candidates, int32."""
    n_users: int
    """Number of distinct users."""
    n_items: int
    """Number of distinct items (history and candidates)."""
    user_ids: np.ndarray
    """Original user id of each dense user, int64."""
    item_ids: np.ndarray
    """Original item id of each dense item, int64."""
    latency_ms: np.ndarray | None = None
    """Observed latency per request, if the trace has it."""

    @property
    def n_requests(self) -> int:
        return len(self.ts_s)

    @property
    def n_candidates(self) -> np.ndarray:
        return np.diff(self.cand_offsets).astype(np.int32)

    def history_len(self, max_seq_len: int) -> np.ndarray:
        """Context length L per request, capped at ``max_seq_len``."""
        return np.minimum(self.hist_end, max_seq_len)


def from_table(
    table: pa.Table, *, seed: int = 0, candidate_window_tokens: int = 100_000
) -> TraceArrays:
    """Build dense arrays from a validated canonical table.

    Without a ``candidates`` column, each request's ``n_candidates`` ids are
    drawn (seeded) from the trailing item popularity: uniform positions in the
    last ``candidate_window_tokens`` tokens of the global interaction stream,
    which samples items in proportion to their recent frequency.
    """
    if candidate_window_tokens <= 0:
        raise ConfigError(
            f"candidate_window_tokens must be positive, got {candidate_window_tokens}"
        )
    n = table.num_rows
    ts = table.column("ts_s").to_numpy().astype(np.float64, copy=False)
    raw_user = table.column("user_id").to_numpy()
    ni = table.column("new_items").combine_chunks()
    ni_off = ni.offsets.to_numpy().astype(np.int64)
    ni_off = ni_off - ni_off[0]
    ni_vals = pc.list_flatten(ni).to_numpy().astype(np.int64, copy=False)
    n_new = np.diff(ni_off).astype(np.int32)
    ncand = table.column("n_candidates").to_numpy().astype(np.int64)

    has_cands = "candidates" in table.column_names
    if has_cands:
        ca = table.column("candidates").combine_chunks()
        c_vals_raw = pc.list_flatten(ca).to_numpy().astype(np.int64, copy=False)
    else:
        c_vals_raw = np.zeros(0, np.int64)

    item_ids, inv = np.unique(np.concatenate([ni_vals, c_vals_raw]), return_inverse=True)
    dense_tokens = inv[: len(ni_vals)].astype(np.int32)
    user_ids, user = np.unique(raw_user, return_inverse=True)
    user = user.astype(np.int32)
    n_users = len(user_ids)

    # Per-user contiguous histories: stable sort of tokens by their request's user.
    tok_user = np.repeat(user, n_new)
    order = np.argsort(tok_user, kind="stable")
    hist_values = dense_tokens[order]
    per_user_tokens = np.bincount(tok_user, minlength=n_users).astype(np.int64)
    user_hist_offsets = np.zeros(n_users + 1, np.int64)
    np.cumsum(per_user_tokens, out=user_hist_offsets[1:])
    # hist_end[i] = cumulative new items of request i's user up to and including i.
    req_order = np.argsort(user, kind="stable")
    cs = np.cumsum(n_new[req_order].astype(np.int64))
    first = np.searchsorted(user[req_order], np.arange(n_users))
    base = np.where(first > 0, cs[np.maximum(first - 1, 0)], 0)
    hist_end = np.empty(n, np.int64)
    hist_end[req_order] = cs - base[user[req_order]]

    cand_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(ncand, out=cand_offsets[1:])
    if has_cands:
        cand_values = inv[len(ni_vals) :].astype(np.int32)
    else:
        cand_values = _draw_candidates(
            dense_tokens, ni_off, ncand, len(item_ids), seed, candidate_window_tokens
        )

    lat = table.column("latency_ms").to_numpy() if "latency_ms" in table.column_names else None
    return TraceArrays(
        ts_s=ts,
        user=user,
        n_new=n_new,
        hist_end=hist_end,
        user_hist_offsets=user_hist_offsets,
        hist_values=hist_values,
        cand_offsets=cand_offsets,
        cand_values=cand_values,
        n_users=n_users,
        n_items=len(item_ids),
        user_ids=user_ids,
        item_ids=item_ids,
        latency_ms=lat,
    )


def _draw_candidates(
    tokens: np.ndarray, tok_off: np.ndarray, ncand: np.ndarray, n_items: int, seed: int, window: int
) -> np.ndarray:
    total = int(ncand.sum())
    if total == 0:
        return np.zeros(0, np.int32)
    rng = np.random.default_rng(seed)
    if len(tokens) == 0:
        return rng.integers(0, max(n_items, 1), size=total).astype(np.int32)
    out = np.empty(total, np.int32)
    # Uniform draws come in bounded chunks (the stream is the same as one big draw),
    # so a trace with hundreds of candidates per request never holds them all as floats.
    chunk = 1 << 22
    cand_off = np.zeros(len(ncand) + 1, np.int64)
    np.cumsum(ncand, out=cand_off[1:])
    req = 0
    while req < len(ncand):
        stop = int(np.searchsorted(cand_off, cand_off[req] + chunk, side="right")) - 1
        stop = max(stop, req + 1)
        u = rng.random(int(cand_off[stop] - cand_off[req]))
        _pick_trailing(tokens, tok_off, cand_off, req, stop, window, u, out)
        req = stop
    return out


@nb.njit(cache=True)
def _pick_trailing(tokens, tok_off, cand_off, start, stop, window, u, out):
    n_tok = tokens.shape[0]
    k = 0
    for i in range(start, stop):
        # tokens seen before request i; early requests look ahead a little
        hi = max(tok_off[i], min(window, n_tok))
        lo = max(hi - window, 0)
        for p in range(cand_off[i], cand_off[i + 1]):
            pick = lo + int(u[k] * (hi - lo))
            out[p] = tokens[min(pick, n_tok - 1)]
            k += 1


def window_edges(ts_s: np.ndarray, window_s: float) -> np.ndarray:
    """Request indices that start each ``window_s`` window, plus the end (len = windows + 1)."""
    if not window_s > 0:
        raise ConfigError(f"window_s must be positive, got {window_s}")
    if len(ts_s) == 0:
        return np.zeros(1, np.int64)
    n_win = int(np.floor(ts_s[-1] / window_s)) + 1
    bounds = np.arange(n_win + 1, dtype=np.float64) * window_s
    edges = np.searchsorted(ts_s, bounds, side="left").astype(np.int64)
    edges[-1] = len(ts_s)
    return edges
