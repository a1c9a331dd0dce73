"""Workload: what the trace asks of one GPU (statistics, arrivals, context lengths, item skew)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from helm_plan.inspect import LABELS as STAT_LABELS
from helm_plan.report.colours import PALETTE
from helm_plan.report.page import Page, f_num, f_text, human_bytes, layout, pct_text, steps, table
from helm_plan.report.store import RunData
from helm_plan.report.summary import stats_dict
from helm_plan.report.tables import (
    LABELS,
    WORKLOAD_ARRIVALS,
    WORKLOAD_HISTORY,
    WORKLOAD_POPULARITY,
)


def _stat_value(key: str, v: Any) -> str:
    if key.endswith("_bytes") and isinstance(v, int | float) and v == v:
        return human_bytes(float(v))
    if key == "cold_share" and isinstance(v, float):
        return pct_text(v)
    return f_num(4)(v)


def arrivals(run: RunData) -> go.Figure | None:
    """Arrival rate over time (requests per second per bin, a step per bin)."""
    df = run.table(WORKLOAD_ARRIVALS)
    if df.is_empty():
        return None
    bin_s = float(df["t_s"][1] - df["t_s"][0]) if df.height > 1 else 1.0
    x, y = steps(df["t_s"], df["t_s"] + bin_s, df["qps"])
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=y,
            mode="lines",
            line={"color": PALETTE[0], "width": 1.5, "shape": "hv"},
            fill="tozeroy",
            fillcolor="rgba(31,78,121,0.15)",
            name="arrival rate",
        )
    )
    _add_window_edges(fig, run)
    return layout(fig, "Arrival rate", xaxis_title="time (s)", yaxis_title="requests / s")


def _add_window_edges(fig: go.Figure, run: RunData) -> None:
    win = run.table(LABELS)
    if win.is_empty():
        return
    # the shapes add_vline makes, set in one assignment: add_vline re-validates every shape
    # already there, so 400 windows (a 1.24M-request trace) took 33 of the report's 36 s
    line = {"color": "#b8c2cc", "width": 1, "dash": "dot"}
    edges = [{"type": "line", "x0": t, "x1": t, "xref": "x", "y0": 0, "y1": 1,
              "yref": "y domain", "line": line} for t in win["t_start_s"].to_list()[1:]]  # fmt: skip
    fig.update_layout(shapes=[*fig.layout.shapes, *edges])


def history_lengths(run: RunData) -> go.Figure | None:
    """Histogram of context lengths L per request."""
    df = run.table(WORKLOAD_HISTORY)
    if df.is_empty():
        return None
    labels = [f"{lo}–{hi}" for lo, hi in zip(df["len_lo"], df["len_hi"], strict=True)]
    fig = go.Figure(go.Bar(x=labels, y=df["requests"].to_list(), marker_color=PALETTE[0]))
    return layout(
        fig, "History length per request", xaxis_title="context length L (tokens)",
        yaxis_title="requests", hovermode="closest",
    )  # fmt: skip


def popularity(run: RunData) -> go.Figure | None:
    """Item popularity: lookups by rank, log-log."""
    df = run.table(WORKLOAD_POPULARITY)
    if df.is_empty():
        return None
    fig = go.Figure(
        go.Scatter(
            x=df["rank"].to_list(), y=df["count"].to_list(), mode="lines+markers",
            marker={"size": 4}, line={"color": PALETTE[1]}, name="items",
        )
    )  # fmt: skip
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return layout(
        fig, "Item popularity", xaxis_title="item rank", yaxis_title="history occurrences",
        hovermode="closest",
    )  # fmt: skip


TITLE = "Workload"
ORDER = 40


def render(run: RunData, page: Page) -> str:
    """The statistics table and the three workload figures."""
    st = stats_dict(run)
    rows = [{"k": STAT_LABELS.get(k, k.replace("_", " ")), "v": _stat_value(k, v)}
            for k, v in st.items()]  # fmt: skip
    return (
        '<p class="lead">What the trace asks of one GPU: arrivals, context lengths and item skew.</p>'
        + table(rows, [("k", "statistic", f_text), ("v", "value", f_num(4))])
        + page.grid(arrivals(run), history_lengths(run), popularity(run))
    )
