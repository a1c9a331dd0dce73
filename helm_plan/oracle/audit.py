"""How far analyze's cheaper search lands from the exhaustive grid, window by window.

:func:`audit_search` walks a trace as the carry oracle does (``warmup="carry"``):
at every window it searches ``r*`` with the labels' own search and, from the same
carried node (forks of it), evaluates every ratio of an exhaustive grid; then the
node carries on at the search's ``r*``. Both answers therefore see the same past,
and the table says per window whether the search's ``r*`` lies in the grid's flat
band and how much P99 it gives away (its regret on the grid, exact: ``r*`` is on
the lattice the grid evaluates).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import polars as pl

from helm_plan.oracle.carry import _search_window
from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.search import best_of
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.step import NodeRunner


def audit_search(
    ctx: NodeContext, ncfg: NodeConfig, ocfg: OracleConfig, grid_step: float = 0.01,
    grid: bool = False,
) -> pl.DataFrame:  # fmt: skip
    """One row per window with requests: the search's and the exhaustive grid's answers.

    Columns: window, requests, r_star, n_evals (the search's evaluations), grid_r_star,
    grid_lo, grid_hi (the grid's flat band at ``ocfg.flat_tol``), in_band, regret
    (P99 at the search's ``r*`` over the grid's best, minus 1), grid_evals.
    """
    exhaustive = dataclasses.replace(ocfg, grid_step=grid_step)
    node = NodeRunner(ctx, dataclasses.replace(ncfg, refill="lazy"))
    rows: list[dict[str, Any]] = []

    def row_of(w: int, evals: dict, full: dict, prev: float | None) -> dict[str, Any]:
        r, _, lo, hi = best_of(evals, ocfg.flat_tol, prev)
        return {"window": w, "r_star": r, "lo": lo, "hi": hi, "evals": evals}

    for w in range(node.n_windows):
        if node.edges[w + 1] == node.edges[w]:
            node.step(node.ratio if node.ratio == node.ratio else 0.0)
            continue
        ref, _, _ = _search_window(node, w, exhaustive, row_of, grid=False)
        got, after, _ = _search_window(node, w, ocfg, row_of, grid=grid)
        r = got["r_star"]
        p = ref["evals"][r][0]
        best = min(e[0] for e in ref["evals"].values())
        rows.append({
            "window": w, "requests": int(node.edges[w + 1] - node.edges[w]), "r_star": r,
            "n_evals": len(got["evals"]), "grid_r_star": ref["r_star"], "grid_lo": ref["lo"],
            "grid_hi": ref["hi"], "in_band": bool(ref["lo"] - 1e-9 <= r <= ref["hi"] + 1e-9),
            "regret": float(p / best - 1.0) if np.isfinite(p) and best > 0 else float("nan"),
            "grid_evals": len(ref["evals"]),
        })  # fmt: skip
        if after is None:
            node.step(r)
        else:
            node = after
    return pl.DataFrame(rows)
