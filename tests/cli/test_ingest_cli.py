"""`helm-plan ingest`: one error line per malformed input, no output left; table and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

UDATA = (
    "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n244\t51\t2\t880606923\n"
)
TAOBAO = "1,2268318,2520377,pv,1511544070\n1,2333346,2520771,pv,1511561733\n2,2576651,149192,buy,1511572885\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


runner = CliRunner()


def _one_error_line(r) -> str:
    assert r.exit_code != 0
    text = r.stderr + r.stdout
    assert "Traceback" not in text
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("kind", "name", "content", "args", "msg"),
    [
        ("movielens", "u.data", UDATA + "5\t7\n", [], "line 5: truncated line"),
        ("taobao", "ub.csv", TAOBAO.replace(",", "\t"), [], "line 1: wrong delimiter"),
        ("taobao", "ub.csv", TAOBAO + "abc,1,1,pv,1\n", [], "line 4: non-numeric user id 'abc'"),
        ("movielens", "e.dat", "", [], "is empty"),
        (
            "imdb",
            "u.data",
            UDATA,
            [],
            "unknown kind 'imdb'; use one of movielens, amazon, taobao, mooncake, csv",
        ),
        (
            "movielens",
            "u.data",
            UDATA,
            ["--session-gap-s", "-3"],
            "session_gap_s must be positive, got -3.0",
        ),
        ("csv", "log.csv", "a,b\n1,2\n", ["--map", "user=a"], "csv kind needs a column map"),
    ],
)
def test_cli_errors(
    tmp_path: Path, kind: str, name: str, content: str, args: list[str], msg: str
) -> None:
    src = _write(tmp_path, name, content)
    out = tmp_path / "t.parquet"
    r = runner.invoke(app, ["ingest", kind, str(src), "-o", str(out), *args])
    assert msg in _one_error_line(r)
    assert not out.exists()


def test_cli_missing_file(tmp_path: Path) -> None:
    r = runner.invoke(
        app, ["ingest", "movielens", str(tmp_path / "none.dat"), "-o", str(tmp_path / "t.parquet")]
    )
    assert "not found" in _one_error_line(r)


def test_cli_success_table_and_json(tmp_path: Path) -> None:
    src = _write(tmp_path, "ub.csv", TAOBAO)
    out = tmp_path / "t.parquet"
    r = runner.invoke(
        app, ["ingest", "taobao", str(src), "-o", str(out), "--behaviors", "pv", "--qps", "10"]
    )
    assert r.exit_code == 0, r.output
    for key in (
        "rows read",
        "rows dropped",
        "requests",
        "users",
        "items",
        "behavior 'buy' not kept",
    ):
        assert key in r.stdout
    r = runner.invoke(
        app, ["ingest", "taobao", str(src), "-o", str(out), "--json", "--candidates", "64"]
    )
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert (
        rep["rows_read"] == 3
        and rep["requests"] == 3
        and rep["users"] == 2
        and rep["out"] == str(out)
    )
