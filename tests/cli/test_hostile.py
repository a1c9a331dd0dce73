"""Hostile inputs to every command: one ``error: <problem>; <fix>`` line, exit 2, nothing lost.

Each case runs in a fresh workspace of small inputs and asserts: exit code 2,
exactly one stderr line, starting ``error:`` and holding a ``;`` fix part, no
traceback, no new file left behind (no partial output), and every file in the
workspace byte-identical afterwards (inputs unchanged).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_table
from file_options import commands, file_options
from helm_plan_cli.main import app
from hostile_ws import snapshot
from typer.testing import CliRunner

from helm_plan import trace

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
    ("atlas-export-over-input",
     ["atlas", "--config", "xd/cells/k/plan.toml", "--export", "k", "-o", "xd"],
     "is the input file"),
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
    # every file option of every command (issue 36): broken profiles, controllers, label
    # files, arrival logs, plan files; degenerate traces; bounds with their reason
    ("ingest-arrivals-missing",
     ["ingest", "movielens", "u.data", "--arrivals", "none.csv", "--qps", "5", "-o", "o.parquet"],
     "not found"),
    ("synth-like-not-a-trace", ["synth", "--like", "junk.toml", "-o", "s.parquet"],
     "cannot read junk.toml as parquet"),
    ("inspect-model-bad", ["inspect", "t.parquet", "--model", "bad.toml"], "missing key"),
    ("profile-model-not-toml", ["profile", "t.parquet", "-o", "c.parquet", "--model", "junk.toml"],
     "not valid TOML"),
    ("calibrate-model-missing", ["calibrate", "--quick", "--model", "none.toml", "-o", "l.toml"],
     "not found"),
    ("fit-gpu-bad", ["fit", "t.parquet", "--gpu", "bad.toml"], "hbm_bytes must be an integer"),
    ("fit-model-not-toml", ["fit", "t.parquet", "--model", "junk.toml"], "not valid TOML"),
    ("fit-latency-not-toml", ["fit", "t.parquet", "--latency", "junk.toml"], "not valid TOML"),
    ("simulate-gpu-bad", ["simulate", "t.parquet", "--gpu", "bad.toml"], "hbm_bytes"),
    ("simulate-latency-not-toml", ["simulate", "t.parquet", "--latency", "junk.toml"],
     "not valid TOML"),
    ("simulate-nan-controller", ["simulate", "t.parquet", "--policy", "controller:nan.npz"],
     "W0 holds"),
    ("simulate-truncated-controller", ["simulate", "t.parquet", "--policy", "controller:cut.npz"],
     "cannot read cut.npz as a controller"),
    ("simulate-labels-out-of-range",
     ["simulate", "t.parquet", "--policy", "schedule:bad_labels.parquet"], "outside [0, 1]"),
    ("simulate-slots-bound", ["simulate", "t.parquet", "--slots", "49"], "48 MPS clients"),
    ("cluster-gpu-bad", ["cluster", "t.parquet", "--gpu", "bad.toml"], "hbm_bytes"),
    ("cluster-model-bad", ["cluster", "t.parquet", "--model", "bad.toml"], "missing key"),
    ("cluster-latency-not-toml", ["cluster", "t.parquet", "--latency", "junk.toml"],
     "not valid TOML"),
    ("cluster-card-not-json", ["cluster", "t.parquet", "--policy", "controller:card.npz"],
     "card is not JSON"),
    ("cluster-grid-nan-controller",
     ["cluster", "t.parquet", "--policies", "kv-max,controller:nan.npz"], "W0 holds"),
    ("cluster-nodes-bound", ["cluster", "t.parquet", "--nodes", "4097"], "simulated in memory"),
    ("cluster-slots-bound", ["cluster", "t.parquet", "--slots", "49"], "48 MPS clients"),
    ("plan-over-model", ["plan", "t.parquet", "--model", "bad.toml", "-o", "bad.toml"],
     "is the input file"),
    ("plan-gpus-bad", ["plan", "t.parquet", "--gpus", "bad.toml"], "hbm_bytes"),
    ("plan-model-bad", ["plan", "t.parquet", "--model", "bad.toml"], "missing key"),
    ("plan-latency-not-toml", ["plan", "t.parquet", "--gpus", "a100-80g", "--latency",
                               "junk.toml"], "not valid TOML"),
    ("plan-nan-controller", ["plan", "t.parquet", "--policies", "controller:nan.npz"],
     "W0 holds"),
    ("plan-max-nodes-bound", ["plan", "t.parquet", "--max-nodes", "4097"], "simulated in memory"),
    ("plan-zero-attainment", ["plan", "t.parquet", "--attainment", "0"], "(0, 1]"),
    ("plan-attainment-above-1", ["plan", "t.parquet", "--attainment", "1.5"], "(0, 1]"),
    ("plan-one-request", ["plan", "one.parquet"], "arrive at one instant"),
    ("plan-zero-span", ["plan", "zero.parquet"], "arrive at one instant"),
    ("oracle-gpu-bad", ["oracle", "t.parquet", "-o", "l.parquet", "--gpu", "bad.toml"], "hbm_bytes"),
    ("oracle-model-bad", ["oracle", "t.parquet", "-o", "l.parquet", "--model", "bad.toml"],
     "missing key"),
    ("oracle-latency-not-toml",
     ["oracle", "t.parquet", "-o", "l.parquet", "--latency", "junk.toml"], "not valid TOML"),
    ("oracle-slots-bound", ["oracle", "t.parquet", "-o", "l.parquet", "--slots", "49"],
     "48 MPS clients"),
    ("train-truncated-labels", ["train", "cut_labels.npz", "-o", "c.npz"],
     "cannot read cut_labels.npz as a label set"),
    ("train-labels-over-input", ["train", "t.parquet", "-o", "c.npz", "--save-labels", "t.parquet"],
     "is the input file"),
    ("train-labels-over-controller",
     ["train", "t.parquet", "-o", "c.npz", "--save-labels", "c.npz"], "are the same file"),
    ("train-labels-into-a-folder", ["train", "t.parquet", "-o", "c.npz", "--save-labels", "d"],
     "is a folder"),
    ("validate-truncated-controller", ["validate", "cut.npz", "t.parquet"],
     "cannot read cut.npz as a controller"),
    ("validate-nan-controller", ["validate", "nan.npz", "t.parquet"], "W0 holds"),
    ("validate-card-not-json", ["validate", "card.npz", "t.parquet"], "card is not JSON"),
    ("analyze-gpu-bad", ["analyze", "t.parquet", "--gpu", "bad.toml"], "hbm_bytes"),
    ("analyze-gpus-bad", ["analyze", "t.parquet", "--gpus", "a100-80g,bad.toml"], "hbm_bytes"),
    ("analyze-model-bad", ["analyze", "t.parquet", "--model", "bad.toml"], "missing key"),
    ("analyze-latency-not-toml", ["analyze", "t.parquet", "--latency", "junk.toml"],
     "not valid TOML"),
    ("analyze-one-request", ["analyze", "one.parquet"], "arrive at one instant"),
    ("analyze-zero-span", ["analyze", "zero.parquet"], "arrive at one instant"),
    ("analyze-zero-attainment", ["analyze", "t.parquet", "--config", "zero_plan.toml"], "(0, 1]"),
    ("analyze-max-nodes-bound", ["analyze", "t.parquet", "--config", "huge_plan.toml"],
     "simulated in memory"),
    ("analyze-run-dir-is-a-file", ["analyze", "t.parquet", "-o", "plain.txt"], "is a file"),
    ("report-real-truncated-store", ["report", "trunc"], "truncated or damaged"),
    ("datasets-a-file", ["datasets", "plain.txt"], "is a file, not a folder"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_is_one_line_exit_2_and_loses_nothing(
    ws: Path, args: list[str], needle: str
) -> None:
    before = snapshot(ws)
    r = CliRunner().invoke(app, args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.stdout)
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("error: ") and "; " in line, line
    assert needle in line, line
    assert "Traceback" not in r.stderr + r.stdout
    assert snapshot(ws) == before  # no partial output, inputs byte-identical


def test_every_command_has_a_hostile_case() -> None:
    from helm_plan_cli.commands import COMMAND_MODULES

    names = {m.__name__.rsplit(".", 1)[-1].removesuffix("_cmd") for m in COMMAND_MODULES}
    assert names == {c[1][0] for c in CASES}


def test_every_file_option_of_every_command_has_a_hostile_case() -> None:
    for name in commands():
        args = [a for _, argv, _ in CASES if argv[0] == name for a in argv]
        options = {o for o in file_options(name) if o.startswith("-")}
        missing = sorted(o for o in options if o not in args)
        assert not missing, f"{name}: no hostile case gives {missing}"


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
