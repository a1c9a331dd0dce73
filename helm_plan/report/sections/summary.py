"""Summary: the planner's first questions per GPU, the verdict sentences, the headline cards
and the run's setting (the traffic model, the SLO and the pool, each with its source)."""

from __future__ import annotations

import html

from helm_plan.report.page import Page, f_fixed, f_gib, f_num, f_pct, f_text, table
from helm_plan.report.store import RunData
from helm_plan.report.summary import headline, headroom_text, planner_rows, stats_dict, verdict


def planner_table(run: RunData) -> str:
    """One row per GPU kind: the cheapest fleet, its price, one GPU's capacity, the headroom."""
    rows = planner_rows(run)
    if not rows:
        return ""
    s = run.meta.get("capacity_scaling") or {}
    mean = s.get("qps_after")
    for r in rows:
        r["fleet"] = (f"{r['nodes']} × {r['gpu']}" if r["nodes"] is not None
                      else f"none up to {run.meta.get('capacity_max_nodes')}")  # fmt: skip
        r["how"] = f"{r['policy']} behind {r['router']}" if r["policy"] else "–"
        r["room"] = headroom_text(r)
        lb = "≥ " if r["max_qps_lower_bound"] else ""
        r["qps"] = "–" if r["max_qps_per_gpu"] is None else f"{lb}{r['max_qps_per_gpu']:,.0f}"
        r["policy"] = "cheapest" if r["cheapest"] else ""
    per_m = f"USD per M req (at {mean:,.0f} req/s mean)" if mean else "USD per M req"
    cols = [("fleet", "fleet meeting the SLO", f_text), ("how", "split policy, router", f_text),
            ("usd_per_day", "USD/day", f_fixed(0)), ("usd_per_million_requests", per_m, f_num()),
            ("qps", "max req/s per GPU (one node alone)", f_text),
            ("room", "headroom until N + 1", f_text)]  # fmt: skip
    return table(rows, cols, highlight="cheapest")


def _card(key: str, value: str, sub: str = "") -> str:
    return (
        f'<div class="card"><div class="k">{html.escape(key)}</div>'
        f'<div class="v">{html.escape(value)}</div><div class="s">{html.escape(sub)}</div></div>'
    )


TITLE = "Summary"
ORDER = 10


def render(run: RunData, page: Page) -> str:
    """The verdict, the four headline cards and the setting table."""
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
    items = "".join(f"<li>{html.escape(x)}</li>" for x in verdict(run))
    st = stats_dict(run)
    setup = [
        {"k": "trace", "v": m.get("trace_path")},
        {"k": "requests", "v": st.get("requests", st.get("n_requests"))},
        {"k": "GPU / model / latency", "v": f"{m.get('gpu')} / {m.get('model')} / {m.get('latency')}"},
        {"k": "cache pool per GPU (GiB)",
         "v": f_gib(m.get("pool_bytes")) + f" ({m.get('pool_source')})"},
        {"k": "P99 SLO (ms)", "v": f"{m.get('slo_ms')} ({m.get('slo_source', '--slo-ms')})"},
        {"k": "window (s) / windows", "v": f"{m.get('window_s')} / {m.get('windows')}"},
    ]  # fmt: skip
    sc = m.get("capacity_scaling")
    if sc:
        setup.insert(
            2,
            {
                "k": "traffic model",
                "v": f"x{sc['factor']:.3g} by {sc['method']}: {sc.get('assumption', '')}",
            },
        )
    return (
        planner_table(run)
        + f'<div class="verdict"><ul>{items}</ul></div><div class="cards">{"".join(cards)}</div>'
        + table(setup, [("k", "setting", f_text), ("v", "value", f_text)])
    )
