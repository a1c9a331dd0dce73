"""Report figures and formatting: SLO label on a log axis, percent ticks, units, shares."""

from __future__ import annotations

import math

import polars as pl
import pytest
from fake_run import make_fleet_run, make_run

from helm_plan.report.html import render
from helm_plan.report.page import PCT_TICKS, human_bytes, pct_text
from helm_plan.report.sections.latency import QUEUE_TERM, latency_terms
from helm_plan.report.sections.policies import policy_p99, static_sweep
from helm_plan.report.sections.sensitivity import adaptivity


def test_slo_label_on_the_log_axis_sits_at_log10_of_the_slo():
    run = make_run()
    slo = float(run.meta["slo_ms"])
    fig = policy_p99(run)
    assert fig.layout.yaxis.type == "log"
    (shape,) = fig.layout.shapes
    assert shape.y0 == shape.y1 == slo  # shapes use data units
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("SLO")]
    # annotations on a log axis use log10 units (data units would put it at 10^slo)
    assert label.y == math.log10(slo) and label.text == f"SLO {slo:g} ms"


def test_slo_label_on_a_linear_axis_uses_data_units():
    base = make_run()
    sweep = pl.DataFrame({"ratio": [0.0, 0.5, 1.0], "p99_ms": [3.0, 1.0, 2.0]})
    run = type(base)(tables={**base.tables, "static_sweep": sweep}, meta=base.meta)
    fig = static_sweep(run)
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("SLO")]
    assert label.y == float(run.meta["slo_ms"])
    assert "ms" in fig.data[0].hovertemplate and "r =" in fig.data[0].hovertemplate


def test_percent_ticks_keep_half_percents():
    fig = adaptivity(make_run())
    assert fig.layout.yaxis.tickformat == PCT_TICKS == ".2~%"


@pytest.mark.parametrize("fleet", [False, True])
def test_service_time_bars_leave_queue_wait_out(fleet):
    """Service terms stack on the left axis; queue wait (when the run has it) has its own panel."""
    run = make_fleet_run() if fleet else make_run()
    terms = run.table("latency_terms")
    fig = latency_terms(run)
    service = [t for t in fig.data if t.name != "mean queue wait"]
    assert QUEUE_TERM not in {t.name for t in service}
    for p in terms["policy"].unique():
        want = terms.filter((pl.col("policy") == p) & (pl.col("term") != QUEUE_TERM))[
            "mean_ms"
        ].sum()
        got = sum(t.y[list(t.x).index(p)] for t in service)
        assert math.isclose(got, want, rel_tol=1e-12)
    wait = [t for t in fig.data if t.name == "mean queue wait"]
    assert bool(wait) == (terms["term"] == QUEUE_TERM).any() == fleet
    if fleet:
        (w,) = wait
        assert {t.xaxis for t in service} == {"x"} and w.xaxis == "x2" and w.yaxis == "y2"
        q = terms.filter(pl.col("term") == QUEUE_TERM)
        assert dict(zip(w.x, w.y, strict=True)) == dict(zip(q["policy"], q["mean_ms"], strict=True))


def _window_ends(run):
    lab = run.table("labels").sort("t_start_s")
    return lab["t_start_s"].to_list(), lab["t_end_s"][-1]


def test_per_window_series_are_steps_that_cover_the_last_window():
    from helm_plan.report.controller import timeline
    from helm_plan.report.sections.oracle import oracle_timeline
    from helm_plan.report.sections.policies import policy_ratio
    from helm_plan.report.sections.routing import ratio_spread
    from helm_plan.report.sections.workload import arrivals

    run = make_fleet_run()
    starts, end = _window_ends(run)
    figs = [policy_p99(run), policy_ratio(run), oracle_timeline(run), timeline(run)]
    for fig in figs:
        for t in fig.data:
            assert t.line.shape == "hv", (fig.layout.title.text, t.name)
            assert list(t.x) == [*starts, end], (fig.layout.title.text, t.name)
            assert t.y[-1] == t.y[-2]  # the last window's value held to its end
    pw = run.table("policy_windows").filter(pl.col("policy") == "adaptive").sort("window")
    (ad,) = [t for t in policy_p99(run).data if t.name == "adaptive"]
    assert list(ad.y[:-1]) == pw["p99_ms"].to_list()
    for t in ratio_spread(run).data:
        assert t.line.shape == "hv" and t.x[-1] == starts[-1] + run.meta["window_s"]
    (a,) = arrivals(run).data
    arr = run.table("workload_arrivals")
    assert (
        a.line.shape == "hv"
        and a.x[-1] == arr["t_s"][-1] + 1.0
        and list(a.y[:-1]) == arr["qps"].to_list()
    )


def test_r_spread_chart_only_when_the_nodes_ratios_differ():
    from helm_plan.report.sections.routing import ratio_spread

    assert ratio_spread(make_fleet_run()) is not None
    same = make_fleet_run(spread=False)
    assert ratio_spread(same) is None
    assert "no spread of r to chart" in render(same)
    page = render(make_fleet_run())
    assert "no spread of r to chart" not in page and 'id="fig-routing-0"' in page
    # one router with a spread is enough for the chart
    rw = same.table("routing_windows").with_columns(
        pl.when((pl.col("router") == "helm") & (pl.col("window") == 3))
        .then(0.2).otherwise(pl.col("ratio_spread")).alias("ratio_spread")
    )  # fmt: skip
    one = type(same)(tables={**same.tables, "routing_windows": rw}, meta=same.meta)
    assert ratio_spread(one) is not None


def test_shares_never_round_to_a_whole_hundred():
    assert pct_text(0.9998) == "99.98%"
    assert pct_text(0.99999) == "99.999%"
    assert pct_text(1.0) == "100.0%" and pct_text(0.0) == "0.0%"
    assert pct_text(0.0004) == "0.04%"
    assert pct_text(0.5) == "50.0%"


def test_workload_table_has_labels_and_human_bytes():
    assert human_bytes(3 * 2**30) == "3 GiB" and human_bytes(1536 * 2**10) == "1.5 MiB"
    assert human_bytes(512) == "512 B"
    run = make_run()
    stats = pl.DataFrame(
        {"name": ["mean_qps", "emb_footprint_bytes"], "value": [12.5, 3.0 * 2**30],
         "text": [None, None]},
        schema={"name": pl.String, "value": pl.Float64, "text": pl.String},
    )  # fmt: skip
    page = render(type(run)(tables={**run.tables, "stats": stats}, meta=run.meta))
    assert "mean arrival rate (req/s)" in page and "EMB footprint" in page
    assert "3 GiB" in page and "emb_footprint_bytes" not in page


def test_figure_labels_read_the_runs_tolerance():
    """The flat band's labels name the run's own tolerance (meta flat_tol), never a literal 2%."""
    from fake_run import make_fleet_run

    from helm_plan.report.controller import timeline
    from helm_plan.report.page import tol_text
    from helm_plan.report.sections.oracle import oracle_timeline
    from helm_plan.report.sections.sensitivity import flatness

    base = make_fleet_run()
    for tol, text in ((0.025, "2.5%"), (0.1, "10%"), (0.02, "2%")):
        run = type(base)(tables=base.tables, meta={**base.meta, "flat_tol": tol})
        assert tol_text(run) == text
        assert f"within {text} of best P99" in {t.name for t in oracle_timeline(run).data}
        assert flatness(run).layout.yaxis.title.text == f"range of r within {text} (Δr)"
        assert f"flat band (within {text} of r*)" in {t.name for t in timeline(run).data}
    legacy = type(base)(
        tables=base.tables, meta={k: v for k, v in base.meta.items() if k != "flat_tol"}
    )
    assert tol_text(legacy) == "2%"  # a store from before meta['flat_tol']: the oracle's default


def test_window_edges_are_the_shapes_add_vline_draws():
    # the arrival chart sets its window edges in one assignment (add_vline per edge was
    # quadratic: 33 s of a 400-window report); the same shapes as plotly's own add_vline
    import plotly.graph_objects as go

    from helm_plan.report.sections.workload import _add_window_edges

    run = make_run(n_windows=9)
    fig = go.Figure()
    fig.add_hline(y=1.0)  # a shape already there stays first
    _add_window_edges(fig, run)
    ref = go.Figure()
    ref.add_hline(y=1.0)
    for t in run.table("labels")["t_start_s"].to_list()[1:]:
        ref.add_vline(x=t, line={"color": "#b8c2cc", "width": 1, "dash": "dot"})
    assert len(fig.layout.shapes) == 9  # the hline and 8 edges
    assert fig.to_plotly_json()["layout"] == ref.to_plotly_json()["layout"]
