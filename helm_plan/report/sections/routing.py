"""Routing: every router at the operating fleet under the cheapest policy (with Capacity)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import router_colour
from helm_plan.report.page import Page, f_fixed, f_num, f_pct, f_text, layout, steps, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import CAPACITY, ROUTING, ROUTING_WINDOWS

SAME_R = 1e-9
"""A spread of the nodes' r at most this is none (every node ran the same r)."""


def _ratios_differ(rw: pl.DataFrame) -> bool:
    return not rw.is_empty() and bool((rw["ratio_spread"].fill_null(0.0) > SAME_R).any())


def ratio_spread(run: RunData) -> go.Figure | None:
    """Per-window spread of the nodes' r (max − min), per router; None when it is zero in
    every window (a static policy: every node runs the same r, the chart would be flat)."""
    rw = run.table(ROUTING_WINDOWS)
    if not _ratios_differ(rw):
        return None
    starts = sorted(rw["start_s"].unique().to_list())
    w = float(run.meta.get("window_s") or (starts[1] - starts[0] if len(starts) > 1 else 1.0))
    fig = go.Figure()
    for (router,) in rw.select("router").unique(maintain_order=True).iter_rows():
        d = rw.filter(pl.col("router") == router).sort("start_s")
        x, y = steps(d["start_s"], d["start_s"] + w, d["ratio_spread"])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=router,
                                 line={"color": router_colour(router), "shape": "hv"},
                                 hovertemplate=f"{router}: %{{y:.3f}}<extra></extra>"))  # fmt: skip
    return layout(fig, "Spread of the nodes' r per window (max − min)",
                  xaxis_title="time (s)", yaxis_title="r spread")  # fmt: skip


TITLE = "Routing"
ORDER = 30


def render(run: RunData, page: Page) -> str | None:
    """The Routing section; None when planning was skipped (as Capacity)."""
    if run.table(CAPACITY).is_empty():
        return None
    rt = run.table(ROUTING)
    if rt.is_empty():
        return ('<p class="lead">One node serves the planned traffic, so routing does not apply. '
                "Pass <code>--peak-qps</code> or <code>--scale</code> to plan a fleet.</p>")  # fmt: skip
    t, num, pct, fix = f_text, f_num(), f_pct, f_fixed
    cols = [("router", "router", t), ("policy", "policy", t), ("nodes", "nodes", num),
            ("p99_ms", "P99 (ms)", fix(3)), ("slo_attainment", "attainment", pct(2)),
            ("imbalance_max_mean", "work max/mean", fix(2)), ("imbalance_cv", "work CV", fix(2)),
            ("emb_hit_rate", "EMB hit rate", pct(1)), ("kv_reuse_rate", "KV reuse", pct(1)),
            ("ratio_spread", "r spread", fix(2))]  # fmt: skip
    rw = run.table(ROUTING_WINDOWS)
    spread = page.figure(ratio_spread(run))
    if not spread and not rw.is_empty():
        spread = ('<p class="note">Every node ran the same r in every window under every '
                  "router, so there is no spread of r to chart.</p>")  # fmt: skip
    return (
        '<p class="lead">Every router at the operating fleet under the cheapest policy. Routers '
        "see only what a real one could: backlog estimates, the KV directory and an EMB "
        "locality signal.</p>" + table(rt.to_dicts(), cols) + spread
    )
