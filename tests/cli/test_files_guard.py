"""The output guard (cli/files.py): every command, every input option, every output option.

For each command that writes, each of its input options is pointed at a file and each of its
outputs at that same file: the command must refuse with one line ("... is the input file
..."), exit 2 and leave every file byte-identical, before any work. Two outputs on one file,
an output that is a folder and an output under a file are refused the same way. A last test
reads every command's options from the typer app and checks this table names each file
option, so a new option cannot skip the guard unnoticed.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, small_table
from file_options import commands, file_options
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import trace
from helm_plan.controller.runtime import DEFAULT_PATH

Files = dict[str, str]
#: A command's argv from the paths of its file options (options absent from the dict are left
#: out or at their defaults); "-o" and friends are outputs.
Argv = Callable[[Files], list[str]]


def _opt(f: Files, *names: str) -> list[str]:
    out: list[str] = []
    for n in names:
        if n in f:
            out += [n, f[n]]
    return out


def _policies(f: Files) -> list[str]:
    specs = [f"{k.removeprefix('--policies ')}{v}" for k, v in f.items()
             if k.startswith("--policies ")]  # fmt: skip
    return ["--policies", ",".join(specs)] if specs else []


COMMANDS: dict[str, tuple[Argv, list[str], list[str]]] = {
    # command: (argv, input options, output options)
    "ingest": (lambda f: ["ingest", "csv", f.get("PATH", "log.csv"), "--map",
                          "user=user,item=item", *_opt(f, "--arrivals", "-o")],
               ["PATH", "--arrivals"], ["-o"]),
    "synth": (lambda f: ["synth", *_opt(f, "--like", "-o")], ["--like"], ["-o"]),
    "profile": (lambda f: ["profile", f.get("TRACE", "t.parquet"),
                           *_opt(f, "--gpu", "--model", "-o", "--stream-out")],
                ["TRACE", "--gpu", "--model"], ["-o", "--stream-out"]),
    "calibrate": (lambda f: ["calibrate", "--quick", *_opt(f, "--model", "-o")],
                  ["--model"], ["-o"]),
    "fit": (lambda f: ["fit", f.get("TRACE", "t.parquet"),
                       *_opt(f, "--gpu", "--model", "--latency", "-o")],
            ["TRACE", "--gpu", "--model", "--latency"], ["-o"]),
    "oracle": (lambda f: ["oracle", f.get("TRACE", "t.parquet"),
                          *_opt(f, "--gpu", "--model", "--latency", "-o")],
               ["TRACE", "--gpu", "--model", "--latency"], ["-o"]),
    "plan": (lambda f: ["plan", f.get("TRACE", "t.parquet"), *_opt(f, "--gpus", "--model"),
                        *(["--gpus", "a100-80g", "--latency", f["--latency"]]
                          if "--latency" in f else []), *_policies(f), *_opt(f, "-o")],
             ["TRACE", "--gpus", "--model", "--latency", "--policies controller:",
              "--policies schedule:"], ["-o"]),
    "train": (lambda f: ["train", f.get("INPUTS", "t.parquet"), *_opt(f, "-o", "--save-labels")],
              ["INPUTS"], ["-o", "--save-labels"]),
    "analyze": (lambda f: ["analyze", f.get("TRACE", "t.parquet"),
                           *_opt(f, "--config", "--gpu", "--gpus", "--model", "--latency", "-o")],
                ["TRACE", "--config", "--gpu", "--gpus", "--model", "--latency", "[analyze] model",
                 "[analyze] plan_policies"], ["-o"]),
    "report": (lambda f: ["report", f.get("RUN_DIR", "run")], ["RUN_DIR"], ["report.html"]),
    "atlas": (lambda f: ["atlas", *_opt(f, "--config", "-o")], ["--config"], ["-o"]),
}  # fmt: skip

#: What each input option's file is a copy of (in the workspace).
SOURCE = {"TRACE": "t.parquet", "PATH": "log.csv", "INPUTS": "t.parquet", "--like": "t.parquet",
          "--arrivals": "arr.csv", "--gpu": "gpu.toml", "--gpus": "gpu.toml",
          "--model": "model.toml", "--latency": "lat.toml", "--config": "plan.toml",
          "--policies controller:": "ctrl.npz", "--policies schedule:": "t.parquet",
          "RUN_DIR": "run/helm.duckdb", "[analyze] model": "model.toml",
          "[analyze] plan_policies": "ctrl.npz"}  # fmt: skip
RUN_FILES = ("report.html", "summary.json", "helm.duckdb", "labels.parquet", "run.json")
#: Commands whose -o is a run directory, with the files a run writes there (the first input
#: is tried against every one of them, the others against one).
RUN_DIRS = {
    "analyze": ("TRACE", RUN_FILES),
    "atlas": ("--config", ("atlas.html", "cells.csv", "cells.parquet", "atlas.json")),
}


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    trace.write(small_table(200), tmp_path / "t.parquet", {"source": "tests"})
    (tmp_path / "log.csv").write_text("user,item,ts\n1,2,3\n1,3,4\n2,3,5\n")
    (tmp_path / "arr.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0.5,1,1\n")
    shutil.copy(REPO / "profiles" / "gpu" / "a100-80g.toml", tmp_path / "gpu.toml")
    shutil.copy(REPO / "profiles" / "model" / "gr-small.toml", tmp_path / "model.toml")
    shutil.copy(REPO / "profiles" / "latency" / "a100-80g_gr-small.toml", tmp_path / "lat.toml")
    shutil.copy(DEFAULT_PATH, tmp_path / "ctrl.npz")
    (tmp_path / "plan.toml").write_text("[analyze]\nwindow_s = 10.0\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "helm.duckdb").write_bytes(b"not read: the guard refuses first")
    (tmp_path / "d").mkdir()
    (tmp_path / "plain.txt").write_text("a file, not a folder\n")
    return tmp_path


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def _refused(args: list[str], needle: str) -> str:
    r = CliRunner().invoke(app, args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2, (args, r.exit_code, r.stderr, r.stdout)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "; " in lines[0], r.stderr
    assert needle in lines[0], (args, lines[0])
    return lines[0]


def _collision(ws: Path, cmd: str, inp: str, out: str, run_file: str) -> list[str]:
    """argv of ``cmd`` reading ``inp`` from the file output ``out`` writes (created here)."""
    argv, _, outs = COMMANDS[cmd]
    files: Files = {o: f"fresh-{i}.out" for i, o in enumerate(outs)}  # the other outputs
    if cmd in RUN_DIRS:  # the run directory's files: the input sits where one is written
        target, files["-o"] = Path("rd") / run_file, "rd"
    elif cmd == "report":
        target = Path("run") / "report.html"  # report.html is a link to the store it reads
        (ws / target).symlink_to(ws / "run" / "helm.duckdb")
        return argv({})
    else:
        target = Path(f"{cmd}-input{Path(SOURCE[inp]).suffix}")
        files[out] = str(target)
    (ws / target).parent.mkdir(exist_ok=True)
    shutil.copy(ws / SOURCE[inp], ws / target)
    if inp.startswith("[analyze]"):  # a file the plan file names is an input too
        body = (f'model = "{target}"' if inp.endswith("model") else
                f'plan_policies = ["best-static", "controller:{target}"]')  # fmt: skip
        (ws / "plan_in.toml").write_text(f"[analyze]\n{body}\n")
        files["--config"] = "plan_in.toml"
    else:
        files[inp] = str(target)
    return argv(files)


CASES = [(cmd, inp, out, rf) for cmd, (_, ins, outs) in COMMANDS.items() for inp in ins
         for out in outs for rf in (RUN_DIRS[cmd][1] if RUN_DIRS.get(cmd, ("",))[0] == inp else
                                    RUN_DIRS.get(cmd, ("", RUN_FILES))[1][1:2])]  # fmt: skip


@pytest.mark.parametrize(("cmd", "inp", "out", "run_file"), CASES,
                         ids=[f"{c}-{i}-{o}-{r}" for c, i, o, r in CASES])  # fmt: skip
def test_no_command_writes_over_any_of_its_inputs(ws, cmd, inp, out, run_file):
    argv = _collision(ws, cmd, inp, out, run_file)
    before = _snapshot(ws)
    _refused(argv, "is the input file")
    assert _snapshot(ws) == before  # refused before any work: nothing written or changed


PAIRS = [(cmd, outs) for cmd, (_, _, outs) in COMMANDS.items() if len(outs) > 1]


@pytest.mark.parametrize(("cmd", "outs"), PAIRS, ids=[c for c, _ in PAIRS])
def test_two_outputs_of_one_command_on_one_file_are_refused(ws, cmd, outs):
    argv, _, _ = COMMANDS[cmd]
    before = _snapshot(ws)
    _refused(argv(dict.fromkeys(outs, "same.out")), "are the same file")
    assert _snapshot(ws) == before


UNWRITABLE = [(cmd, out, bad, needle) for cmd, (_, _, outs) in COMMANDS.items() for out in outs
              if cmd != "report"
              for bad, needle in (("d", "is a folder"), ("plain.txt/x.out", "is a file"))
              if not (cmd in RUN_DIRS and bad == "d")]  # fmt: skip


@pytest.mark.parametrize(("cmd", "out", "bad", "needle"), UNWRITABLE,
                         ids=[f"{c}-{o}-{b}" for c, o, b, _ in UNWRITABLE])  # fmt: skip
def test_an_output_that_cannot_be_written_is_refused_before_any_work(ws, cmd, out, bad, needle):
    argv, _, outs = COMMANDS[cmd]
    files = {o: f"fresh-{i}.out" for i, o in enumerate(outs)} | {out: bad}
    if cmd in RUN_DIRS:
        files[out] = "plain.txt"  # the run directory is a file
        needle = "is a file"
    before = _snapshot(ws)
    _refused(argv(files), needle)
    assert _snapshot(ws) == before


#: Commands that write no file (their inputs cannot be overwritten).
READ_ONLY = {"inspect", "profiles", "simulate", "cluster", "validate", "datasets"}


def test_the_table_names_every_file_option_of_every_command():
    assert set(COMMANDS) | READ_ONLY == set(commands())
    for name in COMMANDS:
        _, ins, outs = COMMANDS[name]
        declared = {x.split(" ")[0] for x in (*ins, *outs)}  # "--policies controller:"
        missing = file_options(name) - declared
        assert not missing, f"{name}: file options {sorted(missing)} are not in the guard table"
