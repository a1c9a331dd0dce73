"""The import-linter contracts in pyproject.toml cover every package and catch a layer break.

A contract that names only part of the tree keeps passing when an unnamed package imports
upwards, so these tests place every module and then plant a forbidden import in a copy of the
tree and check that ``lint-imports`` reports it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PIPELINE = "Pipeline layers (a module imports only from layers below it)"


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]


def _layer_names(contract: dict) -> set[str]:
    names: set[str] = set()
    for layer in contract["layers"]:
        for part in layer.replace(":", "|").split("|"):
            names.add(part.strip().strip("()"))
    return names


def test_pipeline_layers_place_every_top_level_module() -> None:
    pipeline = next(c for c in _contracts() if c["name"] == PIPELINE)
    named = _layer_names(pipeline)
    pkg = REPO / "helm_plan"
    present = {
        f"helm_plan.{p.stem}"
        for p in pkg.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert present - named == set(), "modules of helm_plan outside every layer"
    assert "helm_plan_cli" in named


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    # The copy comes first on sys.path (lint-imports adds its cwd), ahead of the editable
    # install's finder, so the graph is built from the copy with the probe in it.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of both packages and the contracts, to plant probe imports in."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    shutil.copytree(REPO / "helm_plan", tmp_path / "helm_plan", ignore=ignore)
    shutil.copytree(REPO / "cli", tmp_path / "helm_plan_cli", ignore=ignore)
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    return tmp_path


def test_the_copy_keeps_every_contract(tree: Path) -> None:
    # Without this, a copy that failed to lint for another reason would pass the probes below.
    out = _lint(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 broken" in out.stdout


@pytest.mark.parametrize(
    ("probe", "imports", "contract"),
    [
        # sim and synth are independent siblings: the simulator never reads a trace generator.
        ("helm_plan/sim/_probe.py", "helm_plan.synth", PIPELINE),
        # an upward import from a low layer.
        ("helm_plan/cache/_probe.py", "helm_plan.sim", PIPELINE),
        ("helm_plan/ingest/_probe.py", "helm_plan.controller", PIPELINE),
        ("helm_plan/report/_probe.py", "helm_plan.cluster.sim", "The report reads the run store"),
        ("helm_plan_cli/commands/_probe.py", "helm_plan_cli.commands.plan_cmd", "CLI commands"),
        ("helm_plan/exec/local.py", "helm_plan.exec.ray", "Executor layers"),
    ],
)
def test_a_probe_import_breaks_its_contract(
    tree: Path, probe: str, imports: str, contract: str
) -> None:
    path = tree / probe
    with path.open("a") as f:  # appending keeps an existing module's own imports
        f.write(f"\nimport {imports}  # probe\n")
    out = _lint(tree)
    assert out.returncode != 0, out.stdout
    broken = [line for line in out.stdout.splitlines() if line.endswith(" BROKEN")]
    assert any(line.startswith(contract) for line in broken), out.stdout
    module = probe.removesuffix(".py").replace("/", ".")
    assert f"{module} -> {imports}" in out.stdout, out.stdout
