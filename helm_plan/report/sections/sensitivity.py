"""Sensitivity: regret and |r − r*| over windows, flatness, and the value of adaptivity with its CI."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from helm_plan.report.colours import PALETTE, policy_colour
from helm_plan.report.page import (
    PCT_TICKS,
    Column,
    Page,
    f_num,
    f_pct,
    f_text,
    layout,
    rows,
    table,
    tol_text,
)
from helm_plan.report.store import RunData
from helm_plan.report.tables import ADAPTIVITY, LABELS, SENSITIVITY


def sensitivity(run: RunData) -> go.Figure | None:
    """Regret and |r − r*| distributions per policy (box plots over windows)."""
    df = run.table(SENSITIVITY)
    if df.is_empty():
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=("regret P99(r)/P99(r*) − 1", "|r − r*|"))
    for p in dict.fromkeys(df["policy"].to_list()):
        sub = df.filter(pl.col("policy") == p)
        c = policy_colour(p)
        fig.add_trace(go.Box(y=sub["regret"].to_list(), name=p, marker_color=c,
                             boxpoints="all", jitter=0.4, pointpos=0, showlegend=False), 1, 1)  # fmt: skip
        fig.add_trace(go.Box(y=sub["abs_dr"].to_list(), name=p, marker_color=c,
                             boxpoints="all", jitter=0.4, pointpos=0, showlegend=False), 1, 2)  # fmt: skip
    fig.update_yaxes(tickformat=PCT_TICKS, row=1, col=1)
    return layout(fig, "Sensitivity over windows", height=380, hovermode="closest")


def flatness(run: RunData) -> go.Figure | None:
    """Width of the band of r within the run's tolerance of the best P99, per window."""
    lab = run.table(LABELS)
    if lab.is_empty():
        return None
    fig = go.Figure(
        go.Bar(x=lab["window"].to_list(), y=lab["flat_width"].to_list(), marker_color=PALETTE[2])
    )
    fig.update_yaxes(range=[0, 1.02])
    return layout(fig, "Flatness: width of the near-optimal band", xaxis_title="window",
                  yaxis_title=f"range of r within {tol_text(run)} (Δr)", hovermode="closest")  # fmt: skip


def adaptivity(run: RunData) -> go.Figure | None:
    """Value of adaptivity: P99 reduction against best static with its bootstrap CI."""
    df = run.table(ADAPTIVITY)
    if df.is_empty():
        return None
    pol = df["policy"].to_list()
    red = df["p99_reduction"].to_list()
    lo = df["ci_low"].to_list()
    hi = df["ci_high"].to_list()
    fig = go.Figure(
        go.Bar(
            x=pol, y=red, marker_color=[policy_colour(p) for p in pol],
            error_y={"type": "data", "symmetric": False,
                     "array": [h - r for h, r in zip(hi, red, strict=True)],
                     "arrayminus": [r - low for r, low in zip(red, lo, strict=True)]},
        )
    )  # fmt: skip
    fig.add_hline(y=0, line={"color": "#555"})
    fig.update_yaxes(tickformat=PCT_TICKS)
    return layout(fig, "P99 reduction vs best static (bootstrap CI over windows)",
                  yaxis_title="P99 reduction", hovermode="closest")  # fmt: skip


TITLE = "Sensitivity"
ORDER = 100


def render(run: RunData, page: Page) -> str:
    """The value-of-adaptivity table and the three sensitivity figures."""
    cols: list[Column] = [
        ("policy", "policy", f_text), ("p99_reduction", "P99 reduction vs best static", f_pct()),
        ("ci_low", "CI low", f_pct()), ("ci_high", "CI high", f_pct()),
        ("confidence", "confidence", f_pct(0)), ("n_boot", "bootstrap resamples", f_num()),
    ]  # fmt: skip
    return (
        '<p class="lead">A window\'s P99 rests on few tail samples and P99(r) is often flat near '
        "the optimum, so every comparison is reported with its ratio distance |r − r*|, its regret "
        "P99(r)/P99(r*) − 1, the flatness of the curve, and a bootstrap confidence interval over "
        "windows for the value of adaptivity.</p>"
        + table(rows(run.table(ADAPTIVITY)), cols)
        + page.grid(sensitivity(run), flatness(run), adaptivity(run))
    )
