"""Policies: every policy's whole-trace P99 on one node, per window and against the static split."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import PALETTE, policy_colour
from helm_plan.report.page import (
    Column,
    Page,
    f_fixed,
    f_pct,
    f_text,
    layout,
    rows,
    slo_line,
    steps,
    table,
)
from helm_plan.report.regimes import regimes_body
from helm_plan.report.store import RunData
from helm_plan.report.tables import POLICIES, POLICY_WINDOWS, STATIC_SWEEP


def _per_policy(df: pl.DataFrame, y: str, fmt: str, *, line: dict[str, Any]) -> go.Figure:
    """One step line per policy of column ``y`` over its windows, in table order."""
    fig = go.Figure()
    for p in dict.fromkeys(df["policy"].to_list()):
        sub = df.filter(pl.col("policy") == p).sort("window")
        x, v = steps(sub["t_start_s"], sub["t_end_s"], sub[y])
        fig.add_trace(
            go.Scatter(
                x=x, y=v, mode="lines", name=p,
                line={**line, "shape": "hv", "color": policy_colour(p)},
                hovertemplate=f"{p}: %{{y:{fmt}}}<extra></extra>",
            )
        )  # fmt: skip
    return fig


def policy_p99(run: RunData) -> go.Figure | None:
    """Per-window P99 of every policy, with the SLO."""
    df = run.table(POLICY_WINDOWS)
    if df.is_empty():
        return None
    fig = _per_policy(df, "p99_ms", ".4g", line={"width": 1.8})
    slo = run.meta.get("slo_ms")
    if slo:
        slo_line(fig, float(slo), log_y=True)
    fig.update_yaxes(type="log")
    return layout(fig, "P99 per window by policy", xaxis_title="time (s)",
                  yaxis_title="P99 sojourn (ms)", height=400)  # fmt: skip


def static_sweep(run: RunData) -> go.Figure | None:
    """Whole-trace P99 against the static ratio r, with the best static r marked."""
    df = run.table(STATIC_SWEEP)
    if df.is_empty():
        return None
    df = df.sort("ratio")
    fig = go.Figure(
        go.Scatter(
            x=df["ratio"].to_list(), y=df["p99_ms"].to_list(), mode="lines+markers",
            line={"color": PALETTE[0]}, marker={"size": 6}, name="static r",
            hovertemplate="r = %{x:.2f}: whole-trace P99 %{y:.4g} ms<extra></extra>",
        )
    )  # fmt: skip
    bs = run.meta.get("best_static_ratio")
    if bs is not None:
        row = df.filter(pl.col("ratio") == bs)
        if not row.is_empty():
            fig.add_trace(
                go.Scatter(
                    x=[bs], y=[row["p99_ms"][0]], mode="markers", name="best static",
                    marker={"size": 13, "color": PALETTE[1], "symbol": "star"},
                    hovertemplate="best static r = %{x:.2f}: P99 %{y:.4g} ms<extra></extra>",
                )
            )  # fmt: skip
    slo = run.meta.get("slo_ms")
    if slo:
        slo_line(fig, float(slo), log_y=False)
    return layout(fig, "Whole-trace P99 vs static split", xaxis_title="EMB share r",
                  yaxis_title="P99 sojourn (ms)", hovermode="closest")  # fmt: skip


def policy_ratio(run: RunData) -> go.Figure | None:
    """The EMB share each policy ran with, per window."""
    df = run.table(POLICY_WINDOWS)
    if df.is_empty():
        return None
    fig = _per_policy(df, "ratio", ".2f", line={})
    fig.update_yaxes(range=[-0.02, 1.02])
    return layout(fig, "EMB share per window by policy", xaxis_title="time (s)",
                  yaxis_title="EMB share r")  # fmt: skip


TITLE = "Policies"
ORDER = 80


def render(run: RunData, page: Page) -> str:
    """The policies table and the per-window and static-sweep figures."""
    cols: list[Column] = [
        ("policy", "policy", f_text), ("p99_ms", "P99 (ms)", f_fixed(3)),
        ("slo_attainment", "SLO attainment", f_pct(2)), ("mean_ratio", "mean r", f_fixed(3)),
        ("mean_abs_dr", "mean |r − r*|", f_fixed(3)), ("median_regret", "median regret", f_pct()),
        ("emb_hit_rate", "EMB hit rate", f_pct()), ("kv_reuse_rate", "KV reuse", f_pct()),
    ]  # fmt: skip
    return (
        '<p class="lead">Whole-trace P99 sojourn (queue wait + service) of each policy. '
        "best-static: the single r minimising whole-trace P99; emb-max / kv-max: the whole pool to "
        "one cache; naive-adaptive: the oracle schedule with eager (blocking) refill; adaptive: the "
        "oracle schedule with throttled background refill.</p>"
        + table(rows(run.table(POLICIES)), cols, highlight="adaptive")
        + page.grid(policy_p99(run), policy_ratio(run), static_sweep(run))
        + regimes_body(run, page)
    )
