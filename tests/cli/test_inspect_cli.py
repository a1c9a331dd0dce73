"""`helm-plan inspect`: JSON equals the library's figures, the table shows them, bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan.inspect import inspect_trace
from helm_plan.profiles import load_model

runner = CliRunner()


def test_cli_inspect_json_and_table(small_trace: Path) -> None:
    r = runner.invoke(app, ["inspect", str(small_trace), "--json", "--model", "gr-small"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc.pop("command") == "inspect"
    assert doc == inspect_trace(small_trace, load_model("gr-small")).to_json()
    r = runner.invoke(app, ["inspect", str(small_trace), "-q"])
    assert r.exit_code == 0, r.output
    for key in ("requests", "zipf_alpha", "qps_cv", "history_len_p95"):
        assert key in r.stdout


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["/nonexistent/x.parquet"], "error: trace file /nonexistent/x.parquet not found"),
        (["{small}", "--model", "nope"], "error: unknown model profile 'nope'"),
    ],
)
def test_cli_inspect_bad_input(small_trace: Path, args: list[str], msg: str) -> None:
    args = [a.replace("{small}", str(small_trace)) for a in args]
    r = runner.invoke(app, ["inspect", *args, "-q"])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(msg), r.stderr
