"""Capacity: the planner's answer, first in the report when analyze planned a fleet.

The one operating point every later section analyses, nodes and cost per GPU
× policy × router, the savings with their bootstrap intervals, the
cost–latency frontier of each GPU's cheapest fleet (N − 1 .. N + 2), a
cost-vs-P99 chart of every combination, and the single-node load curves with
the analysed node marked (tables from :mod:`helm_plan.analyze.capacity`).
Left out when planning was skipped (``--no-capacity``).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import policy_colour, router_symbol
from helm_plan.report.page import Page, f_fixed, f_num, f_pct, f_text, layout, slo_line, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import CAPACITY, CAPACITY_FRONTIER, CAPACITY_SAVINGS, LOAD_CURVE


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


DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
"""Line dash per GPU kind (colour is the policy)."""


def load_curves(run: RunData) -> go.Figure | None:
    """One node's P99 against offered QPS, per GPU and policy (the MLPerf server-scenario
    figure), with the analysed node of the operating fleet marked."""
    lc = run.table(LOAD_CURVE)
    if lc.is_empty():
        return None
    fig = go.Figure()
    gpus = lc.select("gpu").unique(maintain_order=True)["gpu"].to_list()
    for gpu, pol in lc.select("gpu", "policy").unique(maintain_order=True).iter_rows():
        d = lc.filter((pl.col("policy") == pol) & (pl.col("gpu") == gpu)).sort("qps")
        name = f"{gpu} {pol}" if len(gpus) > 1 else pol
        fig.add_trace(go.Scatter(
            x=d["qps"].to_list(), y=d["p99_ms"].to_list(), mode="lines+markers", name=name,
            line={"color": policy_colour(pol), "dash": DASHES[gpus.index(gpu) % len(DASHES)]},
            marker={"symbol": ["circle" if p else "x" for p in d["passes"]], "size": 8},
            customdata=["meets the SLO" if p else "fails the SLO" for p in d["passes"]],
            hovertemplate=f"{name} at %{{x:,.4g}} QPS: P99 %{{y:.4g}} ms, %{{customdata}}"
                          "<extra></extra>",
        ))  # fmt: skip
    op = run.meta.get("operating") or {}
    if op.get("mean_qps") and op.get("p99_ms"):
        fig.add_trace(go.Scatter(
            x=[op["mean_qps"]], y=[op["p99_ms"]], mode="markers", name="analysed node",
            marker={"symbol": "star", "size": 14, "color": "#111"},
            hovertemplate=(f"node {op['node']} of the {op['nodes']} × {op['gpu']} fleet behind "
                           f"{op['router']} (r = {op['ratio']:.2f}): %{{x:,.4g}} QPS, P99 "
                           "%{y:.4g} ms<extra></extra>"),
        ))  # fmt: skip
    slo = run.meta.get("slo_ms")
    if slo:
        slo_line(fig, float(slo), log_y=True)
    return layout(fig, "One node alone: P99 against offered load (x: fails; ★: the analysed node, "
                  "fed by the router)",
                  xaxis_title="offered QPS (mean)", yaxis_title="P99 (ms)", yaxis_type="log",
                  hovermode="closest")  # fmt: skip


def frontier(run: RunData) -> go.Figure | None:
    """Each GPU's cheapest combination at N − 1 .. N + 2 nodes: USD per day against P99."""
    fr = run.table(CAPACITY_FRONTIER)
    if fr.is_empty():
        return None
    fig = go.Figure()
    for (gpu,) in fr.select("gpu").unique(maintain_order=True).iter_rows():
        d = fr.filter(pl.col("gpu") == gpu).sort("nodes")
        pol, router = d["policy"][0], d["router"][0]
        fig.add_trace(go.Scatter(
            x=d["usd_per_day"].to_list(), y=d["p99_ms"].to_list(), mode="lines+markers+text",
            name=f"{gpu} ({pol}, {router})", text=[f"{n}" for n in d["nodes"]],
            textposition="top center",
            line={"color": policy_colour(pol)},
            marker={"size": 10, "symbol": ["circle" if p else "x" for p in d["passes"]]},
            customdata=[[n, a] for n, a in zip(d["nodes"], d["slo_attainment"], strict=True)],
            hovertemplate=(f"{gpu}: %{{customdata[0]}} nodes, P99 %{{y:.4g}} ms, attainment "
                           "%{customdata[1]:.2%}, %{x:,.0f} USD/day<extra></extra>"),
        ))  # fmt: skip
    slo = run.meta.get("slo_ms")
    if slo:
        slo_line(fig, float(slo), log_y=True)
    return layout(fig, "Cost against P99: each GPU's cheapest fleet at N − 1 .. N + 2 nodes "
                  "(x: fails the SLO)", xaxis_title="USD per day", yaxis_title="P99 (ms)",
                  yaxis_type="log", hovermode="closest")  # fmt: skip


def _operating(run: RunData) -> str:
    o = run.meta.get("operating") or {}
    if not o:
        return ""
    fleet = (f"the {o['nodes']}-node {o['gpu']} fleet (best static r = {o['ratio']:.2f} on "
             f"every node, behind {o['router']})")  # fmt: skip
    if not o["meets"]:
        fleet = (f"the largest fleet considered, {o['nodes']} × {o['gpu']}, which does not meet "
                 f"the SLO (best static r = {o['ratio']:.2f}, behind {o['router']})")  # fmt: skip
    return (f"The sections below analyse one operating point: node {o['node']} of {fleet}, the "
            f"node with the highest P99, fed exactly the requests the router sent it "
            f"({o['share']:.1%} of the planned traffic: {o['mean_qps']:,.0f} req/s mean, "
            f"{o['peak_qps']:,.0f} in its busiest window). In that fleet its P99 is "
            f"{o['p99_ms']:.4g} ms with {o['slo_attainment']:.2%} within the SLO; the fleet's is "
            f"{o['fleet_p99_ms']:.4g} ms. Every one-node section replays this node on the same "
            "pool.")  # fmt: skip


TITLE = "Capacity"
ORDER = 20


def render(run: RunData, page: Page) -> str | None:
    """The Capacity section; None when planning was skipped (``--no-capacity``)."""
    cap = run.table(CAPACITY)
    if cap.is_empty():
        return None
    t, num, pct, fix = f_text, f_num(), f_pct, f_fixed
    op = _operating(run)
    rows = cap.sort(["usd_per_day", "nodes", "p99_ms"], nulls_last=True).to_dicts()
    cols = [("gpu", "GPU", t), ("policy", "policy", t), ("router", "router", t),
            ("nodes", "nodes", num),
            ("p99_ms", "P99 (ms)", fix(3)), ("p99_ms_one_less", "P99 at N−1 (ms)", fix(3)),
            ("slo_attainment", "attainment", pct(2)), ("usd_per_day", "USD/day", fix(0)),
            ("usd_per_million_requests", "USD per M req", fix(3)),
            ("nodes_saved", "nodes saved vs baseline", num)]  # fmt: skip
    sav = run.table(CAPACITY_SAVINGS)
    scols = [("gpu", "GPU", t), ("kind", "comparison", t), ("scope", "with", t), ("a", "A", t),
             ("b", "against B", t),
             ("nodes_saved", "nodes saved", num), ("lo", "CI low", fix(1)),
             ("hi", "CI high", fix(1)), ("usd_saved_per_day", "USD saved/day", fix(0))]  # fmt: skip
    return (
        f'<p class="lead">{html.escape(op)}</p><p class="lead">Each row is the fewest nodes '
        "meeting the SLO, from a first guess (one node's load curve, then the last router's "
        "answer) confirmed by simulation: N passes and N − 1 fails; the baseline is best "
        "static behind jsq. The plan's answer heads the Summary.</p>"
        + table(rows, cols, highlight="best-static")
        + "<h3>Savings (paired window bootstrap)</h3>"
        + (table(sav.to_dicts(), scols) if not sav.is_empty() else "<p>No comparison applies.</p>")
        + page.figure(frontier(run))
        + page.figure(pareto(run))
        + page.figure(load_curves(run))
    )
