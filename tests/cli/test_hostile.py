"""Hostile inputs to every command: one ``error: <problem>; <fix>`` line, exit 2, nothing lost.

Each case runs in a fresh workspace of small inputs and asserts: exit code 2,
exactly one stderr line, starting ``error:`` and holding a ``;`` fix part, no
traceback, no new file left behind (no partial output), and every file in the
workspace byte-identical afterwards (inputs unchanged).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import small_table
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import trace
from helm_plan.report import STORE_NAME

UDATA = "".join(f"{k % 9}\t{k % 31}\t3\t{881250949 + 4000 * k}\n" for k in range(60))
LOG_CSV = "user,item,ts\n1,2,3\n1,3,4\n2,3,5\n"


def _raw(path: Path, **cols) -> None:
    """A parquet file with the canonical columns, some of them broken (not validated)."""
    base = {"ts_s": [0.0, 0.5, 1.0], "user_id": [0, 1, 2], "new_items": [[1], [2], [3]],
            "n_candidates": [2, 2, 2], "candidates": [[1, 2], [3, 1], [2, 3]]}  # fmt: skip
    base.update(cols)
    types = {"ts_s": pa.float64(), "user_id": pa.int64(), "new_items": pa.list_(pa.int64()),
             "n_candidates": pa.int32(), "candidates": pa.list_(pa.int64())}  # fmt: skip
    cols = {k: pa.array(v, types[k]) for k, v in base.items() if v is not None}
    pq.write_table(pa.table(cols), path)


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every input a case may name, in one folder that is also the working directory."""
    monkeypatch.chdir(tmp_path)
    trace.write(small_table(300), tmp_path / "t.parquet", {"source": "tests"})
    t = small_table(2)
    gap = t.set_column(0, "ts_s", pa.array([0.0, 1e9]))
    trace.write(gap, tmp_path / "gap.parquet", {"source": "tests"})
    _raw(tmp_path / "null_user.parquet", user_id=[0, None, 2])
    _raw(tmp_path / "neg_item.parquet", new_items=[[1], [2, -5], [3]])
    _raw(tmp_path / "cand_len.parquet", candidates=[[1, 2], [3], [2, 3]])
    _raw(tmp_path / "neg_ts.parquet", ts_s=[-1.0, 0.5, 1.0])
    _raw(tmp_path / "huge_cands.parquet", n_candidates=[2, 2**31 - 1, 2],
         candidates=None)  # fmt: skip
    (tmp_path / "log.csv").write_text(LOG_CSV)
    (tmp_path / "log.csv.gz").write_bytes(gzip.compress(LOG_CSV.encode()))
    (tmp_path / "u.data").write_text(UDATA)
    (tmp_path / "arr.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    (tmp_path / "junk.csv").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "plain.txt").write_text("not a folder\n")
    (tmp_path / "bad_plan.toml").write_text("[analyze]\nslo_ms = 'fast'\n")
    (tmp_path / "typo_plan.toml").write_text("[analyse]\nslo_ms = 5.0\n")
    (tmp_path / "bad_atlas.toml").write_text('[atlas]\npanels = [["pool", "utilisation"]]\n')
    (tmp_path / "atlas.html").write_text("[atlas]\nrequests = 1000\n")  # a config named as a page
    (tmp_path / "d").mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / STORE_NAME).write_bytes(b"DUCK" + bytes(200))  # a truncated store
    # a trace that sits where `analyze -o labels_dir` would write labels.parquet
    (tmp_path / "labels_dir").mkdir()
    trace.write(small_table(50), tmp_path / "labels_dir" / "labels.parquet", {"source": "tests"})
    return tmp_path


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(root.rglob("*"))
    }


CASES: list[tuple[str, list[str], str]] = [
    # ingest
    (
        "ingest-over-input",
        ["ingest", "csv", "log.csv", "--map", "user=user,item=item", "-o", "log.csv"],
        "is the input file",
    ),
    (
        "ingest-gz-over-input",
        ["ingest", "csv", "log.csv.gz", "--map", "user=user,item=item", "-o", "log.csv.gz"],
        "is the input file",
    ),
    (
        "ingest-out-folder",
        ["ingest", "csv", "log.csv", "--map", "user=user,item=item", "-o", "d"],
        "is a folder",
    ),
    (
        "ingest-out-under-file",
        ["ingest", "csv", "log.csv", "--map", "user=user,item=item", "-o", "plain.txt/t.parquet"],
        "is a file, not a folder",
    ),
    ("ingest-binary", ["ingest", "taobao", "junk.csv", "-o", "o.parquet"], "is not a text log"),
    (
        "ingest-header-only-arrivals",
        ["ingest", "movielens", "u.data", "--arrivals", "arr.csv", "--qps", "5", "-o", "o.parquet"],
        "no arrivals",
    ),
    (
        "ingest-bad-number",
        ["ingest", "movielens", "u.data", "--qps", "abc", "-o", "o.parquet"],
        "'--qps'",
    ),
    (
        "ingest-inf-qps",
        ["ingest", "movielens", "u.data", "--qps", "inf", "-o", "o.parquet"],
        "qps must be finite",
    ),
    (
        "ingest-huge-candidates",
        ["ingest", "movielens", "u.data", "--candidates", "2147483647", "-o", "o.parquet"],
        "n_candidates must be an integer in",
    ),
    ("ingest-unknown-kind", ["ingest", "imdb", "u.data", "-o", "o.parquet"], "unknown kind"),
    ("ingest-missing", ["ingest", "movielens", "none.dat", "-o", "o.parquet"], "not found"),
    # synth
    ("synth-inf-qps", ["synth", "--qps", "inf", "-o", "s.parquet"], "qps must be finite"),
    ("synth-long", ["synth", "--duration-s", "1e15", "-o", "s.parquet"], "exceeds the bound"),
    (
        "synth-many",
        ["synth", "--qps", "1e6", "--duration-s", "1e6", "-o", "s.parquet"],
        "more than the bound",
    ),
    (
        "synth-like-over-input",
        ["synth", "--like", "t.parquet", "-o", "t.parquet"],
        "is the input file",
    ),
    (
        "synth-huge-candidates",
        ["synth", "--candidates", "2147483647", "-o", "s.parquet"],
        "candidates must be in",
    ),
    ("synth-regime", ["synth", "--regime", "spiky", "-o", "s.parquet"], "unknown regime"),
    # inspect: the same validation as every other command
    ("inspect-null-user", ["inspect", "null_user.parquet"], "'user_id': null value"),
    ("inspect-negative-item", ["inspect", "neg_item.parquet"], "negative id -5"),
    ("inspect-candidates-length", ["inspect", "cand_len.parquet"], "1 ids but n_candidates=2"),
    ("inspect-negative-ts", ["inspect", "neg_ts.parquet"], "negative timestamp"),
    ("inspect-huge-candidates", ["inspect", "huge_cands.parquet"], "exceeds the bound"),
    (
        "inspect-memory-limit",
        ["inspect", "t.parquet", "--memory-limit", "lots"],
        "invalid memory limit 'lots'",
    ),
    ("inspect-folder", ["inspect", "d"], "is a folder"),
    # profiles
    ("profiles-unknown-option", ["profiles", "--bogus"], "No such option"),
    # profile
    ("profile-over-input", ["profile", "t.parquet", "-o", "t.parquet"], "is the input file"),
    (
        "profile-stream-over-input",
        ["profile", "t.parquet", "-o", "c.parquet", "--stream-out", "t.parquet"],
        "is the input file",
    ),
    (
        "profile-two-outputs",
        ["profile", "t.parquet", "-o", "c.parquet", "--stream-out", "c.parquet"],
        "same file",
    ),
    ("profile-out-folder", ["profile", "t.parquet", "-o", "d"], "is a folder"),
    (
        "profile-gpu-folder",
        ["profile", "t.parquet", "-o", "c.parquet", "--gpu", "d"],
        "is a folder",
    ),
    (
        "profile-inf-window",
        ["profile", "t.parquet", "-o", "c.parquet", "--window-s", "inf"],
        "window_s must be finite",
    ),
    (
        "profile-pool-too-big",
        ["profile", "t.parquet", "-o", "c.parquet", "--pool-bytes", "1e15"],
        "exceeds what a100-80g leaves",
    ),
    (
        "profile-huge-candidates",
        ["profile", "huge_cands.parquet", "-o", "c.parquet"],
        "exceeds the bound",
    ),
    # calibrate (fails before any benchmark)
    ("calibrate-out-folder", ["calibrate", "--quick", "-o", "d"], "is a folder"),
    ("calibrate-bad-number", ["calibrate", "--threads", "abc", "-o", "l.toml"], "'--threads'"),
    # fit
    ("fit-over-input", ["fit", "t.parquet", "-o", "t.parquet"], "is the input file"),
    ("fit-no-latency", ["fit", "t.parquet"], "no latency_ms column"),
    # simulate
    ("simulate-bad-slots", ["simulate", "t.parquet", "--slots", "abc"], "got 'abc'"),
    ("simulate-nan-window", ["simulate", "t.parquet", "--window-s", "nan"], "window_s"),
    ("simulate-inf-window", ["simulate", "t.parquet", "--window-s", "inf"], "must be finite"),
    ("simulate-tiny-window", ["simulate", "gap.parquet", "--window-s", "1e-7"], "raise --window-s"),
    ("simulate-span", ["simulate", "gap.parquet"], "raise --window-s"),
    # cluster
    ("cluster-unknown-router", ["cluster", "t.parquet", "--router", "fastest"], "unknown router"),
    ("cluster-no-nodes", ["cluster", "t.parquet", "--nodes", "0"], "nodes must be a positive"),
    ("cluster-oracle", ["cluster", "t.parquet", "--policy", "oracle"], "no per-node meaning"),
    ("cluster-empty-grid", ["cluster", "t.parquet", "--routers", ","], "--routers is empty"),
    ("cluster-span", ["cluster", "gap.parquet", "--policy", "kv-max"], "raise --window-s"),
    ("plan-unknown-gpu", ["plan", "t.parquet", "--gpus", "tpu-v9"], "tpu-v9"),
    ("plan-no-policy", ["plan", "t.parquet", "--policies", ","], "--policies is empty"),
    (
        "simulate-pool-fraction",
        ["simulate", "t.parquet", "--pool-fraction", "1e6"],
        "exceeds what a100-80g leaves",
    ),
    ("simulate-model-folder", ["simulate", "t.parquet", "--model", "d"], "is a folder"),
    (
        "simulate-refill-disagree",
        ["simulate", "t.parquet", "--refill", "eager", "--realloc", "lazy"],
        "disagree",
    ),
    ("simulate-negative-ts", ["simulate", "neg_ts.parquet"], "negative timestamp"),
    ("simulate-unknown-option", ["simulate", "t.parquet", "--windows", "3"], "No such option"),
    # oracle
    ("oracle-over-input", ["oracle", "t.parquet", "-o", "t.parquet"], "is the input file"),
    ("oracle-out-folder", ["oracle", "t.parquet", "-o", "d"], "is a folder"),
    (
        "oracle-negative-workers",
        ["oracle", "t.parquet", "-o", "l.parquet", "--workers", "-1"],
        "workers",
    ),
    (
        "oracle-pool-too-big",
        ["oracle", "t.parquet", "-o", "l.parquet", "--pool-bytes", "80GiB"],
        "exceeds what a100-80g leaves",
    ),
    # analyze
    ("analyze-config-folder", ["analyze", "t.parquet", "--config", "d"], "is a folder"),
    ("analyze-config-type", ["analyze", "t.parquet", "--config", "bad_plan.toml"], "slo_ms"),
    ("analyze-config-section", ["analyze", "t.parquet", "--config", "typo_plan.toml"], "analyse"),
    ("analyze-trace-and-demo", ["analyze", "t.parquet", "--demo"], "not both"),
    (
        "analyze-over-input",
        ["analyze", "labels_dir/labels.parquet", "-o", "labels_dir"],
        "is the input file",
    ),
    ("analyze-bad-workers", ["analyze", "t.parquet", "--workers", "many"], "'--workers'"),
    ("analyze-missing-trace", ["analyze"], "missing TRACE"),
    # atlas
    ("atlas-missing-config", ["atlas", "--config", "nope.toml", "-o", "d"], "not found"),
    (
        "atlas-unknown-axis",
        ["atlas", "--config", "bad_atlas.toml", "-o", "d"],
        "unknown atlas axis",
    ),
    ("atlas-over-input", ["atlas", "--config", "atlas.html", "-o", "."], "is the input file"),
    ("atlas-unknown-cell", ["atlas", "--export", "nope", "-o", "d"], "no cell 'nope'"),
    # report
    ("report-truncated-store", ["report", "run"], "not a readable DuckDB run store"),
    ("report-no-store", ["report", "d"], "not found"),
    # datasets
    ("datasets-missing-folder", ["datasets", "nowhere"], "not found"),
    # train, validate
    ("train-over-input", ["train", "t.parquet", "-o", "t.parquet"], "is the input file"),
    ("train-bad-labels", ["train", "junk.npz", "-o", "c.npz"], "not found"),
    ("validate-missing-controller", ["validate", "none.npz", "t.parquet"], "not found"),
    ("validate-not-a-controller", ["validate", "t.parquet", "t.parquet"], "as a controller"),
]


@pytest.mark.parametrize(("args", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_is_one_line_exit_2_and_loses_nothing(
    ws: Path, args: list[str], needle: str
) -> None:
    before = _snapshot(ws)
    r = CliRunner().invoke(app, args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.stdout)
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("error: ") and "; " in line, line
    assert needle in line, line
    assert "Traceback" not in r.stderr + r.stdout
    assert _snapshot(ws) == before  # no partial output, inputs byte-identical


def test_every_command_has_a_hostile_case() -> None:
    from helm_plan_cli.commands import COMMAND_MODULES

    commands = {m.__name__.rsplit(".", 1)[-1].removesuffix("_cmd") for m in COMMAND_MODULES}
    assert commands == {c[1][0] for c in CASES}


def test_the_epoch_trace_is_read_rebased_with_one_note(ws: Path) -> None:
    t = small_table(300)
    ts = t.column("ts_s").to_numpy() + 1.7e9
    trace.write(t.set_column(0, "ts_s", pa.array(ts)), ws / "epoch.parquet", {"source": "t"})
    r = CliRunner().invoke(app, ["simulate", "epoch.parquet", "--policy", "static:0.5",
                                 "--pool-fraction", "0.5", "--json", "-q"])  # fmt: skip
    assert r.exit_code == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "rebased to start at 0" in notes[0]
    rel = CliRunner().invoke(app, ["simulate", "t.parquet", "--policy", "static:0.5",
                                   "--pool-fraction", "0.5", "--json", "-q"])  # fmt: skip
    # the same requests shifted by a constant: the same figures once rebased
    got, want = json.loads(r.stdout)["overall"], json.loads(rel.stdout)["overall"]
    assert got["requests"] == want["requests"] == 300
    # (times carry ~2e-7 s of rounding from the 1.7e9 offset, so queue waits differ in ppm)
    assert got["p99_ms"] == pytest.approx(want["p99_ms"], rel=1e-4)
