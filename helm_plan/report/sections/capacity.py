"""Capacity: the planner's answer, first in the report when analyze planned a fleet.

Nodes and cost per policy × router, the savings with their bootstrap
intervals, a cost-vs-P99 chart of every combination, and the single-node
load curves (tables from :mod:`helm_plan.analyze.capacity`). Left out when
planning was skipped (``--no-capacity``).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import policy_colour, router_symbol
from helm_plan.report.page import Page, f_fixed, f_num, f_pct, f_text, layout, slo_line, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import CAPACITY, CAPACITY_SAVINGS, LOAD_CURVE


def pareto(run: RunData) -> go.Figure | None:
    """USD per day against P99 at the planned fleet, one point per policy × router."""
    cap = run.table(CAPACITY)
    if cap.is_empty():
        return None
    ok = cap.filter(pl.col("nodes").is_not_null())
    if ok.is_empty():
        return None
    fig = go.Figure()
    # colour = policy, symbol = router: the legend lists both, the router entries in grey
    for (pol,) in ok.select("policy").unique(maintain_order=True).iter_rows():
        d = ok.filter(pl.col("policy") == pol)
        fig.add_trace(go.Scatter(
            x=d["usd_per_day"].to_list(), y=d["p99_ms"].to_list(), mode="markers", name=pol,
            hovertext=[f"{pol} behind {r}: {n} nodes"
                       for r, n in zip(d["router"], d["nodes"], strict=True)],
            hovertemplate="%{hovertext}<br>%{x:,.0f} USD/day, P99 %{y:.4g} ms<extra></extra>",
            marker={"size": 11, "color": policy_colour(pol), "line": {"width": 1, "color": "#fff"},
                    "symbol": [router_symbol(r) for r in d["router"]]},
        ))  # fmt: skip
    for (router,) in ok.select("router").unique(maintain_order=True).iter_rows():
        fig.add_trace(go.Scatter(
            x=[None], y=[None], mode="markers", name=f"router {router}", legendgroup="routers",
            marker={"size": 11, "color": "#8a94a0", "symbol": router_symbol(router)},
            hoverinfo="skip",
        ))  # fmt: skip
    slo = run.meta.get("slo_ms")
    if slo:
        slo_line(fig, float(slo), log_y=False)
    return layout(fig, "Cost against P99 at each combination's minimal fleet",
                  xaxis_title="USD per day", yaxis_title="P99 (ms)", hovermode="closest")  # fmt: skip


def load_curves(run: RunData) -> go.Figure | None:
    """One node's P99 against offered QPS, per policy (the MLPerf server-scenario figure)."""
    lc = run.table(LOAD_CURVE)
    if lc.is_empty():
        return None
    fig = go.Figure()
    for (pol,) in lc.select("policy").unique(maintain_order=True).iter_rows():
        d = lc.filter(pl.col("policy") == pol).sort("qps")
        fig.add_trace(go.Scatter(
            x=d["qps"].to_list(), y=d["p99_ms"].to_list(), mode="lines+markers", name=pol,
            line={"color": policy_colour(pol)},
            marker={"symbol": ["circle" if p else "x" for p in d["passes"]], "size": 8},
            customdata=["meets the SLO" if p else "fails the SLO" for p in d["passes"]],
            hovertemplate=f"{pol} at %{{x:,.4g}} QPS: P99 %{{y:.4g}} ms, %{{customdata}}"
                          "<extra></extra>",
        ))  # fmt: skip
    slo = run.meta.get("slo_ms")
    if slo:
        slo_line(fig, float(slo), log_y=True)
    return layout(fig, "One node: P99 against offered load (x: fails the SLO)",
                  xaxis_title="offered QPS (mean)", yaxis_title="P99 (ms)", yaxis_type="log",
                  hovermode="closest")  # fmt: skip


def render(run: RunData, page: Page) -> str | None:
    """The Capacity section; None when planning was skipped (``--no-capacity``)."""
    cap = run.table(CAPACITY)
    if cap.is_empty():
        return None
    m = run.meta
    t, num, pct, fix = f_text, f_num(), f_pct, f_fixed
    answer = "".join(f"<li>{html.escape(s)}</li>" for s in m.get("capacity_answer", []))
    n, f = m.get("operating_nodes"), m.get("per_node_factor")
    op = (f"The sections below analyse one node of the {n}-node best-static fleet: the trace "
          f"scaled ×{f:.3g} by users, one node's share of the planned traffic."
          if n else "No fleet up to the size limit meets the SLO with best static; the "
          "sections below analyse one node of the largest fleet.")  # fmt: skip
    rows = cap.sort(["nodes", "p99_ms"], nulls_last=True).to_dicts()
    cols = [("policy", "policy", t), ("router", "router", t), ("nodes", "nodes", num),
            ("p99_ms", "P99 (ms)", fix(3)), ("p99_ms_one_less", "P99 at N−1 (ms)", fix(3)),
            ("slo_attainment", "attainment", pct(2)), ("usd_per_day", "USD/day", fix(0)),
            ("usd_per_million_requests", "USD per M req", fix(3)),
            ("nodes_saved", "nodes saved vs baseline", num)]  # fmt: skip
    sav = run.table(CAPACITY_SAVINGS)
    scols = [("kind", "comparison", t), ("scope", "with", t), ("a", "A", t), ("b", "against B", t),
             ("nodes_saved", "nodes saved", num), ("lo", "CI low", fix(1)),
             ("hi", "CI high", fix(1)), ("usd_saved_per_day", "USD saved/day", fix(0))]  # fmt: skip
    return (
        f'<div class="verdict"><ul>{answer}</ul></div><p class="lead">{html.escape(op)} '
        "Each row is the fewest nodes meeting the SLO, found by a galloping bracket and "
        "bisection with N − 1 evaluated failing; the baseline is best static behind jsq.</p>"
        + table(rows, cols, highlight="best-static")
        + "<h3>Savings (paired window bootstrap)</h3>"
        + (table(sav.to_dicts(), scols) if not sav.is_empty() else "<p>No comparison applies.</p>")
        + page.figure(pareto(run))
        + page.figure(load_curves(run))
    )
