"""`helm-plan cluster` through typer's CliRunner: one run, a grid, and the error contract."""

from __future__ import annotations

import json

import pytest
from conftest import small_table
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import trace
from helm_plan.cluster import ClusterConfig
from helm_plan.cluster.compare import run_point
from helm_plan.sim import NodeConfig, load_context

runner = CliRunner()
ARGS = ["--nodes", "3", "--window-s", "2", "--pool-fraction", "0.3", "--slo-ms", "5"]


@pytest.fixture
def tr(tmp_path):
    p = tmp_path / "t.parquet"
    trace.write(small_table(1200, n_users=80, rate_qps=200.0, seed=1), p, {"source": "test"})
    return p


def test_one_run_json_matches_the_library(tr):
    res = runner.invoke(app, ["cluster", str(tr), *ARGS, "--router", "kv-overlap",
                              "--policy", "static:0.4", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["command"] == "cluster" and doc["nodes"] == 3 and len(doc["points"]) == 1
    pt = doc["points"][0]
    assert (pt["router"], pt["policy"], pt["refill"]) == ("kv-overlap", "static:0.4", "throttled")
    assert (
        len(pt["nodes"]) == 3
        and sum(n["requests"] for n in pt["nodes"]) == pt["overall"]["requests"]
    )
    ctx = load_context(tr, pool_fraction=0.3)
    cfg = ClusterConfig(nodes=3, router="kv-overlap", node=NodeConfig(window_s=2, slo_ms=5))
    ref = run_point(ctx, cfg, "static:0.4")
    assert pt["overall"]["p99_ms"] == ref.overall["p99_ms"]
    assert pt["overall"]["imbalance_cv"] == ref.overall["imbalance_cv"]


def test_grid_table_json_and_workers_agree(tr):
    grid = ["--routers", "round-robin,helm", "--policies", "kv-max,static:0.5"]
    one = runner.invoke(app, ["cluster", str(tr), *ARGS, *grid, "--json"])
    two = runner.invoke(app, ["cluster", str(tr), *ARGS, *grid, "--json", "--workers", "2"])
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    d1, d2 = json.loads(one.output), json.loads(two.output)
    assert [(p["router"], p["policy"]) for p in d1["points"]] == [
        ("round-robin", "kv-max"), ("round-robin", "static:0.5"), ("helm", "kv-max"),
        ("helm", "static:0.5"),
    ]  # fmt: skip
    assert d1["points"] == d2["points"]  # the answer does not depend on the worker count
    table = runner.invoke(app, ["cluster", str(tr), *ARGS, *grid, "-q"])
    assert table.exit_code == 0
    assert "round-robin" in table.output and "static:0.5" in table.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--router", "fastest"], "error: unknown router 'fastest'; use one of round-robin"),
        (["--policy", "oracle"], "no per-node meaning in a cluster; use best-static (one r"),
        (["--routers", ","], "error: --routers is empty; pass a comma list"),
        (["--nodes", "0"], "error: nodes must be a positive integer, got 0"),
    ],
)
def test_user_errors_are_one_line(tr, extra, message):
    res = runner.invoke(app, ["cluster", str(tr), "--window-s", "2", *extra])
    assert res.exit_code == 2
    lines = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and message in lines[0]
    assert "Traceback" not in res.output
