"""Plotly figure builders: one function per report figure, each reading run tables.

Every builder takes a :class:`~helm_plan.report.store.RunData` and returns a
``plotly.graph_objects.Figure`` or ``None`` when the run lacks the table it
plots. Figures are serialised to JSON by :mod:`helm_plan.report.html`; no
builder touches the network or the file system.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from helm_plan.report.store import RunData

PALETTE = ("#1f4e79", "#c0504d", "#4f8f3a", "#8064a2", "#d08a2c", "#2c9fa8", "#7f7f7f")
POLICY_COLOURS = {
    "best-static": "#1f4e79",
    "emb-max": "#d08a2c",
    "kv-max": "#8064a2",
    "naive-adaptive": "#c0504d",
    "adaptive": "#4f8f3a",
}
_FONT = {"family": "Inter, Segoe UI, Helvetica, Arial, sans-serif", "size": 12, "color": "#1d2733"}


def _layout(fig: go.Figure, title: str, *, height: int = 400, **kw: Any) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        title={"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 14}},
        height=height,
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        font=_FONT,
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0},
        **{"hovermode": "x unified", **kw},
    )
    return fig


def _colour(policy: str, i: int) -> str:
    return POLICY_COLOURS.get(policy, PALETTE[i % len(PALETTE)])


#: Percent ticks with up to two decimals and no trailing zeros: 0%, -0.5%, -1%, -1.5%
#: (a whole-percent format rounds -0.5% and -1.4% both to "-1%").
PCT_TICKS = ".2~%"


def _slo_line(fig: go.Figure, slo: float, *, log_y: bool) -> None:
    """A dotted SLO line labelled "SLO x ms" at its height.

    The line is a shape, placed in data units on any axis. Plotly places
    annotations on a log axis in log10 units, so the label takes log10(slo)
    there (in data units it would sit at 10^slo and stretch the axis).
    """
    fig.add_hline(y=slo, line={"color": "#888", "dash": "dot"})
    fig.add_annotation(
        x=1.0, xref="paper", xanchor="right", y=math.log10(slo) if log_y else slo, yref="y",
        yanchor="bottom", text=f"SLO {slo:g} ms", showarrow=False, font={"color": "#666"},
    )  # fmt: skip


def arrivals(run: RunData) -> go.Figure | None:
    """Arrival rate over time (requests per second per bin)."""
    df = run.table("workload_arrivals")
    if df.is_empty():
        return None
    fig = go.Figure(
        go.Scatter(
            x=df["t_s"].to_list(),
            y=df["qps"].to_list(),
            mode="lines",
            line={"color": PALETTE[0], "width": 1.5},
            fill="tozeroy",
            fillcolor="rgba(31,78,121,0.15)",
            name="arrival rate",
        )
    )
    _add_window_edges(fig, run)
    return _layout(fig, "Arrival rate", xaxis_title="time (s)", yaxis_title="requests / s")


def _add_window_edges(fig: go.Figure, run: RunData) -> None:
    win = run.table("labels")
    if win.is_empty():
        return
    for t in win["t_start_s"].to_list()[1:]:
        fig.add_vline(x=t, line={"color": "#b8c2cc", "width": 1, "dash": "dot"})


def history_lengths(run: RunData) -> go.Figure | None:
    """Histogram of context lengths L per request."""
    df = run.table("workload_history")
    if df.is_empty():
        return None
    labels = [f"{lo}–{hi}" for lo, hi in zip(df["len_lo"], df["len_hi"], strict=True)]
    fig = go.Figure(go.Bar(x=labels, y=df["requests"].to_list(), marker_color=PALETTE[0]))
    return _layout(
        fig, "History length per request", xaxis_title="context length L (tokens)",
        yaxis_title="requests", hovermode="closest",
    )  # fmt: skip


def popularity(run: RunData) -> go.Figure | None:
    """Item popularity: lookups by rank, log-log."""
    df = run.table("workload_popularity")
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
    return _layout(
        fig, "Item popularity", xaxis_title="item rank", yaxis_title="history occurrences",
        hovermode="closest",
    )  # fmt: skip


def _curve(run: RunData, kinds: tuple[str, ...], title: str, ytitle: str) -> go.Figure | None:
    df = run.table("curves")
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
    knees = run.table("curve_knees")
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
    return _layout(fig, title, xaxis_title="cache size (GiB, log scale, up to the whole pool)",
                   yaxis_title=ytitle, hovermode="closest")  # fmt: skip


def emb_curve(run: RunData) -> go.Figure | None:
    """EMB hit rate against EMB cache bytes, whole trace and per window, with the knee."""
    return _curve(run, ("emb", "emb_kv0"), "EMB hit rate vs cache size", "hit rate")


def kv_curve(run: RunData) -> go.Figure | None:
    """KV reuse (share of context tokens reused) against KV cache bytes, with the knee."""
    return _curve(run, ("kv",), "KV reuse vs cache size", "reused token share")


QUEUE_TERM = "queue_wait"
"""The latency_terms row that is time in the queue, not service (plotted apart)."""


def latency_terms(run: RunData) -> go.Figure | None:
    """Mean service time per request broken into model terms, per policy (stacked bars).

    Queue wait is not service: it is drawn as a separate marker per policy, so
    the stacked bar is the mean service time and bar + marker the mean sojourn.
    """
    df = run.table("latency_terms")
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
    return _layout(
        fig, "Mean service time by term (queue wait apart)", barmode="stack",
        xaxis_title="policy", yaxis_title="mean per request (ms)", hovermode="closest",
    )  # fmt: skip


def oracle_timeline(run: RunData) -> go.Figure | None:
    """r* per window, the band of r within 2% of the best P99, and the best static line."""
    lab = run.table("labels")
    if lab.is_empty():
        return None
    t = ((lab["t_start_s"] + lab["t_end_s"]) / 2).to_list()
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=t, y=lab["flat_hi"].to_list(), mode="lines", line={"width": 0},
                   showlegend=False, hoverinfo="skip")
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=t, y=lab["flat_lo"].to_list(), mode="lines", line={"width": 0}, fill="tonexty",
            fillcolor="rgba(79,143,58,0.18)", name="within 2% of best P99",
        )
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=t, y=lab["r_star"].to_list(), mode="lines+markers", name="r* (oracle)",
            line={"color": PALETTE[2], "width": 2}, marker={"size": 7},
        )
    )  # fmt: skip
    bs = run.meta.get("best_static_ratio")
    if bs is not None:
        fig.add_hline(
            y=bs, line={"color": PALETTE[0], "dash": "dash"},
            annotation_text=f"best static r={bs:.2f}", annotation_position="top left",
        )  # fmt: skip
    fig.update_yaxes(range=[-0.02, 1.02])
    return _layout(fig, "Oracle ratio per window", xaxis_title="time (s)",
                   yaxis_title="EMB share r")  # fmt: skip


def regret_heatmap(run: RunData) -> go.Figure | None:
    """P99(r)/P99(r*) − 1 over the window × ratio grid the oracle evaluated."""
    g = run.table("labels_grid")
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
    return _layout(fig, "P99 regret at the ratios the oracle evaluated (0 = optimal)",
                   xaxis_title="window",
                   yaxis_title="EMB share r", hovermode="closest")  # fmt: skip


def _per_policy(df: pl.DataFrame, y: str, *, line: dict[str, Any], **kw: Any) -> go.Figure:
    """One line per policy of column ``y`` against window mid-time, in table order."""
    fig = go.Figure()
    for i, p in enumerate(dict.fromkeys(df["policy"].to_list())):
        sub = df.filter(pl.col("policy") == p).sort("window")
        fig.add_trace(
            go.Scatter(
                x=((sub["t_start_s"] + sub["t_end_s"]) / 2).to_list(), y=sub[y].to_list(),
                name=p, line={**line, "color": _colour(p, i)}, **kw,
            )
        )  # fmt: skip
    return fig


def policy_p99(run: RunData) -> go.Figure | None:
    """Per-window P99 of every policy, with the SLO."""
    df = run.table("policy_windows")
    if df.is_empty():
        return None
    fig = _per_policy(df, "p99_ms", mode="lines+markers", line={"width": 1.8}, marker={"size": 5})
    slo = run.meta.get("slo_ms")
    if slo:
        _slo_line(fig, float(slo), log_y=True)
    fig.update_yaxes(type="log")
    return _layout(fig, "P99 per window by policy", xaxis_title="time (s)",
                   yaxis_title="P99 sojourn (ms)", height=400)  # fmt: skip


def static_sweep(run: RunData) -> go.Figure | None:
    """Whole-trace P99 against the static ratio r, with the best static r marked."""
    df = run.table("static_sweep")
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
        _slo_line(fig, float(slo), log_y=False)
    return _layout(fig, "Whole-trace P99 vs static split", xaxis_title="EMB share r",
                   yaxis_title="P99 sojourn (ms)", hovermode="closest")  # fmt: skip


def policy_ratio(run: RunData) -> go.Figure | None:
    """The EMB share each policy ran with, per window."""
    df = run.table("policy_windows")
    if df.is_empty():
        return None
    fig = _per_policy(df, "ratio", mode="lines", line={"shape": "hv"})
    fig.update_yaxes(range=[-0.02, 1.02])
    return _layout(fig, "EMB share per window by policy", xaxis_title="time (s)",
                   yaxis_title="EMB share r")  # fmt: skip


def sensitivity(run: RunData) -> go.Figure | None:
    """Regret and |r − r*| distributions per policy (box plots over windows)."""
    df = run.table("sensitivity")
    if df.is_empty():
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=("regret P99(r)/P99(r*) − 1", "|r − r*|"))
    for i, p in enumerate(dict.fromkeys(df["policy"].to_list())):
        sub = df.filter(pl.col("policy") == p)
        c = _colour(p, i)
        fig.add_trace(go.Box(y=sub["regret"].to_list(), name=p, marker_color=c,
                             boxpoints="all", jitter=0.4, pointpos=0, showlegend=False), 1, 1)  # fmt: skip
        fig.add_trace(go.Box(y=sub["abs_dr"].to_list(), name=p, marker_color=c,
                             boxpoints="all", jitter=0.4, pointpos=0, showlegend=False), 1, 2)  # fmt: skip
    fig.update_yaxes(tickformat=PCT_TICKS, row=1, col=1)
    return _layout(fig, "Sensitivity over windows", height=380, hovermode="closest")


def flatness(run: RunData) -> go.Figure | None:
    """Width of the band of r within 2% of the best P99, per window."""
    lab = run.table("labels")
    if lab.is_empty():
        return None
    fig = go.Figure(
        go.Bar(x=lab["window"].to_list(), y=lab["flat_width"].to_list(), marker_color=PALETTE[2])
    )
    fig.update_yaxes(range=[0, 1.02])
    return _layout(fig, "Flatness: width of the near-optimal band", xaxis_title="window",
                   yaxis_title="range of r within 2% (Δr)", hovermode="closest")  # fmt: skip


def adaptivity(run: RunData) -> go.Figure | None:
    """Value of adaptivity: P99 reduction against best static with its bootstrap CI."""
    df = run.table("adaptivity")
    if df.is_empty():
        return None
    pol = df["policy"].to_list()
    red = df["p99_reduction"].to_list()
    lo = df["ci_low"].to_list()
    hi = df["ci_high"].to_list()
    fig = go.Figure(
        go.Bar(
            x=pol, y=red, marker_color=[_colour(p, i) for i, p in enumerate(pol)],
            error_y={"type": "data", "symmetric": False,
                     "array": [h - r for h, r in zip(hi, red, strict=True)],
                     "arrayminus": [r - low for r, low in zip(red, lo, strict=True)]},
        )
    )  # fmt: skip
    fig.add_hline(y=0, line={"color": "#555"})
    fig.update_yaxes(tickformat=PCT_TICKS)
    return _layout(fig, "P99 reduction vs best static (bootstrap CI over windows)",
                   yaxis_title="P99 reduction", hovermode="closest")  # fmt: skip


SECTIONS: dict[str, tuple[Any, ...]] = {
    "workload": (arrivals, history_lengths, popularity),
    "curves": (emb_curve, kv_curve),
    "latency": (latency_terms,),
    "oracle": (oracle_timeline, regret_heatmap),
    "policies": (policy_p99, policy_ratio, static_sweep),
    "sensitivity": (sensitivity, flatness, adaptivity),
}
"""Figure builders per report section, in page order."""
