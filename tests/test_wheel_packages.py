"""The wheel ships every package: setuptools' explicit ``packages`` list in pyproject.toml must
name each directory with an ``__init__.py`` (a package missing there installs fine in editable
mode and breaks only ``pip install .``, the README's command)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _listed() -> tuple[set[str], dict[str, str]]:
    st = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(st["packages"]), st["package-dir"]


def _on_disk(package_dir: dict[str, str]) -> set[str]:
    found = set()
    for name, folder in package_dir.items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(root).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_package_is_listed():
    listed, package_dir = _listed()
    missing = _on_disk(package_dir) - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_the_check_sees_a_missing_package():
    # the check itself: the real tree minus one listed package is caught
    listed, package_dir = _listed()
    assert "helm_plan.cluster.routers" in _on_disk(package_dir)
    assert _on_disk(package_dir) - (listed - {"helm_plan.cluster.routers"}) == {
        "helm_plan.cluster.routers"
    }
