"""Latency model: the service-time formula, its coefficients and the mean time per term."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import PALETTE
from helm_plan.report.page import Page, f_num, f_text, layout, rows, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import LATENCY_COEF, LATENCY_TERMS

QUEUE_TERM = "queue_wait"
"""The latency_terms row that is time in the queue, not service (plotted apart)."""


def latency_terms(run: RunData) -> go.Figure | None:
    """Mean service time per request broken into model terms, per policy (stacked bars).

    Queue wait is not service: it is drawn as a separate marker per policy, so
    the stacked bar is the mean service time and bar + marker the mean sojourn.
    """
    df = run.table(LATENCY_TERMS)
    if df.is_empty():
        return None
    policies = list(dict.fromkeys(df["policy"].to_list()))
    fig = go.Figure()
    terms = [t for t in dict.fromkeys(df["term"].to_list()) if t != QUEUE_TERM]
    for i, term in enumerate(terms):
        sub = df.filter(pl.col("term") == term)
        by = dict(zip(sub["policy"], sub["mean_ms"], strict=True))
        fig.add_trace(
            go.Bar(
                x=policies, y=[by.get(p, 0.0) for p in policies], name=term,
                marker_color=PALETTE[i % len(PALETTE)],
                hovertemplate=f"{term}: %{{y:.4g}} ms<extra>%{{x}}</extra>",
            )
        )  # fmt: skip
    wait = df.filter(pl.col("term") == QUEUE_TERM)
    if not wait.is_empty():
        by = dict(zip(wait["policy"], wait["mean_ms"], strict=True))
        fig.add_trace(
            go.Scatter(
                x=policies, y=[by.get(p) for p in policies], mode="markers",
                name="mean queue wait (not service)",
                marker={"symbol": "line-ew-open", "size": 28, "color": "#1d2733"},
                hovertemplate="queue wait: %{y:.4g} ms<extra>%{x}</extra>",
            )
        )  # fmt: skip
    return layout(
        fig, "Mean service time by term (queue wait apart)", barmode="stack",
        xaxis_title="policy", yaxis_title="mean per request (ms)", hovermode="closest",
    )  # fmt: skip


def render(run: RunData, page: Page) -> str:
    """The formula with its source, the coefficients and the per-term figure."""
    coef = rows(run.table(LATENCY_COEF))
    return (
        '<p class="lead">Service time S = t0 + lookups·row/hbm_bw + [miss]·h2d_latency + '
        "misses·(host_gather + row/h2d_bw) + a·n + b·n·L + c·M + d·M·L. "
        f"Source: {html.escape(str(run.meta.get('latency_source', '–')))}</p>"
        + table(
            coef,
            [
                ("name", "coefficient", f_text),
                ("value", "value", f_num(4)),
                ("unit", "unit", f_text),
            ],
        )  # fmt: skip
        + page.grid(latency_terms(run))
    )
