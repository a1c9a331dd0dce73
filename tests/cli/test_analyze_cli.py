"""`helm-plan analyze` / `report` CLI: bad input gives one `error:` line; plan and flag precedence."""

from __future__ import annotations

import pytest
import tomli_w
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan.analyze import (
    DEMO_COLD_WORKERS,
    DEMO_POOL_FRACTION,
    DEMO_WORKERS,
    AnalyzeConfig,
    build_config,
    demo_plan,
)
from helm_plan.cache.curves import CurvesConfig
from helm_plan.errors import ConfigError

runner = CliRunner()


def _one_error(res):
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code != 0
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def test_missing_trace_is_one_error_line(tmp_path):
    line = _one_error(runner.invoke(app, ["analyze", str(tmp_path / "nope.parquet"), "-q"]))
    assert "not found" in line
    line = _one_error(runner.invoke(app, ["analyze", "-q"]))
    assert "missing TRACE" in line and "--demo" in line


def test_bad_plan_key_is_one_error_line(tmp_path, small_trace):
    plan = tmp_path / "plan.toml"
    plan.write_text(tomli_w.dumps({"oracle": {"trails": 3}}))
    line = _one_error(runner.invoke(app, ["analyze", str(small_trace), "--config", str(plan)]))
    assert "[oracle] unknown option 'trails'" in line and "trials" in line
    plan.write_text(tomli_w.dumps({"routing": {"x": 1}}))
    line = _one_error(runner.invoke(app, ["analyze", str(small_trace), "--config", str(plan)]))
    assert "unknown plan section [routing]" in line
    line = _one_error(runner.invoke(app, ["analyze", str(small_trace), "--config", "no.toml"]))
    assert "plan file no.toml not found" in line


def test_report_without_store_is_one_error_line(tmp_path):
    line = _one_error(runner.invoke(app, ["report", str(tmp_path)]))
    assert "helm.duckdb" in line


def test_flags_override_plan_which_overrides_defaults():
    plan = {"analyze": {"slo_ms": 20.0, "window_s": 4.0, "seed": 5}, "oracle": {"trials": 7},
            "node": {"throttle_share": 0.5}}  # fmt: skip
    cfg = build_config(plan, {"slo_ms": 30.0, "gpu": None})
    assert cfg.slo_ms == 30.0 and cfg.window_s == 4.0 and cfg.gpu == "a100-80g"
    # the shared settings reach the stage configs through the config's own methods (the raw
    # sections are never patched)
    node = cfg.node_config(30.0)
    assert node.slo_ms == 30.0 and node.window_s == 4.0 and cfg.curves_config().window_s == 4.0
    assert cfg.oracle_config().seed == 5 and cfg.oracle.trials == 7
    assert node.throttle_share == 0.5 and cfg.node.slo_ms is None
    with pytest.raises(ConfigError, match=r"\[node\] slo_ms is set in \[analyze\]"):
        build_config({"node": {"slo_ms": 1.0}})
    with pytest.raises(ConfigError, match="slo_ms must be positive"):
        build_config({}, {"slo_ms": -1.0})
    d = demo_plan({"oracle": {"trials": 3}})
    assert d["analyze"]["pool_fraction"] == DEMO_POOL_FRACTION and d["oracle"]["trials"] == 3
    # the demo runs on the two cores it is sized for unless told otherwise
    assert build_config(demo_plan()).workers == DEMO_WORKERS == 2 and AnalyzeConfig().workers == 1
    assert build_config(demo_plan({"analyze": {"workers": 1}})).workers == 1
    assert build_config(demo_plan(), {"workers": 3}).workers == 3
    # on a cold numba cache one worker, beside the compile-ahead process (unless turned off)
    assert build_config(demo_plan(cold=True)).workers == DEMO_COLD_WORKERS == 1
    assert build_config(demo_plan({"analyze": {"workers": 2}}, cold=True)).workers == 2
    off = {"analyze": {"precompile": False}}
    assert build_config(demo_plan(off, cold=True)).workers == DEMO_WORKERS
    # the no-KV-cache curve: off unless asked, in every path to the config; the demo asks
    assert not AnalyzeConfig().curves.worst_case and not build_config().curves.worst_case
    assert not build_config({"curves": {"n_points": 5}}).curves.worst_case
    assert build_config({"curves": {"worst_case": True}}).curves.worst_case
    assert build_config(demo_plan()).curves.worst_case
    assert not build_config(demo_plan({"curves": {"worst_case": False}})).curves.worst_case
    assert CurvesConfig().worst_case  # the library and `profile` measure all three


def test_demo_and_trace_together_is_an_error(small_trace):
    line = _one_error(runner.invoke(app, ["analyze", str(small_trace), "--demo"]))
    assert "not both" in line


def test_a_spill_folder_that_is_not_there_is_one_error_line(tmp_path, small_trace):
    out = tmp_path / "run"
    args = ["analyze", str(small_trace), "-o", str(out), "-q", "--spill-dir", str(tmp_path / "no")]
    line = _one_error(runner.invoke(app, args))
    assert f"cannot spill to {tmp_path / 'no'}" in line and "writable folder" in line
    assert not (out / "summary.json").exists()
