"""`helm-plan simulate` and `helm-plan oracle` through typer's CliRunner."""

from __future__ import annotations

import json

import numpy as np
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan.oracle import read_labels
from helm_plan.profiles import load_model

runner = CliRunner()
COMMON = ["--window-s", "2", "--pool-fraction", "0.3"]


def _error_lines(res):
    return [ln for ln in res.output.splitlines() if ln.startswith("error:")]


def test_simulate_json_schema(small_trace):
    res = runner.invoke(
        app, ["simulate", str(small_trace), *COMMON, "--policy", "static:0.3", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == "1" and doc["policy"] == "static:0.3"
    assert (
        doc["refill"] == "throttled"
        and doc["slo_ms"] == load_model("gr-small").default_slo_ms
        and doc["window_s"] == 2.0
    )
    n = doc["overall"]["requests"] + sum(w["requests"] for w in doc["windows"] if not w["measured"])
    assert n == 400
    assert len(doc["windows"]) == 5 and all(w["ratio"] == 0.3 for w in doc["windows"])
    assert set(doc["overall"]) >= {"p50_ms", "p99_ms", "slo_attainment", "throughput_rps"}


def test_simulate_table_and_eager(small_trace):
    res = runner.invoke(
        app, ["simulate", str(small_trace), *COMMON, "--policy", "kv-max", "--realloc", "eager"]
    )
    assert res.exit_code == 0, res.output
    assert "p99_ms" in res.stdout and "per window" in res.stdout


def test_simulate_bad_policy_and_options(small_trace):
    for extra, msg in [
        (["--policy", "foo"], "error: unknown policy 'foo'; use best-static, emb-max, kv-max"),
        (["--slots", "0"], "error: slots must be a positive integer, got 0"),
        (["--realloc", "fast"], "error: unknown refill mode 'fast'; use one of lazy, eager"),
        (["--gpu", "tpu9"], "error: unknown gpu profile 'tpu9'"),
        (["--pool-bytes", "10", "--pool-fraction", "0.3"], "error: give --pool-bytes or"),
    ]:
        args = ["simulate", str(small_trace), "--window-s", "2", *extra]
        if "--pool-fraction" not in extra:
            args += ["--pool-fraction", "0.3"]
        res = runner.invoke(app, args)
        assert res.exit_code != 0
        errs = _error_lines(res)
        assert len(errs) == 1 and errs[0].startswith(msg), res.output


def test_oracle_writes_labels_and_schedule_replays_them(small_trace, tmp_path):
    out = tmp_path / "labels.parquet"
    res = runner.invoke(
        app,
        ["oracle", str(small_trace), *COMMON, "--trials", "5", "--workers", "1", "-o", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert "wrote" in res.stdout
    lab = read_labels(out)
    assert lab.table.height == 5 and np.all(np.isfinite(lab.r_star))
    res = runner.invoke(
        app,
        ["simulate", str(small_trace), *COMMON, "--policy", f"schedule:{out}", "--json"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    np.testing.assert_allclose([w["ratio"] for w in doc["windows"]], lab.r_star)


def test_oracle_grid_mode(small_trace, tmp_path):
    out = tmp_path / "grid.parquet"
    res = runner.invoke(
        app,
        [
            "oracle",
            str(small_trace),
            *COMMON,
            "--grid",
            "0.05",
            "--workers",
            "1",
            "-o",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    assert read_labels(out).meta["oracle"]["grid_step"] == 0.05


def test_oracle_bad_options_leave_no_file(small_trace, tmp_path):
    out_dir = tmp_path / "out"
    out = out_dir / "labels.parquet"
    for extra, msg in [
        (["--sampler", "cma"], "error: unknown sampler 'cma'; use one of tpe, gp"),
        (["--trials", "-1"], "error: trials must be an integer >= 0, got -1"),
        (["--grid", "0"], "error: grid_step must be positive, got 0.0"),
        (["--slo-ms", "0"], "error: slo_ms must be positive, got 0.0"),
        (["--latency", "nope"], "error: unknown latency profile 'nope'"),
    ]:
        res = runner.invoke(app, ["oracle", str(small_trace), *COMMON, *extra, "-o", str(out)])
        assert res.exit_code != 0
        errs = _error_lines(res)
        assert len(errs) == 1 and errs[0].startswith(msg), res.output
        assert not out.exists() and (not out_dir.exists() or list(out_dir.iterdir()) == [])


def test_oracle_missing_trace(tmp_path):
    res = runner.invoke(app, ["oracle", str(tmp_path / "none.parquet"), "-o", str(tmp_path / "x")])
    assert res.exit_code != 0
    assert _error_lines(res)[0].startswith("error: trace file")
    assert not (tmp_path / "x").exists()


def test_oracle_cli_carry_mode_and_bad_mode(small_trace, tmp_path):
    from helm_plan_cli.main import app
    from typer.testing import CliRunner

    from helm_plan.oracle import read_labels

    out = tmp_path / "carry.parquet"
    args = ["oracle", str(small_trace), "-o", str(out), "--trials", "2", "--window-s", "2"]
    res = CliRunner().invoke(app, [*args, "--warmup", "carry", "-q"])
    assert res.exit_code == 0, res.output
    assert read_labels(out).meta["oracle"]["warmup"] == "carry"
    bad = tmp_path / "bad.parquet"
    res = CliRunner().invoke(app, [*args[:2], "-o", str(bad), "--warmup", "forever"])
    assert res.exit_code == 2 and "unknown warmup 'forever'" in res.output
    assert not bad.exists()
