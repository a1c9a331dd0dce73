"""One colour per policy and per router name, held by each registered class and used by every chart."""

from __future__ import annotations

import pytest
from fake_run import make_fleet_run

from helm_plan.cluster.routers import ROUTERS
from helm_plan.policies import POLICY_FACTS
from helm_plan.report import colours
from helm_plan.report.sections.capacity import load_curves, pareto
from helm_plan.report.sections.policies import policy_p99
from helm_plan.report.sections.routing import ratio_spread


def _rgb(h: str) -> tuple[int, ...]:
    return tuple(int(h[i : i + 2], 16) for i in (1, 3, 5))


@pytest.mark.parametrize(
    ("names", "lookup"),
    [
        (set(POLICY_FACTS), colours.policy_colour),
        (set(ROUTERS), colours.router_colour),
        (set(ROUTERS), colours.router_symbol),
    ],
)
def test_every_shipped_name_has_its_own_colour_and_symbol(names, lookup):
    got = [lookup(n) for n in sorted(names)]
    assert "#333333" not in got and "circle-open" not in got  # no name falls to the default
    assert len(set(got)) == len(got)  # one per name, none shared
    if lookup is not colours.router_symbol:  # colours that differ by a hair are not distinct
        rgb = [_rgb(c) for c in got]
        gaps = [sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5
                for i, a in enumerate(rgb) for b in rgb[i + 1 :]]  # fmt: skip
        assert min(gaps) > 40


def test_a_policy_with_an_argument_takes_its_names_colour():
    assert colours.policy_colour("static:0.3") == POLICY_FACTS["static"].colour
    assert colours.policy_colour("controller:ctl.npz") == POLICY_FACTS["controller"].colour
    assert colours.policy_colour("nonesuch") not in {f.colour for f in POLICY_FACTS.values()}
    assert colours.router_colour("nonesuch") not in {c.colour for c in ROUTERS.values()}


def test_charts_take_their_colours_and_symbols_from_the_registry():
    run = make_fleet_run()
    fig = pareto(run)
    points = [t for t in fig.data if t.x[0] is not None]
    cap = run.table("capacity").drop_nulls("nodes")
    assert {t.name for t in points} == set(cap["policy"])
    for t in points:
        assert t.marker.color == colours.policy_colour(t.name)
        routers = cap.filter(cap["policy"] == t.name)["router"].to_list()
        assert list(t.marker.symbol) == [colours.router_symbol(r) for r in routers]
        assert all(f"{t.name} behind {r}" in h for h, r in zip(t.hovertext, routers, strict=True))
        assert "USD/day" in t.hovertemplate and "P99" in t.hovertemplate
    keys = [t for t in fig.data if t.x[0] is None]  # the routers' legend entries
    assert [t.marker.symbol for t in keys] == [colours.router_symbol(r) for r in
                                                cap["router"].unique(maintain_order=True)]  # fmt: skip
    curves = load_curves(run).data
    assert curves[-1].name == "analysed node" and curves[-1].marker.symbol == "star"
    for t in curves[:-1]:
        assert t.line.color == colours.policy_colour(t.name) and "QPS" in t.hovertemplate
    for t in policy_p99(run).data:
        assert t.line.color == colours.policy_colour(t.name)
    for t in ratio_spread(run).data:
        assert t.line.color == colours.router_colour(t.name)
