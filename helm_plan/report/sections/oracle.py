"""Oracle timeline: the offline-optimal EMB share r* per window, its flat band and regret grid."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import PALETTE
from helm_plan.report.page import (
    Column,
    Page,
    f_fixed,
    f_num,
    f_pct,
    layout,
    rows,
    steps,
    table,
    tol_text,
)
from helm_plan.report.store import RunData
from helm_plan.report.tables import LABELS, LABELS_GRID


def oracle_timeline(run: RunData) -> go.Figure | None:
    """r* per window, the band of r within the run's tolerance of the best P99, and best static."""
    lab = run.table(LABELS)
    if lab.is_empty():
        return None
    lab = lab.sort("t_start_s")
    t0, t1 = lab["t_start_s"], lab["t_end_s"]
    fig = go.Figure()
    x, hi = steps(t0, t1, lab["flat_hi"])
    fig.add_trace(
        go.Scatter(x=x, y=hi, mode="lines", line={"width": 0, "shape": "hv"},
                   showlegend=False, hoverinfo="skip")
    )  # fmt: skip
    x, lo = steps(t0, t1, lab["flat_lo"])
    fig.add_trace(
        go.Scatter(
            x=x, y=lo, mode="lines", line={"width": 0, "shape": "hv"}, fill="tonexty",
            fillcolor="rgba(79,143,58,0.18)", name=f"within {tol_text(run)} of best P99",
            hoverinfo="skip",
        )
    )  # fmt: skip
    x, r = steps(t0, t1, lab["r_star"])
    fig.add_trace(
        go.Scatter(
            x=x, y=r, mode="lines", name="r* (oracle)",
            line={"color": PALETTE[2], "width": 2, "shape": "hv"},
            hovertemplate="r* = %{y:.2f}<extra></extra>",
        )
    )  # fmt: skip
    bs = run.meta.get("best_static_ratio")
    if bs is not None:
        fig.add_hline(
            y=bs, line={"color": PALETTE[0], "dash": "dash"},
            annotation_text=f"best static r={bs:.2f}", annotation_position="top left",
        )  # fmt: skip
    fig.update_yaxes(range=[-0.02, 1.02])
    return layout(fig, "Oracle ratio per window", xaxis_title="time (s)",
                  yaxis_title="EMB share r")  # fmt: skip


def regret_heatmap(run: RunData) -> go.Figure | None:
    """P99(r)/P99(r*) − 1 over the window × ratio grid the oracle evaluated."""
    g = run.table(LABELS_GRID)
    if g.is_empty():
        return None
    g = g.sort(["window", "ratio"])
    best = g.group_by("window").agg(pl.col("p99_ms").min().alias("best"))
    g = g.join(best, on="window").with_columns(
        (pl.col("p99_ms") / pl.col("best") - 1.0).alias("regret")
    )
    windows = sorted(g["window"].unique().to_list())
    ratios = sorted(g["ratio"].unique().to_list())
    z = []
    for r in ratios:
        row = dict(zip(*g.filter(pl.col("ratio") == r).select("window", "regret"), strict=True))
        z.append([row.get(w) for w in windows])
    fig = go.Figure(
        go.Heatmap(
            x=windows, y=ratios, z=z, colorscale="Viridis", zmin=0, zmax=0.5,
            colorbar={"title": {"text": "regret"}},
            hovertemplate="window %{x}, r=%{y:.2f}: regret %{z:.1%}<extra></extra>",
        )
    )  # fmt: skip
    # analyze's labels hold each window's evaluated ratios, not a common grid: gaps are blank
    return layout(fig, "P99 regret at the ratios the oracle evaluated (0 = optimal)",
                  xaxis_title="window",
                  yaxis_title="EMB share r", hovermode="closest")  # fmt: skip


TITLE = "Oracle timeline"
ORDER = 70


def render(run: RunData, page: Page) -> str:
    """How the labels were made, the two figures and the per-window labels table."""
    cols: list[Column] = [
        ("window", "window", f_num()), ("t_start_s", "start (s)", f_fixed(1)),
        ("n_requests", "requests", f_num()), ("r_star", "r*", f_fixed(3)),
        ("p99_ms", "P99 at r* (ms)", f_fixed(3)), ("slo_attainment", "SLO attainment", f_pct()),
        ("flat_lo", "band low r", f_fixed(2)), ("flat_hi", "band high r", f_fixed(2)),
    ]  # fmt: skip
    if run.meta.get("oracle_warmup") == "carry":
        how = ("each window starting from the caches and queue backlog that the labelled "
               "schedule leaves, resized to r at the boundary")  # fmt: skip
    else:
        k = run.meta.get("oracle_warmup_windows", 1)
        how = f"caches warmed at r on the previous {k} window(s), queue idle at their start"
    return (
        '<p class="lead">The offline-optimal EMB share r* per window (seeded Optuna study, '
        f"{how}). The band holds every r whose P99 is within "
        f"{tol_text(run)} of the best: a wide band means the split hardly matters there.</p>"
        + page.grid(oracle_timeline(run), regret_heatmap(run))
        + table(rows(run.table(LABELS)), cols)
    )
