"""`helm-plan train` and `helm-plan validate` through typer's CliRunner."""

from __future__ import annotations

import json

from controller_fixtures import write_small_trace
from helm_plan_cli.main import app
from typer.testing import CliRunner

runner = CliRunner()
COMMON = ["--window-s", "5", "--pool-fraction", "0.1", "--seed", "3"]


def test_train_then_validate(tmp_path):
    synth_trace_file = write_small_trace(tmp_path / "small-burst.parquet")
    out = tmp_path / "c.npz"
    labels = tmp_path / "labels.npz"
    res = runner.invoke(app, ["train", str(synth_trace_file), "-o", str(out), *COMMON,
                              "--timesteps", "128", "--save-labels", str(labels), "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["command"] == "train" and doc["seed"] == 3 and out.exists()
    # label sets train too, without labelling again
    out2 = tmp_path / "c2.npz"
    res = runner.invoke(app, ["train", str(labels), "-o", str(out2), "--seed", "3",
                              "--timesteps", "128", "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "trained on 1 traces" in res.stdout
    res = runner.invoke(app, ["validate", str(out), str(synth_trace_file), *COMMON, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (f,) = doc["traces"]
    assert {"controller", "best-static", "oracle", "threshold", "hill-climb"} <= set(f["p99_ms"])
    assert {"abs_dr_narrow", "fallback_share", "latency_us", "controller_vs_threshold"} <= set(f)
    assert f["latency_us"]["n"] == f["windows"] - 1  # measured in this run, every decision
    res = runner.invoke(app, ["validate", str(out), str(synth_trace_file), *COMMON, "--quiet"])
    assert res.exit_code == 0, res.output
    assert "controller" in res.stdout and "│" in res.stdout
    assert "use best static" in res.stdout or "deploy the controller" in res.stdout
    assert "measured in this run" in res.stdout


def test_validate_missing_controller(tmp_path):
    synth_trace_file = write_small_trace(tmp_path / "small-burst.parquet")
    res = runner.invoke(app, ["validate", str(tmp_path / "no.npz"), str(synth_trace_file)])
    assert res.exit_code == 2
    assert "controller file" in res.output and "not found" in res.output
