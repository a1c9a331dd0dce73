"""Junk in every file every command reads: one error line, never an internal error.

Random bytes, a zip header and plain text stand in for each trace, profile, controller, label
set, arrival log, plan file and run store a command reads (issue 36: no malformed file yields
``internal error``); the last test checks every file option of the app is tried.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from file_options import commands, file_options
from helm_plan_cli.main import app
from hostile_ws import snapshot
from typer.testing import CliRunner

from helm_plan.controller.runtime import DEFAULT_PATH

#: Every file a command reads, given as a file of junk: (case, option, argv with {} for the
#: file, suffix).
FILE_SLOTS = [
    ("ingest-PATH", "PATH", ["ingest", "movielens", "{}", "-o", "o.parquet"], ".data"),
    ("ingest-csv-PATH", "PATH", ["ingest", "csv", "{}", "--map", "user=user,item=item", "-o", "o.parquet"],
     ".csv"),
    ("ingest-arrivals", "--arrivals", ["ingest", "movielens", "u.data", "--arrivals", "{}", "--qps", "5", "-o",
                         "o.parquet"], ".csv"),
    ("synth-like", "--like", ["synth", "--like", "{}", "-o", "s.parquet"], ".parquet"),
    ("inspect-TRACE", "TRACE", ["inspect", "{}"], ".parquet"),
    ("inspect-model", "--model", ["inspect", "t.parquet", "--model", "{}"], ".toml"),
    ("profile-TRACE", "TRACE", ["profile", "{}", "-o", "c.parquet"], ".parquet"),
    ("profile-gpu", "--gpu", ["profile", "t.parquet", "--gpu", "{}", "-o", "c.parquet"], ".toml"),
    ("profile-model", "--model", ["profile", "t.parquet", "--model", "{}", "-o", "c.parquet"], ".toml"),
    ("calibrate-model", "--model", ["calibrate", "--quick", "--model", "{}", "-o", "l.toml"], ".toml"),
    ("fit-TRACE", "TRACE", ["fit", "{}"], ".parquet"),
    ("fit-gpu", "--gpu", ["fit", "t.parquet", "--gpu", "{}"], ".toml"),
    ("fit-model", "--model", ["fit", "t.parquet", "--model", "{}"], ".toml"),
    ("fit-latency", "--latency", ["fit", "t.parquet", "--latency", "{}"], ".toml"),
    ("simulate-TRACE", "TRACE", ["simulate", "{}"], ".parquet"),
    ("simulate-gpu", "--gpu", ["simulate", "t.parquet", "--gpu", "{}"], ".toml"),
    ("simulate-model", "--model", ["simulate", "t.parquet", "--model", "{}"], ".toml"),
    ("simulate-latency", "--latency", ["simulate", "t.parquet", "--latency", "{}"], ".toml"),
    ("simulate-schedule", "--policy", ["simulate", "t.parquet", "--policy", "schedule:{}"], ".parquet"),
    ("simulate-controller", "--policy", ["simulate", "t.parquet", "--policy", "controller:{}"], ".npz"),
    ("cluster-TRACE", "TRACE", ["cluster", "{}", "--nodes", "2"], ".parquet"),
    ("cluster-gpu", "--gpu", ["cluster", "t.parquet", "--gpu", "{}"], ".toml"),
    ("cluster-model", "--model", ["cluster", "t.parquet", "--model", "{}"], ".toml"),
    ("cluster-latency", "--latency", ["cluster", "t.parquet", "--latency", "{}"], ".toml"),
    ("cluster-schedule", "--policy", ["cluster", "t.parquet", "--policy", "schedule:{}"], ".parquet"),
    ("cluster-controller", "--policies", ["cluster", "t.parquet", "--policies", "kv-max,controller:{}"], ".npz"),
    ("plan-TRACE", "TRACE", ["plan", "{}"], ".parquet"),
    ("plan-gpus", "--gpus", ["plan", "t.parquet", "--gpus", "{}"], ".toml"),
    ("plan-model", "--model", ["plan", "t.parquet", "--model", "{}"], ".toml"),
    ("plan-latency", "--latency", ["plan", "t.parquet", "--gpus", "a100-80g", "--latency", "{}"], ".toml"),
    ("plan-controller", "--policies", ["plan", "t.parquet", "--policies", "controller:{}"], ".npz"),
    ("oracle-TRACE", "TRACE", ["oracle", "{}", "-o", "l.parquet"], ".parquet"),
    ("oracle-gpu", "--gpu", ["oracle", "t.parquet", "--gpu", "{}", "-o", "l.parquet"], ".toml"),
    ("oracle-model", "--model", ["oracle", "t.parquet", "--model", "{}", "-o", "l.parquet"], ".toml"),
    ("oracle-latency", "--latency", ["oracle", "t.parquet", "--latency", "{}", "-o", "l.parquet"], ".toml"),
    ("train-labels", "INPUTS", ["train", "{}", "-o", "c.npz"], ".npz"),
    ("train-TRACE", "INPUTS", ["train", "{}", "-o", "c.npz"], ".parquet"),
    ("validate-CONTROLLER", "CONTROLLER", ["validate", "{}", "t.parquet"], ".npz"),
    ("validate-TRACE", "TRACES", ["validate", str(DEFAULT_PATH), "{}"], ".parquet"),
    ("analyze-TRACE", "TRACE", ["analyze", "{}"], ".parquet"),
    ("analyze-config", "--config", ["analyze", "t.parquet", "--config", "{}"], ".toml"),
    ("analyze-gpu", "--gpu", ["analyze", "t.parquet", "--gpu", "{}"], ".toml"),
    ("analyze-gpus", "--gpus", ["analyze", "t.parquet", "--gpus", "{}"], ".toml"),
    ("atlas-config", "--config", ["atlas", "--config", "{}", "-o", "d"], ".toml"),
    ("analyze-model", "--model", ["analyze", "t.parquet", "--model", "{}"], ".toml"),
    ("analyze-latency", "--latency", ["analyze", "t.parquet", "--latency", "{}"], ".toml"),
    ("report-RUN_DIR", "RUN_DIR", ["report", "{}"], "/helm.duckdb"),
    ("datasets-FOLDER", "FOLDER", ["datasets", "{}"], ".log"),
]  # fmt: skip
JUNK = {"random": bytes(np.random.default_rng(7).integers(0, 256, 3000, dtype=np.uint8)),
        "zip-magic": b"PK\x03\x04" + bytes(range(256)) * 2, "text": b"hello world\n"}  # fmt: skip


@pytest.mark.parametrize("kind", list(JUNK))
@pytest.mark.parametrize(("argv", "suffix"), [c[2:] for c in FILE_SLOTS],
                         ids=[c[0] for c in FILE_SLOTS])  # fmt: skip
def test_no_file_of_junk_is_an_internal_error(ws: Path, argv, suffix, kind) -> None:
    """Random bytes, a zip header and plain text in every file a command reads: one error line."""
    if suffix.startswith("/"):  # a run directory holding the junk as its store
        (ws / "junkdir").mkdir()
        (ws / "junkdir" / suffix[1:]).write_bytes(JUNK[kind])
        path = "junkdir"
    else:
        path = f"junk-{kind}{suffix}"
        (ws / path).write_bytes(JUNK[kind])
    before = snapshot(ws)
    r = CliRunner().invoke(app, [a.replace("{}", path) for a in argv])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "internal error" not in r.output and "Traceback" not in r.output
    assert snapshot(ws) == before


def test_every_file_option_is_tried_with_junk() -> None:
    for name in commands():
        tried = {opt for case, opt, _, _ in FILE_SLOTS if case.split("-")[0] == name}
        read = file_options(name) - {"-o", "--save-labels", "--stream-out"}  # outputs
        assert read <= tried, f"{name}: no junk case for {sorted(read - tried)}"
