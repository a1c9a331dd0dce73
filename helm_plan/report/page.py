"""What every report section shares: the section record, formatters, tables and figures.

A section (one module under :mod:`helm_plan.report.sections`) is a function
``render(run, page) -> str | None``: it reads the run store and returns its
HTML, or ``None`` to leave the section out of the page. It builds tables with
:func:`table` and the formatters here, and embeds a plotly figure with
:meth:`Page.figure`, which collects the figure for the page's single JSON
block and returns the ``<div>`` plotly draws into. Figures share
:func:`layout` and :func:`slo_line` so that every chart looks alike.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import polars as pl

from helm_plan.report.store import RunData

Fmt = Callable[[Any], str]
Column = tuple[str, str, Fmt]
"""A table column: (row key, header with unit, formatter)."""


class Page:
    """The page one section renders into: it collects the section's figures."""

    __slots__ = ("_figures", "key")

    def __init__(self, key: str, figures: dict[str, Any]) -> None:
        self.key = key
        """The section's key (its anchor and the prefix of its figure ids)."""
        self._figures = figures

    def figure(self, fig: go.Figure | None) -> str:
        """Collect ``fig`` and return the div plotly draws it into ('' for None)."""
        if fig is None:
            return ""
        prefix = f"fig-{self.key}-"
        fid = f"{prefix}{sum(k.startswith(prefix) for k in self._figures)}"
        self._figures[fid] = json.loads(fig.to_json())
        return f'<div class="plot" id="{fid}"></div>'

    def grid(self, *figs: go.Figure | None) -> str:
        """The figures side by side in the two-column grid ('' when every one is None)."""
        divs = [d for d in (self.figure(f) for f in figs) if d]
        return f'<div class="grid2">{"".join(divs)}</div>' if divs else ""


@dataclass(frozen=True)
class Section:
    """One section of the report page (the registry in :mod:`helm_plan.report.sections`)."""

    key: str
    """Anchor and id of the section (lower case)."""
    title: str
    """Heading and table-of-contents entry."""
    render: Callable[[RunData, Page], str | None]
    """The section's HTML from the run, or None to leave it out."""


# ------------------------------------------------------------------ the run's settings

FLAT_TOLERANCE = 0.02
"""The flatness tolerance of runs whose store predates ``meta['flat_tol']`` (the oracle's default)."""


def flat_tol(run: RunData) -> float:
    """The relative P99 tolerance the run's oracle used for its flat bands."""
    return float(run.meta.get("flat_tol", FLAT_TOLERANCE))


def tol_text(run: RunData) -> str:
    """:func:`flat_tol` as a label: "2%", "2.5%" (never rounded to a whole percent)."""
    return f"{100 * flat_tol(run):g}%"


# ------------------------------------------------------------------ formatters


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
    """Formatter: the value as text ('–' for missing); its column is left-aligned."""
    return "–" if v is None else str(v)


# ------------------------------------------------------------------ tables


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, highlight: str = "") -> str:
    """An HTML table in its own scrolling wrapper; ``columns`` are (key, header with unit,
    formatter); the row whose ``policy`` is ``highlight`` is emphasised."""
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


def rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    """A table's rows as dicts (none for an empty frame)."""
    return [] if df.is_empty() else df.to_dicts()


# ------------------------------------------------------------------ figures

_FONT = {"family": "Inter, Segoe UI, Helvetica, Arial, sans-serif", "size": 12, "color": "#1d2733"}

#: Percent ticks with up to two decimals and no trailing zeros: 0%, -0.5%, -1%, -1.5%
#: (a whole-percent format rounds -0.5% and -1.4% both to "-1%").
PCT_TICKS = ".2~%"


def layout(fig: go.Figure, title: str, *, height: int = 400, **kw: Any) -> go.Figure:
    """The report's common figure layout: title, size, margins, font, legend below."""
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


def steps(start: Sequence[float], end: Sequence[float], y: Sequence[Any]) -> tuple[list, list]:
    """A per-window series as the points of a step line (``line_shape="hv"``).

    Each value holds from its window's start until the next window starts;
    the last one is repeated at the last window's end so that its window is
    drawn too (a point per window start alone would drop it).
    """
    start, y = list(start), list(y)
    if not start:
        return [], []
    return [*start, float(list(end)[-1])], [*y, y[-1]]


def slo_line(fig: go.Figure, slo: float, *, log_y: bool) -> None:
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
