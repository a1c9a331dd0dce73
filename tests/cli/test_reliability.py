"""README's reliability promises: each is quoted here with the test named after it.

The first test checks that every promise is still in README.md word for word and that its
test exists, so the README and the suite cannot drift apart; the others are the promises'
tests not kept elsewhere (JSON and --quiet everywhere, a full disk).
"""

from __future__ import annotations

import errno
import json
import re

import pytest
from conftest import REPO, small_table
from file_options import commands
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import io, trace

PROMISES = {
    "prints `error: <problem>; <fix>` on one line and exits 2 on bad input":
        "tests/cli/test_hostile.py::test_hostile_input_is_one_line_exit_2_and_loses_nothing",
    "Ctrl-C prints one line and exits 130 (worker processes stop with it)":
        "tests/cli/test_interrupt_workers.py::"
        "test_ctrl_c_during_parallel_oracle_is_one_line_and_stops_the_workers",
    "Every command that prints results takes `--json`":
        "tests/cli/test_reliability.py::test_every_command_takes_json_and_quiet",
    "NaN and infinities are `null`":
        "tests/cli/test_reliability.py::test_json_is_strict_with_nan_as_null",
    "No command writes over one of its inputs":
        "tests/cli/test_files_guard.py::test_no_command_writes_over_any_of_its_inputs",
    "two outputs of one command on the same file are refused before any work":
        "tests/cli/test_files_guard.py::test_two_outputs_of_one_command_on_one_file_are_refused",
    "an output path that is a folder or not writable":
        "tests/cli/test_files_guard.py::"
        "test_an_output_that_cannot_be_written_is_refused_before_any_work",
    "Outputs are written atomically, so an error, Ctrl-C or a full disk leaves no partial file":
        "tests/cli/test_reliability.py::test_a_full_disk_is_one_line_and_leaves_no_partial_file",
    "refused with one line and never run":
        "tests/controller/test_checks.py::test_a_nan_controller_is_never_run",
    "gets a clear error where a rate is needed":
        "tests/cli/test_degenerate_traces.py::test_plan_and_analyze_need_an_arrival_rate",
    "Bounds say why they are there":
        "tests/cli/test_hostile.py::test_hostile_input_is_one_line_exit_2_and_loses_nothing",
    "**One SLO rule**":
        "tests/cli/test_slo_rule.py::test_every_command_with_an_slo_defaults_to_the_models_default_slo",
    "larger than what the GPU leaves for caches":
        "tests/cli/test_hostile.py::test_hostile_input_is_one_line_exit_2_and_loses_nothing",
    "`helm-plan --version` prints the version":
        "tests/cli/test_cli_surface.py::test_version_prints_the_package_version",
}  # fmt: skip


def test_every_readme_promise_has_its_test():
    readme = " ".join((REPO / "README.md").read_text().split())
    for promise, node in PROMISES.items():
        assert " ".join(promise.split()) in readme, f"README no longer promises: {promise}"
        path, name = node.split("::")
        assert re.search(rf"^def {name}\(", (REPO / path).read_text(), re.M), node


def test_every_command_takes_json_and_quiet():
    for name, cmd in commands().items():
        opts = {o for p in cmd.params for o in p.opts}
        assert {"--json", "--quiet"} <= opts, name


def test_json_is_strict_with_nan_as_null(tmp_path):
    # two requests 100 s apart: the windows between them are empty, their P99 is NaN
    t = small_table(2)
    trace.write(t.set_column(0, "ts_s", __import__("pyarrow").array([0.0, 100.0])),
                tmp_path / "gap.parquet", {"source": "tests"})  # fmt: skip
    r = CliRunner().invoke(app, ["simulate", str(tmp_path / "gap.parquet"), "--policy",
                                 "static:0.5", "--json", "-q"])  # fmt: skip
    assert r.exit_code == 0, r.output

    def refuse(token):
        raise AssertionError(f"invalid JSON token {token}")

    doc = json.loads(r.stdout, parse_constant=refuse)
    assert list(doc)[:2] == ["schema_version", "command"] and doc["command"] == "simulate"
    assert None in [w["p99_ms"] for w in doc["windows"]]  # an empty window's NaN


def test_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(io.os, "fsync", full)
    r = CliRunner().invoke(app, ["synth", "--qps", "20", "--duration-s", "5", "-o", "s.parquet"])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: no room to write s.parquet") and "free space" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_under_the_run_store_leaves_no_store_and_no_log(tmp_path, monkeypatch):
    import duckdb

    from helm_plan.report import store

    real = duckdb.connect

    def connect(path, *a, **kw):  # DuckDB's own I/O: no OSError, its IOException
        con = real(path, *a, **kw)

        class Full:
            def __getattr__(self, name):
                return getattr(con, name)

            def execute(self, sql, *args):
                if sql.startswith("CHECKPOINT"):
                    raise duckdb.IOException("Could not write file: No space left on device")
                return con.execute(sql, *args)

        return Full()

    monkeypatch.setattr(store.duckdb, "connect", connect)
    with pytest.raises(Exception, match="cannot write the run store .*No space left") as e:
        store.write_store(tmp_path / "helm.duckdb", store.RunData(tables={}, meta={"a": 1}))
    assert "free space" in e.value.hint
    assert list(tmp_path.iterdir()) == []  # no store, no temporary, no write-ahead log
