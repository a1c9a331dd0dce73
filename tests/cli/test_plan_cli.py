"""`helm-plan plan` through typer's CliRunner: the JSON document, plan.json, the table and errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import small_table
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import trace

runner = CliRunner()
ARGS = ["--gpus", "a100-80g", "--policies", "static:0.5,emb-max", "--routers", "jsq,helm",
        "--slo-ms", "5", "--pool-fraction", "0.3", "--window-s", "2", "--max-nodes", "8",
        "--cost-per-hour", "a100-80g=2"]  # fmt: skip


@pytest.fixture
def tr(tmp_path):
    p = tmp_path / "t.parquet"
    trace.write(small_table(1200, n_users=80, rate_qps=200.0, seed=1), p, {"source": "test"})
    return p


def test_json_and_plan_file_agree(tr, tmp_path):
    out = tmp_path / "plan.json"
    res = runner.invoke(app, ["plan", str(tr), *ARGS, "--scale", "3", "--json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["command"] == "plan" and doc["schema_version"] == 1
    assert json.loads(out.read_text())["capacity"] == doc["capacity"]
    rows = {(r["policy"], r["router"]): r for r in doc["capacity"]}
    # 2 policies x 2 routers, plus the best-static + jsq baseline every saving is measured from
    assert set(rows) == {(p, r) for p in ("static:0.5", "emb-max") for r in ("jsq", "helm")} | {
        ("best-static", "jsq")
    }
    assert rows[("best-static", "jsq")]["baseline"]
    for r in doc["capacity"]:
        if r["nodes"] is not None:
            assert r["usd_per_day"] == pytest.approx(r["nodes"] * 2.0 * 24)
    assert doc["scaling"]["factor"] == 3 and doc["scaling"]["method"] == "users"
    assert doc["answer"] and doc["load_curve"]


def test_table_names_the_cheapest_fleet(tr):
    res = runner.invoke(app, ["plan", str(tr), *ARGS, "--no-load-curve", "--quiet"])
    assert res.exit_code == 0, res.output
    assert "base" in res.output and "Cheapest:" in res.output and "emb-max" in res.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--peak-qps", "100", "--scale", "2"], "--peak-qps or --scale, not both"),
        (["--cost-per-hour", "a100-80g"], "is not GPU=USD"),
        (["--cost-per-hour", "h100-80g=3"], "GPUs not planned"),
        (["--routers", ","], "--routers is empty"),
        (["--attainment", "1.5"], "attainment"),
    ],
)
def test_bad_options_are_one_line(tr, extra, needle):
    res = runner.invoke(app, ["plan", str(tr), *ARGS, *extra])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.output


@pytest.mark.parametrize("kind", ["not parquet", "unsorted"])
def test_a_bad_trace_is_one_line_and_writes_nothing(tmp_path, kind):
    # the plan loads with the streaming loader: its errors reach the user as one line
    p = tmp_path / "bad.parquet"
    if kind == "not parquet":
        p.write_text("user,item\n1,2\n")
        needle = "cannot read"
    else:
        t = small_table(50, seed=2)
        ts = t.column("ts_s").to_numpy()[::-1].copy()
        pq.write_table(t.set_column(0, "ts_s", pa.array(ts)), p)
        needle = "timestamps not sorted"
    out = tmp_path / "plan.json"
    res = runner.invoke(app, ["plan", str(p), *ARGS, "-o", str(out)])
    assert res.exit_code != 0
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.output
    assert not out.exists()


def test_with_workers_the_plan_reads_the_workers_copy_of_the_trace(tr, monkeypatch):
    from helm_plan_cli.commands import plan_cmd

    from helm_plan.errors import ConfigError

    seen = {}

    def fake_plan(arrays, cfg, *, executor, progress):
        base = arrays.hist_values
        while getattr(base, "base", None) is not None:
            base = base.base
        seen["holder"] = type(getattr(base, "obj", base)).__name__
        raise ConfigError("stop here", hint="a test")

    monkeypatch.setattr(plan_cmd, "plan", fake_plan)
    res = runner.invoke(app, ["plan", str(tr), *ARGS, "--workers", "2"])
    assert "stop here" in res.output
    # the trace's arrays are views of the workers' shared-memory block, not a private copy
    assert seen["holder"] == "mmap"
    res = runner.invoke(app, ["plan", str(tr), *ARGS])  # one worker: nothing to share
    assert seen["holder"] != "mmap"
