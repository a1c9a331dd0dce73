"""The report's Controller section: "use best static" unless the controller's gain is
significant, and the decision latency measured in the run, the card's labelled as the card's."""

from __future__ import annotations

import polars as pl

from helm_plan.report.controller import controller_summary, recommendation
from helm_plan.report.store import RunData


def _run(gain: float, lo: float, hi: float) -> RunData:
    pols = pl.DataFrame({"policy": ["best-static", "controller"], "p99_ms": [10.0, 10.0 * (1 - gain)],
                         "slo_attainment": [1.0, 1.0], "mean_abs_dr": [0.0, 0.1]})  # fmt: skip
    ad = pl.DataFrame({"policy": ["controller"], "p99_reduction": [gain], "ci_low": [lo],
                       "ci_high": [hi]})  # fmt: skip
    meta = {"oracle_p99_ms": 9.0, "best_static_ratio": 0.35,
            "controller_decision_latency_us": {"median": 41.0, "p99": 80.0, "n": 29},
            "controller_card_latency_us": {"median": 6.0, "p99": 14.0},
            "controller_guard": {"anchor": 0.35, "anchor_given": False, "fallback_share": 0.1,
                                 "override_share": 0.5}}  # fmt: skip
    return RunData({"policies": pols, "adaptivity": ad}, meta)


def test_use_best_static_unless_the_gain_is_significant():
    s = controller_summary(_run(0.01, -0.004, 0.02))
    assert s["recommendation"].startswith("Use best static (r = 0.35)")
    s = controller_summary(_run(-0.03, -0.05, -0.01))
    assert s["recommendation"].startswith("Use best static")
    s = controller_summary(_run(0.06, 0.02, 0.09))
    assert s["recommendation"].startswith("Deploy the controller") and "6.0%" in s["recommendation"]
    assert recommendation({}).startswith("Use best static")


def test_latency_is_the_runs_and_the_cards_is_labelled():
    s = controller_summary(_run(0.0, -0.01, 0.01))
    assert s["decision_latency_us"] == {"median": 41.0, "p99": 80.0, "n": 29}
    assert "measured in this run" in s["decision_latency_source"]
    assert s["card_decision_latency_us"]["median"] == 6.0
    assert s["guard"]["fallback_share"] == 0.1


def _fleet_run(gain: float, lo: float, ctrl: tuple[int, float] | None) -> RunData:
    run = _run(gain, lo, gain + 0.03)
    run.meta["operating"] = {"nodes": 4, "gpu": "a100-80g", "router": "helm"}
    rows = [("best-static", "helm", 4, 2.0), ("best-static", "jsq", 5, 1.0)]
    rows += [("controller", "helm", *ctrl)] if ctrl else []
    rows += [("controller", "jsq", 3, 0.5)]  # another router's row: never the operating one's
    cap = pl.DataFrame({"gpu": ["a100-80g"] * len(rows), "policy": [r[0] for r in rows],
                        "router": [r[1] for r in rows], "nodes": [r[2] for r in rows],
                        "p99_ms": [r[3] for r in rows]})  # fmt: skip
    return RunData({**run.tables, "capacity": cap}, run.meta)


def test_a_fleet_deploys_the_controller_only_where_every_node_running_it_plans_no_worse():
    # one node's significant gain, but a controller on each of the fleet's nodes plans worse
    s = controller_summary(_fleet_run(0.2, 0.1, (5, 1.5)))["recommendation"]
    assert s.startswith("Use best static (r = 0.35): on this node alone the controller beats it")
    assert "needs 5 nodes (P99 1.5 ms) against best static's 4 (P99 2 ms)" in s
    s = controller_summary(_fleet_run(0.2, 0.1, (4, 2.5)))["recommendation"]  # same N, worse P99
    assert s.startswith("Use best static")
    s = controller_summary(_fleet_run(0.2, 0.1, (4, 1.8)))["recommendation"]
    assert s.startswith("Deploy the controller: it beats best static (r = 0.35) by 20.0%")
    assert "needs 4 nodes (P99 1.8 ms) against best static's 4 (P99 2 ms)" in s
    # no controller row behind the operating router: say so, do not claim the fleet
    s = controller_summary(_fleet_run(0.2, 0.1, None))["recommendation"]
    assert s.startswith("Deploy the controller on this node") and "before deploying" in s
    # the one-node verdict to use best static is never overturned by the fleet
    s = controller_summary(_fleet_run(0.01, -0.01, (3, 1.0)))["recommendation"]
    assert s.startswith("Use best static (r = 0.35): the controller does not beat it here")
