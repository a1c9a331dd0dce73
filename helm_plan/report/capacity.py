"""The report's Capacity and Routing sections (tables from :mod:`helm_plan.analyze.capacity`).

Capacity comes first in the report: the planner's answer (nodes and cost per
policy × router, the savings with their bootstrap intervals), a cost-vs-P99
chart of every combination, and the single-node load curves. Routing compares
the routers at the operating fleet under the cheapest policy.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.figures import _colour, _layout, _slo_line
from helm_plan.report.store import RunData

ROUTER_COLOURS = {"jsq": "#6c757d", "affinity": "#2a9d8f", "kv-overlap": "#e9c46a",
                  "helm": "#d62828", "round-robin": "#adb5bd", "random": "#8d99ae",
                  "p2c": "#457b9d"}  # fmt: skip


def pareto(run: RunData) -> go.Figure | None:
    """USD per day against P99 at the planned fleet, one point per policy × router."""
    cap = run.table("capacity")
    if cap.is_empty():
        return None
    ok = cap.filter(pl.col("nodes").is_not_null())
    if ok.is_empty():
        return None
    fig = go.Figure()
    for i, (pol,) in enumerate(ok.select("policy").unique(maintain_order=True).iter_rows()):
        d = ok.filter(pl.col("policy") == pol)
        fig.add_trace(go.Scatter(
            x=d["usd_per_day"].to_list(), y=d["p99_ms"].to_list(), mode="markers", name=pol,
            hovertext=[f"{pol} behind {r}: {n} nodes"
                       for r, n in zip(d["router"], d["nodes"], strict=True)],
            marker={"size": 10, "color": _colour(pol, i)},
        ))  # fmt: skip
    slo = run.meta.get("slo_ms")
    if slo:
        _slo_line(fig, float(slo), log_y=False)
    return _layout(fig, "Cost against P99 at each combination's minimal fleet",
                   xaxis_title="USD per day", yaxis_title="P99 (ms)", hovermode="closest")  # fmt: skip


def load_curves(run: RunData) -> go.Figure | None:
    """One node's P99 against offered QPS, per policy (the MLPerf server-scenario figure)."""
    lc = run.table("load_curve")
    if lc.is_empty():
        return None
    fig = go.Figure()
    for i, (pol,) in enumerate(lc.select("policy").unique(maintain_order=True).iter_rows()):
        d = lc.filter(pl.col("policy") == pol).sort("qps")
        fig.add_trace(go.Scatter(
            x=d["qps"].to_list(), y=d["p99_ms"].to_list(), mode="lines+markers", name=pol,
            line={"color": _colour(pol, i)},
            marker={"symbol": ["circle" if p else "x" for p in d["passes"]], "size": 8},
        ))  # fmt: skip
    slo = run.meta.get("slo_ms")
    if slo:
        _slo_line(fig, float(slo), log_y=True)
    return _layout(fig, "One node: P99 against offered load (x: fails the SLO)",
                   xaxis_title="offered QPS (mean)", yaxis_title="P99 (ms)", yaxis_type="log",
                   hovermode="closest")  # fmt: skip


def ratio_spread(run: RunData) -> go.Figure | None:
    """Per-window spread of the nodes' r (max − min), per router."""
    rw = run.table("routing_windows")
    if rw.is_empty():
        return None
    fig = go.Figure()
    for (router,) in rw.select("router").unique(maintain_order=True).iter_rows():
        d = rw.filter(pl.col("router") == router).sort("start_s")
        fig.add_trace(go.Scatter(x=d["start_s"].to_list(), y=d["ratio_spread"].to_list(),
                                 mode="lines", name=router,
                                 line={"color": ROUTER_COLOURS.get(router, "#333")}))  # fmt: skip
    return _layout(fig, "Spread of the nodes' r per window (max − min)",
                   xaxis_title="time (s)", yaxis_title="r spread")  # fmt: skip


def capacity_body(run: RunData, fig_div, table, fmts: dict[str, Any]) -> str:
    """The Capacity section (``fig_div(fig)`` embeds a figure, ``table`` renders rows); the
    report leaves it and Routing out when planning was skipped (``--no-capacity``)."""
    cap = run.table("capacity")
    m = run.meta
    t, num, pct, fix = fmts["text"], fmts["num"], fmts["pct"], fmts["fixed"]
    answer = "".join(f"<li>{html.escape(s)}</li>" for s in m.get("capacity_answer", []))
    o = m.get("operating") or {}
    op = (f"The sections below analyse node {o.get('node')} of the {o.get('nodes')}-node "
          f"best-static fleet behind {o.get('router')}: the requests the router sent it "
          f"({o.get('share', 0):.1%} of the planned traffic).")  # fmt: skip
    rows = cap.sort(["nodes", "p99_ms"], nulls_last=True).to_dicts()
    cols = [("policy", "policy", t), ("router", "router", t), ("nodes", "nodes", num),
            ("p99_ms", "P99 (ms)", fix(3)), ("p99_ms_one_less", "P99 at N−1 (ms)", fix(3)),
            ("slo_attainment", "attainment", pct(2)), ("usd_per_day", "USD/day", fix(0)),
            ("usd_per_million_requests", "USD per M req", fix(3)),
            ("nodes_saved", "nodes saved vs baseline", num)]  # fmt: skip
    sav = run.table("capacity_savings")
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
        + fig_div(pareto(run))
        + fig_div(load_curves(run))
    )


def routing_body(run: RunData, fig_div, table, fmts: dict[str, Any]) -> str:
    """The Routing section."""
    rt = run.table("routing")
    if rt.is_empty():
        return ('<p class="lead">One node serves the planned traffic, so routing does not apply. '
                "Pass <code>--peak-qps</code> or <code>--scale</code> to plan a fleet.</p>")  # fmt: skip
    t, num, pct, fix = fmts["text"], fmts["num"], fmts["pct"], fmts["fixed"]
    cols = [("router", "router", t), ("policy", "policy", t), ("nodes", "nodes", num),
            ("p99_ms", "P99 (ms)", fix(3)), ("slo_attainment", "attainment", pct(2)),
            ("imbalance_max_mean", "work max/mean", fix(2)), ("imbalance_cv", "work CV", fix(2)),
            ("emb_hit_rate", "EMB hit rate", pct(1)), ("kv_reuse_rate", "KV reuse", pct(1)),
            ("ratio_spread", "r spread", fix(2))]  # fmt: skip
    return (
        '<p class="lead">Every router at the operating fleet under the cheapest policy. Routers '
        "see only what a real one could: backlog estimates, the KV directory and an EMB "
        "locality signal.</p>" + table(rt.to_dicts(), cols) + fig_div(ratio_spread(run))
    )
