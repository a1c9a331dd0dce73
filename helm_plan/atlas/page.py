"""The atlas page: one self-contained HTML file of heatmaps, like the analyze report.

Built on the report's template and stylesheet: plotly.js inlined once, every
figure as JSON in one block drawn by ``Plotly.newPlot``, no network. One
section per panel: a heatmap of the oracle's gain over best static (the cell's
bootstrap interval, r* range and every setting on hover) beside one of the r*
range; then the base cell and a table of every cell.
"""

from __future__ import annotations

import dataclasses
import html
import json
from string import Template
from typing import Any

import plotly.graph_objects as go
import polars as pl

from helm_plan._data import data_dir
from helm_plan._version import __version__
from helm_plan.atlas.config import AXES, AtlasConfig, Cell
from helm_plan.atlas.run import AtlasResult
from helm_plan.report.page import f_fixed, f_num, f_pct, f_text, table

METRICS = {
    "oracle_gain": ("oracle gain vs best static (P99)", "pct"),
    "r_star_width": ("r* range (max − min over windows)", "ratio"),
}
"""The two heatmaps of each panel: column -> (title, kind)."""


def _template(name: str) -> str:
    return (data_dir("helm_plan._reports", "reports") / "templates" / name).read_text("utf-8")


def _hover(row: dict[str, Any]) -> str:
    cell = [f"{f.name} = {row[f.name]}" for f in dataclasses.fields(Cell)]
    res = [
        f"oracle gain {_pct(row['oracle_gain'])} [{_pct(row['oracle_gain_lo'])}, "
        f"{_pct(row['oracle_gain_hi'])}]",
        f"adaptive gain {_pct(row['gain'])} [{_pct(row['gain_lo'])}, {_pct(row['gain_hi'])}]",
        f"r* {row['r_star_min']:.2f} – {row['r_star_max']:.2f}; best static r "
        f"{row['static_ratio']:.2f}",
        f"P99 ms: static {row['static_p99_ms']:.3g}, oracle {row['oracle_p99_ms']:.3g}, "
        f"adaptive {row['adaptive_p99_ms']:.3g} (SLO {row['slo_ms']:g})",
        f"SLO attainment: static {_pct(row['static_attainment'])}, oracle "
        f"{_pct(row['oracle_attainment'])}, adaptive {_pct(row['adaptive_attainment'])}",
        f"by regime, oracle gain: in bursts {_pct(row['burst_gain'])} (static P99 "
        f"{row['burst_static_p99_ms']:.3g} ms), between them {_pct(row['steady_gain'])} "
        f"(static P99 {row['steady_static_p99_ms']:.3g} ms)",
    ]
    return "<br>".join(res + ["<b>settings</b>"] + cell)


def _pct(v: Any) -> str:
    return "–" if v is None or v != v else f"{100 * v:.1f}%"


def panel_figure(df: pl.DataFrame, p: int, x: str, y: str, metric: str) -> go.Figure:
    """Heatmap of ``metric`` over panel ``p``'s cells (x, y levels in grid order)."""
    rows = [r for r in df.to_dicts() if any(w[0] == p for w in json.loads(r["panels"]))]
    xs = list(dict.fromkeys(w[1] for r in rows for w in json.loads(r["panels"]) if w[0] == p))
    ys = list(dict.fromkeys(w[2] for r in rows for w in json.loads(r["panels"]) if w[0] == p))
    z = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    hover = [[""] * len(xs) for _ in ys]
    for r in rows:
        for w in json.loads(r["panels"]):
            if w[0] != p:
                continue
            i, j = ys.index(w[2]), xs.index(w[1])
            v = r["r_star_max"] - r["r_star_min"] if metric == "r_star_width" else r[metric]
            z[i][j] = None if v != v else v
            text[i][j] = _pct(v) if metric == "oracle_gain" else f"{v:.2f}"
            hover[i][j] = _hover(r)
    title, kind = METRICS[metric]
    pct = kind == "pct"
    fig = go.Figure(
        go.Heatmap(
            x=[str(v) for v in xs], y=[str(v) for v in ys], z=z, text=text,
            texttemplate="%{text}", hovertext=hover, hoverinfo="text",
            colorscale="RdBu" if pct else "Viridis", zmid=0 if pct else None,
            zmin=None if pct else 0, zmax=None if pct else 1,
            colorbar={"tickformat": ".0%" if pct else ".1f"},
        )
    )  # fmt: skip
    fig.update_layout(
        template="plotly_white", title={"text": title, "x": 0.0, "font": {"size": 14}},
        height=360, margin={"l": 70, "r": 20, "t": 40, "b": 50},
        xaxis={"title": AXES[x].label, "type": "category"},
        yaxis={"title": AXES[y].label, "type": "category"}, hovermode="closest",
    )  # fmt: skip
    return fig


def render(res: AtlasResult) -> str:
    """The atlas page as a string."""
    cfg, df = res.config, res.cells
    figs: dict[str, Any] = {}

    def add(fig: go.Figure) -> str:
        fid = f"fig-atlas-{len(figs)}"
        figs[fid] = json.loads(fig.to_json())
        return f'<div class="plot" id="{fid}"></div>'

    sections = {"about": ("Where the split matters", _about(res))}
    for p, (x, y) in enumerate(cfg.panels):
        divs = "".join(add(panel_figure(df, p, x, y, m)) for m in METRICS)
        sections[f"panel-{p}"] = (f"{AXES[x].label} × {AXES[y].label}",
                                  f'<div class="grid2">{divs}</div>')  # fmt: skip
    sections["cells"] = ("Every cell", _cells_table(df, cfg))
    toc = "\n".join(f'    <li><a href="#{k}">{html.escape(t)}</a></li>'
                    for k, (t, _) in sections.items())  # fmt: skip
    body = "\n".join(f'<section id="{k}"><h2>{html.escape(t)}</h2>{b}</section>'
                     for k, (t, b) in sections.items())  # fmt: skip
    import plotly.offline

    fig_json = json.dumps(figs, separators=(",", ":"), sort_keys=True).replace("</", "<\\/")
    subtitle = (f"{df.height} cells · {cfg.requests:,} requests × {cfg.windows} windows each · "
                f"seed {cfg.seed}{' · quick' if cfg.quick else ''}")  # fmt: skip
    return Template(_template("report.html")).substitute(
        title=html.escape("helm-plan atlas"), subtitle=html.escape(subtitle),
        version=html.escape(__version__), css=_template("report.css"), toc=toc, body=body,
        plotlyjs=plotly.offline.get_plotlyjs(), figures=fig_json,
    )  # fmt: skip


def _about(res: AtlasResult) -> str:
    cfg, df = res.config, res.cells
    ok = df.filter(pl.col("oracle_gain_lo") > 0) if df.height else df
    best = df.sort("oracle_gain", descending=True).row(0, named=True) if df.height else None
    lines = [
        f"{df.height} cells; the oracle beats best static with an interval above zero in "
        f"{ok.height} of them.",
    ]
    if best is not None:
        lines.append(
            f"Largest oracle gain: {_pct(best['oracle_gain'])} [{_pct(best['oracle_gain_lo'])}, "
            f"{_pct(best['oracle_gain_hi'])}] (r* {best['r_star_min']:.2f}–{best['r_star_max']:.2f})."
        )
    widest = float((df["r_star_max"] - df["r_star_min"]).max()) if df.height else float("nan")
    lines.append(f"Widest r* range of a cell: {widest:.2f}.")
    items = "".join(f"<li>{html.escape(s)}</li>" for s in lines)
    base = [{"k": AXES[f.name].label, "v": getattr(cfg.base, f.name)}
            for f in dataclasses.fields(Cell)]  # fmt: skip
    return (
        '<p class="lead">Each cell is a synthetic trace (steady returning users, two bursts of '
        "cold users and new items) on a node whose pool, model, link and load the cell sets, "
        "measured as <code>helm-plan analyze --no-capacity</code> measures a trace: the carry "
        "oracle's per-window r*, the best static split, the oracle schedule and the adaptive "
        "policy, each gain with a window-bootstrap interval. Each panel varies two axes with "
        "every other axis at the base cell. Hover a cell for its settings and figures.</p>"
        f'<div class="verdict"><ul>{items}</ul></div>'
        "<h3>Base cell</h3>" + table(base, [("k", "axis", f_text), ("v", "base value", f_text)])
    )


def _cells_table(df: pl.DataFrame, cfg: AtlasConfig) -> str:
    base = dataclasses.asdict(cfg.base)
    rows = []
    for r in df.sort("oracle_gain", descending=True).to_dicts():
        diff = ", ".join(f"{k}={r[k]}" for k in base if r[k] != base[k]) or "base"
        rows.append({**r, "cell": diff})
    pct, fix = f_pct(1), f_fixed(3)
    cols = [("cell", "cell (axes off the base)", f_text), ("oracle_gain", "oracle gain", pct),
            ("oracle_gain_lo", "CI low", pct), ("oracle_gain_hi", "CI high", pct),
            ("gain", "adaptive gain", pct), ("r_star_min", "r* min", f_fixed(2)),
            ("r_star_max", "r* max", f_fixed(2)), ("static_ratio", "best static r", f_fixed(2)),
            ("static_p99_ms", "static P99 ms", fix), ("oracle_p99_ms", "oracle P99 ms", fix),
            ("static_attainment", "static SLO", pct), ("oracle_attainment", "oracle SLO", pct),
            ("burst_gain", "gain in bursts", pct), ("steady_gain", "gain between bursts", pct),
            ("slo_ms", "SLO ms", f_num()),
            ("seconds", "s", f_fixed(1))]  # fmt: skip
    return table(rows, cols)


__all__ = ["METRICS", "panel_figure", "render"]
