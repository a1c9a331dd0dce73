"""Routing: every router at the operating fleet under the cheapest policy (with Capacity)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import router_colour
from helm_plan.report.page import Page, f_fixed, f_num, f_pct, f_text, layout, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import CAPACITY, ROUTING, ROUTING_WINDOWS


def ratio_spread(run: RunData) -> go.Figure | None:
    """Per-window spread of the nodes' r (max − min), per router."""
    rw = run.table(ROUTING_WINDOWS)
    if rw.is_empty():
        return None
    fig = go.Figure()
    for (router,) in rw.select("router").unique(maintain_order=True).iter_rows():
        d = rw.filter(pl.col("router") == router).sort("start_s")
        fig.add_trace(go.Scatter(x=d["start_s"].to_list(), y=d["ratio_spread"].to_list(),
                                 mode="lines", name=router,
                                 line={"color": router_colour(router)}))  # fmt: skip
    return layout(fig, "Spread of the nodes' r per window (max − min)",
                  xaxis_title="time (s)", yaxis_title="r spread")  # fmt: skip


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
    return (
        '<p class="lead">Every router at the operating fleet under the cheapest policy. Routers '
        "see only what a real one could: backlog estimates, the KV directory and an EMB "
        "locality signal.</p>" + table(rt.to_dicts(), cols) + page.figure(ratio_spread(run))
    )
