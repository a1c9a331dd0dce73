"""The report's Controller section: the deployable controller against the oracle and best static.

Read from the policy tables analyze already has (``policy_windows``,
``sensitivity``, ``adaptivity``, ``labels``): the controller's r per window
against r* and its flat band, the distribution of |r − r*|, its P99 regret
against the oracle schedule and best static with the window-bootstrap CI,
its guard (anchor, share of windows it fell back), and its decision latency
as the runtime's own timer measured it in this run (the shipped card's
figure beside it, labelled as the card's). |r − r*| is summarised only over
windows whose flat band is narrower than :data:`NARROW_BAND`: where the band
is wide, r* is one arbitrary point of a plateau and the distance means
nothing. :func:`recommendation` says plainly "use best static" unless the
gain's CI is above zero, and where the analysed node is one of a fleet, unless a
controller on *every* node plans no worse than best static (:func:`operating_fleet`).
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import polars as pl

from helm_plan.controller.features import NARROW_BAND
from helm_plan.report.colours import policy_colour
from helm_plan.report.page import (
    Page,
    f_fixed,
    f_num,
    f_pct,
    f_text,
    layout,
    steps,
    table,
    tol_text,
)
from helm_plan.report.store import RunData
from helm_plan.report.tables import (
    ADAPTIVITY,
    CAPACITY,
    LABELS,
    POLICIES,
    POLICY_WINDOWS,
    SENSITIVITY,
)

NAME = "controller"
"""The policy row analyze runs for the shipped default controller."""


def controller_summary(run: RunData) -> dict[str, Any] | None:
    """summary.json's ``controller`` object (None when analyze ran no controller)."""
    pols = run.table(POLICIES)
    if pols.is_empty() or NAME not in pols["policy"].to_list():
        return None
    row = pols.filter(pl.col("policy") == NAME).row(0, named=True)
    bs = pols.filter(pl.col("policy") == "best-static")
    bs_p99 = bs["p99_ms"][0] if bs.height else None
    o_p99 = run.meta.get("oracle_p99_ms")
    sens = run.table(SENSITIVITY)
    lab = run.table(LABELS)
    narrow = (
        sens.filter(pl.col("policy") == NAME)
        .join(lab.select("window", "flat_width"), on="window")
        .filter(pl.col("flat_width") < NARROW_BAND)
        if not sens.is_empty() and not lab.is_empty()
        else pl.DataFrame()
    )
    ad = run.table(ADAPTIVITY)
    adr = ad.filter(pl.col("policy") == NAME) if not ad.is_empty() else ad
    gain = adr.row(0, named=True) if adr.height else {}
    p99 = row.get("p99_ms")
    out = {
        "p99_ms": p99,
        "slo_attainment": row.get("slo_attainment"),
        "regret_vs_oracle": p99 / o_p99 - 1 if p99 and o_p99 else None,
        "vs_best_static": p99 / bs_p99 - 1 if p99 and bs_p99 else None,
        "gain_vs_best_static": gain.get("p99_reduction"),
        "gain_ci_low": gain.get("ci_low"),
        "gain_ci_high": gain.get("ci_high"),
        "mean_abs_dr_all": row.get("mean_abs_dr"),
        "narrow_band_windows": int(narrow.height),
        "mean_abs_dr_narrow": float(narrow["abs_dr"].mean()) if narrow.height else None,
        "decision_latency_us": run.meta.get("controller_decision_latency_us"),
        "decision_latency_source": "measured in this run (the runtime's own timer)",
        "card_decision_latency_us": run.meta.get("controller_card_latency_us"),
        "guard": run.meta.get("controller_guard"),
        "best_static_ratio": run.meta.get("best_static_ratio"),
    }
    out["recommendation"] = recommendation(out, operating_fleet(run))
    return out


def operating_fleet(run: RunData) -> dict[str, Any] | None:
    """The operating fleet, where it has several nodes, and its capacity rows for a controller
    on every node and for best static (behind the operating router; None when not planned).

    The one-node gain is measured on the analysed node fed the requests the router sent it
    with every node at best static; a controller on every node also moves the routing (a
    node's r changes what it keeps resident, which EMB-KV-aware routers weigh). On
    ``bench_controller.py --fleet-contested 4`` (the contested case, helm) the controller
    gained 16-31 % on one node and lost 10-34 % as a fleet, so a one-node verdict does not
    carry to a fleet: the capacity plan's exact fleet simulation decides.
    """
    o = run.meta.get("operating") or {}
    if int(o.get("nodes") or 1) < 2:
        return None
    cap = run.table(CAPACITY)
    rows: dict[str, Any] = {}
    if not cap.is_empty():
        at = cap.filter((pl.col("gpu") == o.get("gpu")) & (pl.col("router") == o.get("router")))
        rows = {p: at.filter(pl.col("policy") == p).row(0, named=True)
                for p in ("controller", "best-static") if p in at["policy"].to_list()}  # fmt: skip
    return {"where": f"the {o.get('gpu')} fleet behind {o.get('router')}",
            "controller": rows.get("controller"), "best_static": rows.get("best-static")}  # fmt: skip


def _cost(row: dict[str, Any]) -> tuple[float, float]:
    """A capacity row ranked by nodes, then P99 (a missing figure ranks last)."""
    n, p = row.get("nodes"), row.get("p99_ms")
    ok = [isinstance(v, int | float) and math.isfinite(v) for v in (n, p)]
    return (float(n) if ok[0] else math.inf, float(p) if ok[1] else math.inf)


def recommendation(s: dict[str, Any], fleet: dict[str, Any] | None = None) -> str:
    """One sentence: the controller only where its gain over best static is significant, and,
    in a fleet (``fleet``: :func:`operating_fleet`), only where a controller on every node does not
    need more nodes or a higher P99 than best static in the capacity plan."""
    lo, g = s.get("gain_ci_low"), s.get("gain_vs_best_static")
    r = s.get("best_static_ratio")
    at = f" (r = {r:.2f})" if isinstance(r, float) else ""
    if lo is not None and g is not None and lo > 0:
        one = f"it beats best static{at} by {g:.1%} (95% CI from {lo:.1%})"
        if fleet is None:
            return f"Deploy the controller: {one}."
        c, b = fleet["controller"], fleet["best_static"]
        if c is None or b is None:
            return (
                f"Deploy the controller on this node: {one}, with the rest of the fleet at "
                f"best static; plan {fleet['where']} with the controller policy (a "
                "controller on every node, simulated) before deploying it on more nodes."
            )
        plan = (f"with a controller on every node of {fleet['where']} the capacity plan needs "
                f"{c['nodes']} nodes (P99 {c['p99_ms']:.4g} ms) against best static's "
                f"{b['nodes']} (P99 {b['p99_ms']:.4g} ms)")  # fmt: skip
        if _cost(c) <= _cost(b):
            return f"Deploy the controller: {one} on this node, and {plan}."
        return (f"Use best static{at}: on this node alone the controller beats it by {g:.1%} "
                f"(95% CI from {lo:.1%}), but {plan}.")  # fmt: skip
    if g is None:
        return f"Use best static{at}: the controller's gain was not measured."
    return (f"Use best static{at}: the controller does not beat it here "
            f"(P99 {g:+.1%}, CI low end {lo:+.1%}).")  # fmt: skip


def timeline(run: RunData) -> go.Figure | None:
    """The controller's r per window against r* and its flat band."""
    pw, lab = run.table(POLICY_WINDOWS), run.table(LABELS)
    if pw.is_empty() or lab.is_empty():
        return None
    c = pw.filter(pl.col("policy") == NAME).sort("t_start_s")
    if c.is_empty():
        return None
    lab = lab.sort("t_start_s")
    t0, t1 = lab["t_start_s"], lab["t_end_s"]
    x, hi = steps(t0, t1, lab["flat_hi"])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", line={"width": 0, "shape": "hv"},
                             showlegend=False, hoverinfo="skip"))  # fmt: skip
    fig.add_trace(go.Scatter(x=x, y=steps(t0, t1, lab["flat_lo"])[1], mode="lines", fill="tonexty",
                             fillcolor="rgba(42,157,143,0.15)", line={"width": 0, "shape": "hv"},
                             name=f"flat band (within {tol_text(run)} of r*)", hoverinfo="skip"))  # fmt: skip
    fig.add_trace(go.Scatter(x=x, y=steps(t0, t1, lab["r_star"])[1], mode="lines", name="r* (oracle)",
                             line={"color": "#2a9d8f", "dash": "dot", "shape": "hv"}))  # fmt: skip
    cx, cr = steps(c["t_start_s"], c["t_end_s"], c["ratio"])
    fig.add_trace(go.Scatter(x=cx, y=cr, mode="lines", name="controller r",
                             line={"color": policy_colour(NAME), "shape": "hv"}))  # fmt: skip
    return layout(fig, "Controller r per window against r* and its flat band",
                   xaxis_title="time (s)", yaxis_title="r (EMB share)", yaxis_range=[0, 1])  # fmt: skip


def distance(run: RunData) -> go.Figure | None:
    """Distribution of |r − r*| over measured windows, all and narrow-band."""
    sens, lab = run.table(SENSITIVITY), run.table(LABELS)
    if sens.is_empty() or lab.is_empty():
        return None
    d = sens.filter(pl.col("policy") == NAME).join(lab.select("window", "flat_width"), on="window")
    if d.is_empty():
        return None
    fig = go.Figure()
    fig.add_trace(go.Histogram(x=d["abs_dr"].to_list(), name="all windows", nbinsx=20,
                               marker={"color": "#adb5bd"}))  # fmt: skip
    n = d.filter(pl.col("flat_width") < NARROW_BAND)
    fig.add_trace(go.Histogram(x=n["abs_dr"].to_list(), name=f"flat band < {NARROW_BAND:g}",
                               nbinsx=20, marker={"color": "#d62828"}))  # fmt: skip
    return layout(fig, "|r − r*| per measured window", xaxis_title="|r − r*|",
                   yaxis_title="windows", barmode="overlay", hovermode="closest")  # fmt: skip


def controller_body(run: RunData, page: Page) -> str:
    """The Controller section (left out of the report when analyze ran no controller)."""
    s = controller_summary(run) or {}
    t, num, pct, fix = f_text, f_num(), f_pct, f_fixed
    lat = s.get("decision_latency_us") or {}
    card = s.get("card_decision_latency_us") or {}
    guard = s.get("guard") or {}
    rows = [
        {"k": "recommendation", "v": s.get("recommendation", "n/a")},
        {"k": "P99 (ms) / SLO attainment",
         "v": f"{fix(3)(s.get('p99_ms'))} / {pct(2)(s.get('slo_attainment'))}"},
        {"k": "regret against the oracle schedule", "v": pct(2)(s.get("regret_vs_oracle"))},
        {"k": "P99 against best static", "v": pct(2)(s.get("vs_best_static"))},
        {"k": "P99 reduction vs best static (CI)",
         "v": f"{pct(2)(s.get('gain_vs_best_static'))} ({pct(2)(s.get('gain_ci_low'))} … "
              f"{pct(2)(s.get('gain_ci_high'))})"},
        {"k": "mean |r − r*|, all measured windows", "v": fix(3)(s.get("mean_abs_dr_all"))},
        {"k": f"mean |r − r*|, flat band < {NARROW_BAND:g}",
         "v": f"{fix(3)(s.get('mean_abs_dr_narrow'))} over {num(s.get('narrow_band_windows'))} "
              "windows"},
        {"k": "guard: anchor r / windows fallen back / proposals overridden",
         "v": f"{fix(2)(guard.get('anchor'))} / {pct(0)(guard.get('fallback_share'))} / "
              f"{pct(0)(guard.get('override_share'))}"},
        {"k": "decision latency (µs, median / p99), measured in this run",
         "v": f"{fix(1)(lat.get('median'))} / {fix(1)(lat.get('p99'))}"},
        {"k": "decision latency (µs, median / p99), the shipped card's figure",
         "v": f"{fix(1)(card.get('median'))} / {fix(1)(card.get('p99'))}"},
    ]  # fmt: skip
    return (
        '<p class="lead">The shipped controller (PPO base policy, residual adapter on ghost-cache '
        "gains, burst-aware recovery, and a guard that serves the best static ratio unless the "
        "node's counterfactual P99 backs a move) decides r at each window boundary from what a "
        "server measures; the oracle sees the future. Where a window's flat band is wide, r* is "
        "an arbitrary point of a plateau and |r − r*| means nothing, so the distance is also "
        f"given over windows whose band is narrower than {NARROW_BAND:g}. The layer ablation "
        "and the simple-rule baselines are measured by "
        "<code>benchmarks/bench_controller.py</code>.</p>"
        + table(rows, [("k", "figure", t), ("v", "value", t)])
        + page.figure(timeline(run))
        + page.figure(distance(run))
    )
