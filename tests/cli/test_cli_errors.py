"""The CLI's error contract: one line and a non-zero exit, a traceback only with --debug."""

from __future__ import annotations

import subprocess
import sys

from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan.errors import TraceError


def test_user_error_is_one_line_without_traceback(tmp_path):
    res = CliRunner().invoke(app, ["inspect", str(tmp_path / "missing.parquet")])
    assert res.exit_code == 2
    lines = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert lines == [
        f"error: trace file {tmp_path / 'missing.parquet'} not found; "
        "check the path, or create one with `helm-plan synth`"
    ]
    assert "Traceback" not in res.output


def test_debug_reraises_the_library_exception(tmp_path):
    res = CliRunner().invoke(app, ["--debug", "inspect", str(tmp_path / "missing.parquet")])
    assert res.exit_code != 0
    assert isinstance(res.exception, TraceError)


def test_console_script_debug_prints_traceback(tmp_path):
    cmd = [sys.executable, "-m", "helm_plan_cli.main"]
    missing = str(tmp_path / "missing.parquet")
    plain = subprocess.run([*cmd, "inspect", missing], capture_output=True, text=True)
    debug = subprocess.run([*cmd, "--debug", "inspect", missing], capture_output=True, text=True)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().count("\n") == 0
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "TraceError" in debug.stderr


def test_unknown_profile_lists_the_shipped_ones(tmp_path):
    res = CliRunner().invoke(app, ["profiles", "--json"])
    assert res.exit_code == 0
    res = CliRunner().invoke(
        app,
        [
            "profile",
            str(tmp_path / "t.parquet"),
            "--model",
            "gr-huge",
            "-o",
            str(tmp_path / "c.parquet"),
        ],
    )
    assert res.exit_code == 2
    assert not (tmp_path / "c.parquet").exists()


CLOSED_STDOUT = """
import sys
import rich.console
from helm_plan_cli.main import main

def gone(*a, **kw):  # what a print does once the reader of stdout has gone (`| head`)
    raise BrokenPipeError(32, "Broken pipe")

rich.console.Console.print = gone
sys.argv = ["helm-plan", "profiles"]
main()
"""


def test_a_closed_stdout_ends_quietly_not_as_a_bug():
    # a BrokenPipeError in a command used to be reported as "internal error ... a bug"
    out = subprocess.run([sys.executable, "-c", CLOSED_STDOUT], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr == "", out.stderr
