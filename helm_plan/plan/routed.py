"""One node of a fleet, as the router fed it: the traffic every one-node section analyses.

The capacity answer is a fleet of N nodes behind a router; one node of it
does not see "1/N of the users" but whatever the router sent it (JSQ spreads
a user's requests over nodes and smooths each node's load). :func:`routed_node`
cuts that node's requests out of the planned trace, exactly as the cluster
simulator served them:

- the requests routed to the node, at their arrival times (the window grid is
  dense from t = 0, so the node's windows are the fleet's);
- each user's **whole** history: a request's context includes the items its
  user added at requests served elsewhere, as in the cluster (the per-user
  token layout is shared, not copied; a request's ``n_new`` counts the tokens
  since the user's previous request *on this node*);
- the candidates the fleet run drew for these requests from the fleet's own
  interaction stream, written out as explicit candidates (a draw of the
  node's own stream would differ); a draw made before the stream held any
  token is kept as ``-1`` and, as in the fleet, looked up nowhere;
- the users' first-request flags of the planned trace (a user new to the
  node is not a new user).

A node replayed from it with a static split reproduces the fleet's node to
the last digit (``tests/plan/test_routed.py`` pins it), so the P99 the
Policies section shows for the fleet's split is the P99 the plan measured on
that node.
"""

from __future__ import annotations

import dataclasses
import os

import numba as nb
import numpy as np

from helm_plan.arrays import TraceArrays
from helm_plan.cache import _kernels as K
from helm_plan.cache.core import Workload
from helm_plan.errors import ConfigError
from helm_plan.io import spill_array
from helm_plan.pool import Pool
from helm_plan.sim.context import NodeContext, prepare_context


def routed_arrays(
    a: TraceArrays, rows: np.ndarray, spill_dir: str | os.PathLike[str] | None = None
) -> TraceArrays:
    """The requests ``rows`` (ascending) of ``a`` as a trace of their own (module docstring).

    Drawn candidates become explicit ones (``n_cand`` ids a request, int32); their array
    lives in a file in ``spill_dir`` when given (:func:`helm_plan.io.spill_array`).
    """
    rows = np.asarray(rows, np.int64)
    if len(rows) == 0:
        raise ConfigError("the router sent this node no requests",
                          hint="analyse a node that served traffic")  # fmt: skip
    if np.any(np.diff(rows) <= 0) or rows[0] < 0 or rows[-1] >= a.n_requests:
        raise ConfigError("routed rows must be distinct request indices in arrival order",
                          hint="pass np.flatnonzero(result.node == k)")  # fmt: skip
    user = a.user[rows]
    hist_end = a.hist_end[rows]
    n_new = _since_previous(user, hist_end)
    tok_off = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(n_new, out=tok_off[1:])
    n_cand = a.n_cand[rows]
    cand_offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(n_cand, out=cand_offsets[1:])
    n_c = int(cand_offsets[-1])
    cand = np.empty(n_c, np.int32) if spill_dir is None else spill_array(n_c, np.int32, spill_dir)
    if a.explicit_candidates:
        _gather(rows, a.cand_offsets, a.cand_values, cand_offsets, cand)
    else:
        ring, top = K.new_ring(a.candidate_window_tokens, int(a.tok_off[-1]))
        _draw(rows, a.user, a.hist_end, a.user_hist_offsets, a.hist_values, a.tok_off, a.n_cand,
              int(a.candidate_seed), int(a.candidate_window_tokens), ring, top, cand_offsets,
              cand)  # fmt: skip
    return dataclasses.replace(
        a, ts_s=a.ts_s[rows], user=user, n_new=n_new.astype(np.int32), hist_end=hist_end,
        tok_off=tok_off, n_cand=n_cand, explicit_candidates=True, cand_offsets=cand_offsets,
        cand_values=cand, latency_ms=None if a.latency_ms is None else a.latency_ms[rows],
    )  # fmt: skip


def node_rows(node_of: np.ndarray, node: int, n_requests: int) -> np.ndarray:
    """The requests routed to ``node`` under ``node_of`` (one node per request, as
    :attr:`~helm_plan.cluster.ClusterResult.node`)."""
    node_of = np.asarray(node_of)
    if len(node_of) != n_requests:
        raise ConfigError(f"{len(node_of)} routed requests for a trace of {n_requests}",
                          hint="pass the fleet run's node per request")  # fmt: skip
    return np.flatnonzero(node_of == node)


def routed_node(
    planned: NodeContext, rows: np.ndarray, spill_dir: str | os.PathLike[str] | None = None
) -> NodeContext:
    """The requests ``rows`` of ``planned`` (one node's, :func:`node_rows`) on the same GPU,
    model, latency model and pool."""
    rows = np.asarray(rows, np.int64)
    sub = routed_arrays(planned.arrays, rows, spill_dir)
    wl = Workload(sub, planned.workload.keys, planned.workload.max_seq_len,
                  planned.workload.kv_slide_chunk)  # fmt: skip
    ctx = prepare_context(wl, planned.gpu, planned.model, planned.latency,
                          pool=Pool(planned.pool_bytes, planned.pool_source),
                          latency_profile=planned.latency_profile)  # fmt: skip
    return dataclasses.replace(ctx, first_visit=planned.first_visit[rows])


def _since_previous(user: np.ndarray, hist_end: np.ndarray) -> np.ndarray:
    """Per request: history tokens added since the same user's previous request here."""
    order = np.lexsort((np.arange(len(user)), user))
    he = hist_end[order].astype(np.int64)
    u = user[order]
    first = np.ones(len(u), np.bool_)
    first[1:] = u[1:] != u[:-1]
    prev = np.zeros(len(u), np.int64)
    prev[1:] = he[:-1]
    out = np.empty(len(u), np.int64)
    out[order] = he - np.where(first, 0, prev)
    return out


@nb.njit(cache=True)
def _gather(rows, coff0, cvals0, coff, out):  # noqa: ANN001
    for j in range(rows.shape[0]):
        i = rows[j]
        d = coff[j]
        for k in range(coff0[i], coff0[i + 1]):
            out[d + k - coff0[i]] = cvals0[k]


@nb.njit(cache=True)
def _draw(rows, user, hist_end, uoff, hist, tok_off, ncand, seed, window, ring, top, coff, out):  # noqa: ANN001
    # the fleet's draws: request i's candidates from the planned trace's stream as of i
    # (ring_fill follows a jump by refilling, so only the routed requests are visited)
    for j in range(rows.shape[0]):
        i = rows[j]
        m = ncand[i]
        if m == 0:
            continue
        K.ring_fill(i, ring, top, tok_off, user, hist_end, uoff, hist)
        d = coff[j]
        for k in range(m):
            out[d + k] = K.draw_candidate(seed, i, k, tok_off, ring, window)


__all__ = ["node_rows", "routed_arrays", "routed_node"]
