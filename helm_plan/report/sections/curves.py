"""Cache curves: each cache's hit rate against its size (exact LRU stack distances), with knees."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import PALETTE
from helm_plan.report.page import Page, f_fixed, f_gib, f_pct, f_text, layout, rows, table
from helm_plan.report.store import RunData
from helm_plan.report.tables import CURVE_KNEES, CURVES


def _curve(run: RunData, kinds: tuple[str, ...], title: str, ytitle: str) -> go.Figure | None:
    df = run.table(CURVES)
    if df.is_empty():
        return None
    df = df.filter(pl.col("kind").is_in(list(kinds)))
    if df.is_empty():
        return None
    fig = go.Figure()
    main = kinds[0]
    per = df.filter((pl.col("kind") == main) & (pl.col("window") >= 0))
    for k, w in enumerate(sorted(per["window"].unique().to_list())):
        sub = per.filter(pl.col("window") == w).sort("capacity_bytes")
        fig.add_trace(
            go.Scatter(
                x=(sub["capacity_bytes"] / 2**30).to_list(), y=sub["hit_rate"].to_list(),
                mode="lines", line={"color": "rgba(120,134,150,0.35)", "width": 1},
                name="per window", legendgroup="win", showlegend=k == 0,
                hovertemplate=f"window {w}<br>%{{x:.3g}} GiB: %{{y:.3f}}<extra></extra>",
            )
        )  # fmt: skip
    names = {"emb": "whole trace", "kv": "whole trace", "emb_kv0": "whole trace, no KV cache"}
    for i, kind in enumerate(kinds):
        whole = df.filter((pl.col("kind") == kind) & (pl.col("window") < 0)).sort("capacity_bytes")
        if whole.is_empty():
            continue
        fig.add_trace(
            go.Scatter(
                x=(whole["capacity_bytes"] / 2**30).to_list(), y=whole["hit_rate"].to_list(),
                mode="lines", name=names.get(kind, kind),
                line={"color": PALETTE[0] if i == 0 else PALETTE[4], "width": 2.5 if i == 0 else 1.8,
                      "dash": "solid" if i == 0 else "dash"},
            )
        )  # fmt: skip
    knees = run.table(CURVE_KNEES)
    if not knees.is_empty():
        kn = knees.filter(
            (pl.col("kind") == main)
            & (pl.col("window") < 0)
            & pl.col("capacity_bytes").is_not_null()
        )
        if not kn.is_empty():
            fig.add_trace(
                go.Scatter(
                    x=(kn["capacity_bytes"] / 2**30).to_list(), y=kn["hit_rate"].to_list(),
                    mode="markers", marker={"size": 11, "color": PALETTE[1], "symbol": "diamond"},
                    name="knee",
                )
            )  # fmt: skip
    fig.update_yaxes(range=[0, 1.02])
    fig.update_xaxes(type="log")  # the capacities are log-spaced (helm_plan.cache.curves)
    return layout(fig, title, xaxis_title="cache size (GiB, log scale, up to the whole pool)",
                  yaxis_title=ytitle, hovermode="closest")  # fmt: skip


def emb_curve(run: RunData) -> go.Figure | None:
    """EMB hit rate against EMB cache bytes, whole trace and per window, with the knee."""
    return _curve(run, ("emb", "emb_kv0"), "EMB hit rate vs cache size", "hit rate")


def kv_curve(run: RunData) -> go.Figure | None:
    """KV reuse (share of context tokens reused) against KV cache bytes, with the knee."""
    return _curve(run, ("kv",), "KV reuse vs cache size", "reused token share")


TITLE = "Cache curves"
ORDER = 50


def render(run: RunData, page: Page) -> str:
    """The knees table and the two curves."""
    knees = (
        rows(run.table(CURVE_KNEES).filter(pl.col("window") < 0))
        if not run.table(CURVE_KNEES).is_empty()
        else []
    )
    curves = run.table(CURVES)
    worst = not curves.is_empty() and (curves["kind"] == "emb_kv0").any()
    worst_text = (
        "<em>no KV cache</em> is the worst case where every request recomputes its whole history."
        if worst
        else "the worst case with no KV cache (every request recomputes its whole history) was "
        "not measured: its lookup stream is the longest by far; <code>[curves] worst_case = "
        "true</code> in a plan file adds it."
    )
    return (
        '<p class="lead">Hit rate of each cache alone against its size (exact LRU stack '
        "distances). The knee is where extra bytes stop paying. The EMB stream depends on KV "
        f"misses: <em>whole trace</em> fixes the KV share at the curves' ratio, {worst_text}"
        "</p>"
        + table(
            knees,
            [
                ("kind", "curve", f_text),
                ("capacity_bytes", "knee (GiB)", f_gib),
                ("pool_fraction", "share of pool", f_pct()),
                ("hit_rate", "rate at knee", f_fixed(3)),
            ],
        )  # fmt: skip
        + page.grid(emb_curve(run), kv_curve(run))
    )
