"""Latency model: the service-time formula, its coefficients and the mean time per term."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from helm_plan.report.colours import PALETTE, policy_colour
from helm_plan.report.page import Page, f_num, f_text, layout, rows, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import LATENCY_COEF, LATENCY_TERMS

QUEUE_TERM = "queue_wait"
"""The latency_terms row that is time in the queue, not service (plotted apart)."""


def latency_terms(run: RunData) -> go.Figure | None:
    """Mean service time per request broken into model terms, per policy (stacked bars).

    Queue wait is not service, and it can be orders of magnitude larger (an
    overloaded node): it gets its own panel and axis on the right, so the
    stacked bars on the left stay readable as the mean service time.
    """
    df = run.table(LATENCY_TERMS)
    if df.is_empty():
        return None
    policies = list(dict.fromkeys(df["policy"].to_list()))
    wait = df.filter(pl.col("term") == QUEUE_TERM)
    if wait.is_empty():
        fig = go.Figure()
    else:
        fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.14,
                            subplot_titles=("service, by term", "queue wait"))  # fmt: skip
    terms = [t for t in dict.fromkeys(df["term"].to_list()) if t != QUEUE_TERM]
    for i, term in enumerate(terms):
        sub = df.filter(pl.col("term") == term)
        by = dict(zip(sub["policy"], sub["mean_ms"], strict=True))
        fig.add_trace(
            go.Bar(
                x=policies, y=[by.get(p, 0.0) for p in policies], name=term,
                marker_color=PALETTE[i % len(PALETTE)],
                hovertemplate=f"{term}: %{{y:.4g}} ms<extra>%{{x}}</extra>",
            ),
            **({} if wait.is_empty() else {"row": 1, "col": 1}),
        )  # fmt: skip
    if not wait.is_empty():
        by = dict(zip(wait["policy"], wait["mean_ms"], strict=True))
        fig.add_trace(
            go.Bar(
                x=policies, y=[by.get(p) for p in policies], name="mean queue wait",
                marker_color=[policy_colour(p) for p in policies], showlegend=False,
                hovertemplate="queue wait: %{y:.4g} ms<extra>%{x}</extra>",
            ),
            row=1, col=2,
        )  # fmt: skip
        fig.update_yaxes(title_text="mean per request (ms)", row=1, col=1)
        fig.update_yaxes(title_text="ms", row=1, col=2)
        layout(fig, "Mean time per request (queue wait apart)", barmode="stack",
               hovermode="closest")  # fmt: skip
        return fig.update_layout(margin_t=70)  # room for the panel titles under the title
    return layout(
        fig, "Mean service time by term (queue wait apart)", barmode="stack",
        xaxis_title="policy", yaxis_title="mean per request (ms)", hovermode="closest",
    )  # fmt: skip


TITLE = "Latency model"
ORDER = 60


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
