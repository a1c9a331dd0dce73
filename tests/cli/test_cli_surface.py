"""The CLI's surface: --version, flags without a type, one output sink, defaults from configs,
what its start-up imports."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from file_options import commands
from helm_plan_cli import options
from helm_plan_cli.commands import train_cmd, validate_cmd
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import __version__
from helm_plan.cluster import ClusterConfig
from helm_plan.controller import training
from helm_plan.exec import ExecutorConfig
from helm_plan.oracle import OracleConfig
from helm_plan.plan import PlanConfig
from helm_plan.sim import NodeConfig

CLI = REPO / "cli"
runner = CliRunner()


def test_the_cli_starts_without_the_libraries_no_analyze_needs():
    # every command imports every command module; scipy.optimize (the calibration fit's nnls)
    # cost ~0.4 s of each start, analyze's first run included, and the others are
    # bigger: each is imported where a command uses it (a None in sys.modules fails the import)
    blocked = ("scipy.optimize", "scipy.stats", "torch", "optuna", "ray")
    code = "; ".join(
        [f"import sys; sys.modules.update(dict.fromkeys({blocked!r}))", "import helm_plan_cli.app"]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]


def test_version_prints_the_package_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout == f"helm-plan {__version__}\n"


@pytest.mark.parametrize("name", ["", *sorted(commands())])
def test_flags_show_no_type_in_help(name):
    r = runner.invoke(app, [*name.split(), "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "<bool>" not in r.stdout and "--help" in r.stdout


def _calls(path: Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = ast.unparse(node.func)
            if re.fullmatch(r"(print|typer\.echo|click\.echo|\w*console\.print|"
                            r"sys\.std(out|err)\.write|rich\.print)", f):  # fmt: skip
                out.append((f, node.lineno))
    return out


def test_every_print_goes_through_the_output_sink():
    # main.py writes the interrupt line itself: from the SIGINT watcher thread, or while the
    # app (and so the sink) is still being imported
    allowed = {CLI / "output.py", CLI / "main.py"}
    stray = {str(p.relative_to(REPO)): _calls(p) for p in sorted(CLI.rglob("*.py"))
             if p not in allowed and _calls(p)}  # fmt: skip
    assert not stray, f"prints around helm_plan_cli.output: {stray}"


def test_no_literal_default_in_the_cli():
    """Every default is read from a config dataclass (or is None / False), never retyped."""
    found = []
    for p in sorted(CLI.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef):
                a = node.args
                pairs = [*zip(a.args[len(a.args) - len(a.defaults):], a.defaults, strict=True),
                         *zip(a.kwonlyargs, a.kw_defaults, strict=True)]  # fmt: skip
                for arg, d in pairs:
                    literal = isinstance(d, ast.Constant) and d.value not in (None, False, True)
                    if literal and (p.name, arg.arg) != ("output.py", "value_header"):
                        found.append(f"{p.name}:{node.name}({arg.arg}={d.value!r})")
            # "(default: 1)" typed into a help text instead of read from the config
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and re.search(r"default:? [\d.]+\b", node.value)):  # fmt: skip
                found.append(f"{p.name}: help literal {node.value!r}")
    assert not found


def _default(cmd: str, opt: str):
    p = next(p for p in commands()[cmd].params if opt in p.opts)
    return p.default


def test_defaults_are_read_from_the_configs():
    ex, node = ExecutorConfig(), NodeConfig()
    for cmd in ("cluster", "plan", "oracle"):
        assert _default(cmd, "--workers") == ex.workers
        assert _default(cmd, "--executor") == ex.kind
    for cmd in ("simulate", "cluster", "plan", "oracle", "profile"):
        assert _default(cmd, "--window-s") == node.window_s
    for cmd in ("simulate", "cluster", "plan"):
        for opt, field in [
            ("--slots", "slots"),
            ("--batch-max", "batch_max"),
            ("--batch-timeout-ms", "batch_timeout_ms"),
            ("--batching", "batching"),
        ]:
            assert _default(cmd, opt) == getattr(node, field), (cmd, opt)  # fmt: skip
    assert _default("cluster", "--seed") == ClusterConfig().seed
    assert _default("cluster", "--nodes") == ClusterConfig().nodes
    assert _default("cluster", "--router") == ClusterConfig().router
    assert _default("plan", "--seed") == PlanConfig().seed
    assert _default("plan", "--max-nodes") == PlanConfig().max_nodes
    assert _default("plan", "--attainment") == PlanConfig().attainment
    assert _default("oracle", "--seed") == OracleConfig().seed
    assert _default("oracle", "--trials") == OracleConfig().trials
    for cmd in ("train", "validate"):
        assert _default(cmd, "--window-s") == training.DEFAULT_NODE.window_s
        assert _default(cmd, "--seed") == training.LABEL_ORACLE.seed
    assert _default("train", "--timesteps") is None  # PPO's own default (Args.total_timesteps)


def test_train_and_validate_share_one_options_group():
    shared = ("seed", "window_s", "slo_ms", "pool_fraction", "as_json", "quiet")
    t = {p.name: p for p in commands()["train"].params}
    v = {p.name: p for p in commands()["validate"].params}
    for name in shared:
        assert (t[name].opts, t[name].help, t[name].default) == (
            v[name].opts, v[name].help, v[name].default), name  # fmt: skip
    # neither command defines option types of its own: both read the one group in options.py
    for mod in (train_cmd, validate_cmd):
        own = [n for n in vars(mod) if n.endswith(("Opt", "Arg")) and
               getattr(options, n, None) is not getattr(mod, n)]  # fmt: skip
        assert not own, (mod.__name__, own)
