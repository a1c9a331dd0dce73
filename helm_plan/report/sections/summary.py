"""Summary: the verdict sentences, the headline cards and the run's setting."""

from __future__ import annotations

import html

from helm_plan.report.page import Page, f_fixed, f_gib, f_pct, f_text, table
from helm_plan.report.store import RunData
from helm_plan.report.summary import headline, stats_dict, verdict


def _card(key: str, value: str, sub: str = "") -> str:
    return (
        f'<div class="card"><div class="k">{html.escape(key)}</div>'
        f'<div class="v">{html.escape(value)}</div><div class="s">{html.escape(sub)}</div></div>'
    )


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
