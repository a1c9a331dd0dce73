"""Page assembly: one self-contained HTML file from a :class:`RunData`.

plotly.js is inlined once in a single ``<script>``; every figure travels as
JSON in one ``application/json`` block and is drawn by ``Plotly.newPlot``. No
CDN, no fonts or images from the network. The page is deterministic: the
same run store gives byte-identical HTML.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from string import Template
from typing import Any

import plotly.graph_objects as go
import polars as pl

from helm_plan import io
from helm_plan._data import data_dir
from helm_plan._version import __version__
from helm_plan.inspect import LABELS as STAT_LABELS
from helm_plan.report import figures
from helm_plan.report.capacity import capacity_body, routing_body
from helm_plan.report.controller import controller_body, controller_summary
from helm_plan.report.regimes import regimes_body
from helm_plan.report.store import RunData
from helm_plan.report.summary import flat_tol, headline, stats_dict, verdict

Fmt = Callable[[Any], str]
SECTION_TITLES = {
    "summary": "Summary",
    "capacity": "Capacity",
    "routing": "Routing",
    "workload": "Workload",
    "curves": "Cache curves",
    "latency": "Latency model",
    "oracle": "Oracle timeline",
    "policies": "Policies",
    "controller": "Controller",
    "sensitivity": "Sensitivity",
    "reproducibility": "Reproducibility",
}


def _template(name: str) -> str:
    return (data_dir("helm_plan._reports", "reports") / "templates" / name).read_text("utf-8")


def f_num(digits: int = 3) -> Fmt:
    """Formatter: a float with ``digits`` significant digits ('–' for missing)."""

    def f(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, int):
            return f"{v:,}"
        if not isinstance(v, float):
            return str(v)
        return f"{v:,.{digits}g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.{digits}e}"

    return f


def f_fixed(decimals: int = 2) -> Fmt:
    """Formatter: fixed decimals."""
    return lambda v: "–" if v is None or v != v else f"{v:,.{decimals}f}"


def pct_text(v: float, decimals: int = 1) -> str:
    """``v`` (a share) as a percentage that never reads 100% (or 0%) unless it is exactly that.

    A share of 0.9998 at one decimal would print "100.0%" beside a requirement
    of 99.9%; more digits are shown until the rounding no longer hides the gap.
    """
    d = decimals
    while d < 6 and v not in (0.0, 1.0) and round(100 * v, d) in (0.0, 100.0):
        d += 1
    return f"{100 * v:.{d}f}%"


def f_pct(decimals: int = 1) -> Fmt:
    """Formatter: a share as a percentage (see :func:`pct_text`)."""
    return lambda v: "–" if v is None or v != v else pct_text(float(v), decimals)


def human_bytes(v: float) -> str:
    """Bytes as GiB, MiB or KiB with three significant digits."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{v / scale:,.3g} {unit}"
    return f"{v:,.0f} B"


def f_gib(v: Any) -> str:
    """Formatter: bytes as GiB."""
    return "–" if v is None or v != v else f"{v / 2**30:,.3g}"


def f_text(v: Any) -> str:
    return "–" if v is None else str(v)


Column = tuple[str, str, Fmt]


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, highlight: str = "") -> str:
    """An HTML table; ``columns`` are (key, header with unit, formatter)."""
    head = "".join(
        f'<th class="{"num" if fmt is not f_text else ""}">{html.escape(h)}</th>'
        for _, h, fmt in columns
    )
    body = []
    for r in rows:
        cls = ' class="highlight"' if highlight and r.get("policy") == highlight else ""
        cells = "".join(
            f'<td class="{"num" if fmt is not f_text else ""}">{html.escape(fmt(r.get(k)))}</td>'
            for k, _, fmt in columns
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    return [] if df.is_empty() else df.to_dicts()


class _Figs:
    """Collects figures; each ``add`` returns the div that Plotly draws into."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def add(self, section: str, fig: go.Figure | None) -> str:
        if fig is None:
            return ""
        fid = f"fig-{section}-{len([k for k in self.data if k.startswith(f'fig-{section}-')])}"
        self.data[fid] = json.loads(fig.to_json())
        return f'<div class="plot" id="{fid}"></div>'

    def section(self, section: str, run: RunData) -> str:
        divs = [self.add(section, b(run)) for b in figures.SECTIONS.get(section, ())]
        divs = [d for d in divs if d]
        return f'<div class="grid2">{"".join(divs)}</div>' if divs else ""


def _card(key: str, value: str, sub: str = "") -> str:
    return (
        f'<div class="card"><div class="k">{html.escape(key)}</div>'
        f'<div class="v">{html.escape(value)}</div><div class="s">{html.escape(sub)}</div></div>'
    )


def _summary(run: RunData) -> str:
    h = headline(run)
    m = run.meta
    bs, orc, voa = h["best_static"], h["oracle"], h["value_of_adaptivity"]
    pols = {p["name"]: p for p in h["policies"]}
    ad = pols.get("adaptive", {})
    ms = f_fixed(2)
    cards = [
        _card("best static r", f_fixed(2)(bs["ratio"]), f"P99 {ms(bs['p99_ms'])} ms"),
        _card("adaptive P99", f"{ms(ad.get('p99_ms'))} ms", f"SLO {f_pct()(ad.get('slo_attainment'))}"),
        _card(
            "P99 reduction", f_pct()(voa["p99_reduction"]),
            f"CI {f_pct()(voa['ci_low'])} … {f_pct()(voa['ci_high'])}",
        ),
        _card("r* range", f"{f_fixed(2)(orc['ratio_min'])}–{f_fixed(2)(orc['ratio_max'])}",
              f"oracle P99 {ms(orc['p99_ms'])} ms"),
    ]  # fmt: skip
    items = "".join(f"<li>{html.escape(s)}</li>" for s in verdict(run))
    st = stats_dict(run)
    setup = [
        {"k": "trace", "v": m.get("trace_path")},
        {"k": "requests", "v": st.get("requests", st.get("n_requests"))},
        {"k": "GPU / model / latency", "v": f"{m.get('gpu')} / {m.get('model')} / {m.get('latency')}"},
        {"k": "cache pool (GiB)", "v": f_gib(m.get("pool_bytes")) + f" ({m.get('pool_source')})"},
        {"k": "P99 SLO (ms)", "v": m.get("slo_ms")},
        {"k": "window (s) / windows", "v": f"{m.get('window_s')} / {m.get('windows')}"},
    ]  # fmt: skip
    return (
        f'<div class="verdict"><ul>{items}</ul></div><div class="cards">{"".join(cards)}</div>'
        + table(setup, [("k", "setting", f_text), ("v", "value", f_text)])
    )


def _stat_value(key: str, v: Any) -> str:
    if key.endswith("_bytes") and isinstance(v, int | float) and v == v:
        return human_bytes(float(v))
    if key == "cold_share" and isinstance(v, float):
        return pct_text(v)
    return f_num(4)(v)


def _workload(run: RunData, figs: _Figs) -> str:
    st = stats_dict(run)
    rows = [{"k": STAT_LABELS.get(k, k.replace("_", " ")), "v": _stat_value(k, v)}
            for k, v in st.items()]  # fmt: skip
    return (
        '<p class="lead">What the trace asks of one GPU: arrivals, context lengths and item skew.</p>'
        + table(rows, [("k", "statistic", f_text), ("v", "value", f_num(4))])
        + figs.section("workload", run)
    )


def _curves(run: RunData, figs: _Figs) -> str:
    knees = (
        _rows(run.table("curve_knees").filter(pl.col("window") < 0))
        if not run.table("curve_knees").is_empty()
        else []
    )
    return (
        '<p class="lead">Hit rate of each cache alone against its size (exact LRU stack '
        "distances). The knee is where extra bytes stop paying. The EMB stream depends on KV "
        "misses: <em>whole trace</em> fixes the KV share at the curves' ratio, <em>no KV cache</em> "
        "is the worst case where every request recomputes its whole history."
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
        + figs.section("curves", run)
    )


def _latency(run: RunData, figs: _Figs) -> str:
    coef = _rows(run.table("latency_coef"))
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
        + figs.section("latency", run)
    )


def _oracle(run: RunData, figs: _Figs) -> str:
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
        f"{flat_tol(run):.0%} of the best: a wide band means the split hardly matters there.</p>"
        + figs.section("oracle", run)
        + table(_rows(run.table("labels")), cols)
    )


def _policies(run: RunData, figs: _Figs) -> str:
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
        + table(_rows(run.table("policies")), cols, highlight="adaptive")
        + figs.section("policies", run)
        + regimes_body(run, lambda f: figs.add("policies", f), table, FMTS)
    )


def _sensitivity(run: RunData, figs: _Figs) -> str:
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
        + table(_rows(run.table("adaptivity")), cols)
        + figs.section("sensitivity", run)
    )


def _repro(run: RunData) -> str:
    m = run.meta
    ids = [
        {"k": "trace SHA-256", "v": m.get("trace_sha256")},
        {"k": "seed", "v": m.get("seed")},
        {"k": "command", "v": m.get("command")},
    ]
    cfg = _rows(run.table("config"))
    ver = _rows(run.table("versions"))
    tim = _rows(run.table("timings"))
    return (
        table(ids, [("k", "item", f_text), ("v", "value", f_text)])
        + "<h3>Configuration</h3>"
        + table(
            cfg,
            [("section", "section", f_text), ("key", "option", f_text), ("value", "value", f_text)],
        )  # fmt: skip
        + '<div class="grid2"><div><h3>Versions</h3>'
        + table(ver, [("package", "package", f_text), ("version", "version", f_text)])
        + "</div><div><h3>Stage timings</h3>"
        + table(
            tim,
            [
                ("stage", "stage", f_text),
                ("seconds", "time (s)", f_fixed(2)),
                ("cached", "reused from cache", f_text),
            ],
        )  # fmt: skip
        + "</div></div>"
    )


FMTS = {"text": f_text, "num": f_num(), "pct": f_pct, "fixed": f_fixed}
"""Formatters the capacity module's sections use."""


def render(run: RunData) -> str:
    """The whole report page as a string."""

    figs = _Figs()
    bodies = {
        "summary": _summary(run),
        "workload": _workload(run, figs),
        "curves": _curves(run, figs),
        "latency": _latency(run, figs),
        "oracle": _oracle(run, figs),
        "policies": _policies(run, figs),
        "controller": controller_body(run, lambda f: figs.add("controller", f), table, FMTS),
        "sensitivity": _sensitivity(run, figs),
        "reproducibility": _repro(run),
    }
    if controller_summary(run) is None:  # analyze ran no controller
        bodies.pop("controller")
    if not run.table("capacity").is_empty():  # planned (not --no-capacity): the answer first
        bodies = {"summary": bodies.pop("summary"),
                  "capacity": capacity_body(run, lambda f: figs.add("capacity", f), table, FMTS),
                  "routing": routing_body(run, lambda f: figs.add("routing", f), table, FMTS),
                  **bodies}  # fmt: skip
    toc = "\n".join(
        f'    <li><a href="#{k}">{html.escape(SECTION_TITLES[k])}</a></li>' for k in bodies
    )
    body = "\n".join(
        f'<section id="{k}"><h2>{html.escape(SECTION_TITLES[k])}</h2>{v}</section>'
        for k, v in bodies.items()
    )
    import plotly.offline

    stem = str(run.meta.get("trace_stem", "trace"))
    subtitle = (
        f"{stem} · {run.meta.get('gpu')} · {run.meta.get('model')} · "
        f"SLO {run.meta.get('slo_ms')} ms · sha256 {str(run.meta.get('trace_sha256', ''))[:12]}"
    )
    fig_json = json.dumps(figs.data, separators=(",", ":"), sort_keys=True).replace("</", "<\\/")
    return Template(_template("report.html")).substitute(
        title=html.escape(f"helm-plan report: {stem}"),
        subtitle=html.escape(subtitle),
        version=html.escape(__version__),
        css=_template("report.css"),
        toc=toc,
        body=body,
        plotlyjs=plotly.offline.get_plotlyjs(),
        figures=fig_json,
    )


def write_report(path: str | os.PathLike[str], run: RunData) -> Path:
    """Render and atomically write the report to ``path``."""
    return io.write_text(path, render(run))
