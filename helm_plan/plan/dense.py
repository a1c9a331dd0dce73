"""Scaling a trace's dense arrays directly (the same trace :func:`~.scale.scale` makes).

``from_table(scale(table, K))`` held the trace as an Arrow table (history
lists included: about 0.7 KB a request), its K-fold scaled copy, and then
densified that copy in two passes. :func:`scale_arrays` gathers the scaled
trace's arrays straight from the loaded ones: the same rows in the same order
(:func:`~.scale.users_plan` is shared, so times and clones are computed by
the very same operations), dense ids numbered as the dense build numbers them
(ranks of the sorted distinct ids, so a clone's users follow the originals
and a fractional clone's missing items drop out of the ranks), and each
user's history laid out in the scaled request order. The result is equal,
array for array, to densifying the scaled table
(``tests/plan/test_scale_arrays.py``), in one compiled pass over the tokens.
Time scaling, and users scaling by 1, replace the arrival times only and share
every other array.
"""

from __future__ import annotations

import dataclasses
import os

import numba as nb
import numpy as np

from helm_plan._densify import running_tokens
from helm_plan.arrays import TraceArrays
from helm_plan.errors import ConfigError
from helm_plan.io import spans, spill_array
from helm_plan.plan.scale import (
    ScaleBy,
    Scaling,
    check_scaling,
    scaling_info,
    time_scaled,
    users_plan,
)

SPAN = 1 << 20
"""Requests (or tokens, for the item count) a pass handles between two drops of the spilled
tokens' pages."""


def scale_arrays(
    a: TraceArrays,
    factor: float,
    *,
    by: str = "users",
    window_s: float = 10.0,
    seed: int = 0,
    spill_dir: str | os.PathLike[str] | None = None,
    peak_qps_target: float | None = None,
) -> tuple[TraceArrays, Scaling]:
    """``a`` scaled to ``factor`` times its arrival rate, as :func:`~.scale.scale` scales a table.

    Equal to ``from_table(scale(table, factor, ...)[0], seed=seed)`` where
    ``a = from_table(table)``; ``seed`` also seeds the result's implicit
    candidate draws (as that ``from_table`` call did). A new token array (clones
    other than one whole one) lives in a file in ``spill_dir`` when given
    (:func:`helm_plan.io.spill_array`). ``peak_qps_target`` is only recorded (the
    caller solved ``factor`` for it: :func:`~.scale.solve_factor`).
    """
    check_scaling(factor, by, a.n_requests)
    if not a.holds_tokens:
        raise ConfigError("a columns-only load has no tokens to scale",
                          hint="load the trace in full (not sampled) to scale it")  # fmt: skip
    if by == ScaleBy.TIME:
        out = dataclasses.replace(a, ts_s=time_scaled(a.ts_s, factor), candidate_seed=int(seed))
    else:  # the clones' ids come from the original ids, as the table route makes them
        rows, t, uid = users_plan(a.ts_s, a.user_ids[a.user], factor, seed, by=by,
                                  window_s=window_s)  # fmt: skip
        out = _gather(a, rows, t, uid, int(seed), spill_dir)
    # distinct history items, as the table's count of distinct new_items (a bitmap: a
    # bincount would widen every token to int64 first, 8 bytes a token of transient)
    seen = np.zeros(a.n_items, np.bool_)
    for i, j in spans(0, len(a.hist_values), SPAN):
        _mark(a.hist_values[i:j], seen)
    items = int(np.count_nonzero(seen))
    # the dense users are the distinct ids already: no np.unique of a per-request column
    info = scaling_info(str(by), factor, a.ts_s, out.ts_s, a.n_users, out.n_users, items,
                        window_s, peak_qps_target)  # fmt: skip
    return out, info


def _gather(
    a: TraceArrays,
    rows: np.ndarray,
    t: np.ndarray,
    uid: np.ndarray,
    seed: int,
    spill_dir: str | os.PathLike[str] | None,
) -> TraceArrays:
    if len(rows) == a.n_requests and np.array_equal(rows, np.arange(len(rows))):
        # one whole clone in the original order (K = 1): the same users and histories, so
        # every array but the times is shared rather than copied
        return dataclasses.replace(a, ts_s=t, candidate_seed=seed)
    user_ids, user = np.unique(uid, return_inverse=True)
    user = user.astype(np.int32)
    n_new = a.n_new[rows]
    tok_off = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(n_new, out=tok_off[1:])
    n_cand = a.n_cand[rows]
    explicit = a.explicit_candidates
    # a fractional clone alone may leave items out: they leave the ranks too
    used = _used_items(a, rows)
    if used.all():
        remap = np.zeros(0, np.int32)  # empty: ids unchanged
        item_ids = a.item_ids
    else:
        remap = (np.cumsum(used) - 1).astype(np.int32)
        item_ids = a.item_ids[used]
    hist_end, per_user = running_tokens(user, n_new, len(user_ids))
    uoff = np.zeros(len(user_ids) + 1, np.int64)
    np.cumsum(per_user, out=uoff[1:])
    n_tok = int(tok_off[-1])
    hist = (
        np.empty(n_tok, np.int32) if spill_dir is None else spill_array(n_tok, np.int32, spill_dir)
    )
    for i, j in spans(0, len(rows), SPAN):  # each span's pages of spilled tokens dropped after it
        _place_rows(rows[i:j], a.user, a.hist_end, a.n_new, a.user_hist_offsets, a.hist_values,
                    user[i:j], hist_end[i:j], uoff, remap, hist)  # fmt: skip
    if explicit:
        cand_offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(n_cand, out=cand_offsets[1:])
        cand_values = np.empty(int(cand_offsets[-1]), np.int32)
        _gather_cands(rows, a.cand_offsets, a.cand_values, cand_offsets, remap, cand_values)
    else:
        cand_offsets, cand_values = np.zeros(1, np.int64), np.zeros(0, np.int32)
    return dataclasses.replace(
        a, ts_s=t, user=user, n_new=n_new, hist_end=hist_end, user_hist_offsets=uoff,
        hist_values=hist, tok_off=tok_off, n_cand=n_cand, cand_offsets=cand_offsets,
        cand_values=cand_values, n_users=len(user_ids), n_items=len(item_ids),
        user_ids=user_ids, item_ids=item_ids, candidate_seed=seed,
        latency_ms=None if a.latency_ms is None else a.latency_ms[rows],
    )  # fmt: skip


def _used_items(a: TraceArrays, rows: np.ndarray) -> np.ndarray:
    """Which items the requests ``rows`` name (history tokens or explicit candidates)."""
    seen = np.zeros(a.n_requests, np.bool_)
    seen[rows] = True
    if seen.all():  # every request kept (whole clones): every item stays
        return np.ones(a.n_items, np.bool_)
    used = np.zeros(a.n_items, np.bool_)
    for i, j in spans(0, a.n_requests, SPAN):
        _mark_items(seen[i:j], a.user[i:j], a.hist_end[i:j], a.n_new[i:j], a.user_hist_offsets,
                    a.hist_values, used)  # fmt: skip
    if a.explicit_candidates:
        _mark_cands(seen, a.cand_offsets, a.cand_values, used)
    return used


@nb.njit(cache=True)
def _mark(ids, seen):  # noqa: ANN001
    for v in ids:
        seen[v] = True


@nb.njit(cache=True)
def _src(j, user, hist_end, n_new, uoff):  # noqa: ANN001, ANN202
    # request j's new tokens are the last ones of its user's history after it
    return uoff[user[j]] + hist_end[j] - n_new[j]


@nb.njit(cache=True)
def _mark_items(seen, user, hist_end, n_new, uoff, hist, used):  # noqa: ANN001
    for j in range(len(seen)):
        if seen[j]:
            s = _src(j, user, hist_end, n_new, uoff)
            for k in range(n_new[j]):
                used[hist[s + k]] = True


@nb.njit(cache=True)
def _mark_cands(seen, coff, cvals, used):  # noqa: ANN001
    for j in range(len(seen)):
        if seen[j]:
            for k in range(coff[j], coff[j + 1]):
                used[cvals[k]] = True


@nb.njit(cache=True)
def _place_rows(rows, user0, hist_end0, n_new0, uoff0, hist0, user, hist_end, uoff, remap, out):  # noqa: ANN001
    # scaled request i is source request rows[i]: its new tokens move from the end of the
    # source user's history after it to the end of the clone's history after i
    for i in range(len(rows)):
        j = rows[i]
        m = n_new0[j]
        s = _src(j, user0, hist_end0, n_new0, uoff0)
        d = uoff[user[i]] + hist_end[i] - m
        for k in range(m):
            v = hist0[s + k]
            out[d + k] = remap[v] if remap.shape[0] else v


@nb.njit(cache=True)
def _gather_cands(rows, coff0, cvals0, coff, remap, out):  # noqa: ANN001
    for i in range(len(rows)):
        j = rows[i]
        d = coff[i]
        for k in range(coff0[j], coff0[j + 1]):
            v = cvals0[k]
            out[d + k - coff0[j]] = remap[v] if remap.shape[0] else v


__all__ = ["scale_arrays"]
