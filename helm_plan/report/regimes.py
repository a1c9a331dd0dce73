"""Per-regime figures in the report: P99 and SLO attainment of each policy in each regime span.

Read from the run store's ``regimes`` table (:func:`helm_plan.sim.regime_figures.regime_table`,
written by analyze's policies stage): one row per policy x regime, the measured requests
arriving in that regime's spans. A pooled P99 is set by the regime with the worst tail, so
a policy can win overall and lose in one regime; this section shows which. Nothing here
when the trace records no regime spans.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.colours import policy_colour
from helm_plan.report.page import (
    Column,
    Page,
    f_fixed,
    f_num,
    f_pct,
    f_text,
    layout,
    slo_line,
    table,
)
from helm_plan.report.store import RunData
from helm_plan.report.tables import REGIMES

ORDER = ("best-static", "oracle", "adaptive", "controller", "naive-adaptive", "emb-max", "kv-max")
"""Policies in the order the section lists them (the issue's four first)."""


def _rows(run: RunData) -> pl.DataFrame:
    df = run.table(REGIMES)
    if df.is_empty():
        return df
    rank = {p: i for i, p in enumerate(ORDER)}
    return df.with_columns(
        pl.col("policy").replace_strict(rank, default=len(ORDER)).alias("_rank")
    ).sort(["start_s", "_rank"])


def regimes_summary(run: RunData) -> list[dict[str, Any]]:
    """summary.json's ``regimes`` list: regime, policy, requests, p99_ms, slo_attainment."""
    df = _rows(run)
    if df.is_empty():
        return []
    keep = ("regime", "policy", "requests", "p99_ms", "slo_attainment")
    out = []
    for r in df.select(keep).iter_rows(named=True):
        out.append({k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()})
    return out


def regime_figure(run: RunData) -> go.Figure | None:
    """Grouped bars: each policy's P99 per regime, with the SLO line."""
    df = _rows(run)
    if df.is_empty():
        return None
    regimes = list(dict.fromkeys(df["regime"].to_list()))
    fig = go.Figure()
    for p in dict.fromkeys(df["policy"].to_list()):
        d = df.filter(pl.col("policy") == p)
        p99 = dict(zip(d["regime"].to_list(), d["p99_ms"].to_list(), strict=True))
        att = dict(zip(d["regime"].to_list(), d["slo_attainment"].to_list(), strict=True))
        fig.add_trace(
            go.Bar(
                x=regimes, y=[p99.get(r) for r in regimes], name=p,
                marker_color=policy_colour(p),
                customdata=[att.get(r) for r in regimes],
                hovertemplate="%{x}: P99 %{y:.3f} ms, SLO attainment %{customdata:.2%}"
                f"<extra>{p}</extra>",
            )
        )  # fmt: skip
    slo = run.meta.get("slo_ms")
    if isinstance(slo, int | float) and slo > 0:
        slo_line(fig, float(slo), log_y=False)
    return layout(fig, "P99 per regime", xaxis_title="regime (trace's spans)",
                   yaxis_title="P99 sojourn (ms)", barmode="group", hovermode="closest")  # fmt: skip


def regimes_body(run: RunData, page: Page) -> str:
    """The per-regime table and figure ("" when the trace records no regime spans)."""
    df = _rows(run)
    if df.is_empty():
        return ""
    cols: list[Column] = [
        ("regime", "regime", f_text), ("policy", "policy", f_text),
        ("requests", "requests", f_num()), ("p99_ms", "P99 (ms)", f_fixed(3)),
        ("slo_attainment", "SLO attainment", f_pct(2)), ("mean_ms", "mean (ms)", f_fixed(3)),
    ]  # fmt: skip
    return (
        "<h3>By regime</h3>"
        '<p class="lead">The same runs cut by the regime span each request arrived in '
        "(the trace's recorded spans; every span of one name pooled, warm-up windows left out "
        "as above). <em>oracle</em> is the labelled schedule as the oracle ran it.</p>"
        + table(df.drop("_rank").to_dicts(), cols)
        + page.figure(regime_figure(run))
    )


__all__ = ["ORDER", "regime_figure", "regimes_body", "regimes_summary"]
