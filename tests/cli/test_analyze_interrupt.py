"""SIGINT mid-stage leaves only finished stage files; the next run resumes from them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import tomli_w
from conftest import small_table

from helm_plan import trace
from helm_plan.oracle import read_labels

PLAN = {
    "analyze": {"window_s": 5.0, "pool_fraction": 0.3, "n_boot": 50, "slo_ms": 0.5},
    "oracle": {"trials": 25, "coarse_step": 0.25},
    "curves": {"n_points": 11},
}


def _cmd(tp, out, plan):
    return [sys.executable, "-m", "helm_plan_cli.main", "analyze", str(tp), "-o", str(out),
            "--config", str(plan), "--quiet"]  # fmt: skip


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def test_sigint_mid_stage_then_resume(tmp_path):
    t = small_table(2000, n_users=200, n_items=3000, max_new=8, n_candidates=16, rate_qps=50.0)
    tp = trace.write(t, tmp_path / "t.parquet", {"source": "tests.small_table"})
    plan = tmp_path / "plan.toml"
    plan.write_text(tomli_w.dumps(PLAN))
    out = tmp_path / "out"
    proc = subprocess.Popen(_cmd(tp, out, plan), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list((out / ".stages").glob("curves-*.json")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "curves stage never finished"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)  # the oracle or the policies stage is running
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode()
    left = _files(out)
    # finished stages only: no temp files, no half-written stage, no final outputs, plus
    # run.json (the run directory's record of who last ran in it)
    assert left[-1] == "run.json", left
    done_stages = [f.split("/")[1].split("-")[0] for f in left[:-1]]
    assert all(f.startswith(".stages/") for f in left[:-1]), left
    assert {"inspect", "capacity", "curves"} <= set(done_stages) <= {
        "inspect", "capacity", "curves", "oracle"}, left  # fmt: skip
    for f in left[:-1]:
        if f.endswith(".json"):
            json.loads((out / f).read_text())  # complete, parseable
        else:
            read_labels(out / f)  # the oracle's labels, complete

    done = subprocess.run(_cmd(tp, out, plan), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    s = json.loads((out / "summary.json").read_text())
    # the second run reuses exactly the stages the first one finished
    assert sorted(s["stages_cached"]) == sorted(done_stages)
    assert not [f for f in _files(out) if f.endswith(".tmp") or "/." in f.replace(".stages/", "")]


def test_an_error_after_ctrl_c_is_reported_as_the_interruption(tmp_path):
    # A KeyboardInterrupt landing inside a ctypes callback (numba compiling) is swallowed
    # there and surfaces as another error; once SIGINT was taken, that is a Ctrl-C.
    from helm_plan_cli._interrupt import SIGNALLED
    from helm_plan_cli.app import app
    from typer.testing import CliRunner

    missing = str(tmp_path / "missing.parquet")
    plain = CliRunner().invoke(app, ["inspect", missing])
    assert plain.exit_code not in (0, 130)
    SIGNALLED.set()
    try:
        res = CliRunner().invoke(app, ["inspect", missing])
    finally:
        SIGNALLED.clear()
    assert res.exit_code == 130
    assert "interrupted; finished outputs are kept, rerun to resume" in res.output
