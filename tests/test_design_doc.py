"""docs/DESIGN.md is true to the code: every file it names exists and every dotted name imports.

A design document drifts silently when code moves; this reads every backticked reference
outside code blocks and checks it against the tree, so a rename that leaves the doc behind
fails here instead of misleading the next reader.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "DESIGN.md"
ROOTS = ("helm_plan", "cli", "tests", "benchmarks", "docs", "scripts", "profiles", "datasets",
         "reports")  # fmt: skip
FILE_SUFFIXES = (".py", ".sh", ".md", ".toml")
GENERATED = {"reports/out/"}
"""Folders the tools write into (ignored by git), named in the doc as where output goes."""


def _spans() -> list[str]:
    text = re.sub(r"```.*?```", "", DOC.read_text(), flags=re.S)  # diagrams and formulas
    return sorted(set(re.findall(r"`([^`\n]+)`", text)))


def _expand(ref: str) -> list[str]:
    """``tests/{a,b}`` names ``tests/a`` and ``tests/b``."""
    m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", ref)
    return [m[1] + part + m[3] for part in m[2].split(",")] if m else [ref]


def _is_path(ref: str) -> bool:
    if not re.fullmatch(r"[\w.\-{},]+(/[\w.\-{},]*)*", ref):
        return False
    return (
        ref.split("/")[0] in ROOTS
        or ref.endswith(FILE_SUFFIXES)
        or ("/" in ref and ref.endswith("/") and not ref.startswith("."))
    )


def _path_exists(ref: str) -> bool:
    if (REPO / ref).exists():
        return True
    # A path written inside the library's layout (`cache/ghost.py`, `core.py`): it must be
    # the tail of a real file or folder under helm_plan/ or cli/.
    tail = ref.rstrip("/")
    return any(
        p.as_posix().endswith("/" + tail)
        for root in ("helm_plan", "cli")
        for p in (REPO / root).rglob("*")
        if "__pycache__" not in p.parts
    )


def _resolves(name: str) -> bool:
    parts = name.removesuffix("()").split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _module_files() -> dict[str, str]:
    """Every library module's path without ``.py`` (``latency/kernel``) -> its dotted name."""
    out = {}
    for f in (REPO / "helm_plan").rglob("*.py"):
        rel = f.relative_to(REPO / "helm_plan").with_suffix("").as_posix().removesuffix("/__init__")
        out[rel] = "helm_plan." + rel.replace("/", ".") if rel != "__init__" else "helm_plan"
    return out


def _getattrs(module: str, attrs: list[str]) -> bool:
    obj = importlib.import_module(module)
    for i, a in enumerate(attrs):
        if hasattr(obj, a):
            obj = getattr(obj, a)
        elif isinstance(obj, type) and i == len(attrs) - 1:
            # a dataclass field without a class-level default is only an annotation
            return any(a in getattr(k, "__annotations__", {}) for k in obj.__mro__)
        else:
            return False
    return True


def _short_resolves(ref: str) -> bool:
    """``kernel.batch_times_s``, ``sim.policy.runner_config`` (a module by its tail) or
    ``LatencyModel.batch_time_s`` (a class of the library by its name)."""
    parts = ref.removesuffix("()").split(".")
    files = _module_files()
    for i in range(len(parts) - 1, 0, -1):
        tail = "/".join(parts[:i])
        for rel, module in files.items():
            if (rel == tail or rel.endswith("/" + tail)) and _getattrs(module, parts[i:]):
                return True
    pattern = re.compile(rf"^class {re.escape(parts[0])}\b", re.M)
    for rel, module in files.items():
        path = REPO / "helm_plan" / (rel + ".py")
        if not path.exists():
            path = REPO / "helm_plan" / rel / "__init__.py"
        if pattern.search(path.read_text()) and _getattrs(module, parts):
            return True
    return False


EXTERNAL = {"study.ask"}
"""Other projects' names the doc cites (Optuna's ask-and-tell)."""
OUTPUT_SUFFIXES = (".py", ".toml", ".parquet", ".duckdb", ".html", ".json")
"""Short dotted spans that are file names (checked as paths, or run outputs)."""

PATHS = sorted({p for s in _spans() if _is_path(s) for p in _expand(s)} - GENERATED)
DOTTED = [s for s in _spans() if re.fullmatch(r"helm_plan(_cli)?(\.\w+)+(\(\))?", s)]
SHORT = [
    s
    for s in _spans()
    if re.fullmatch(r"[A-Za-z_]\w*(\.\w+)+(\(\))?", s)
    and not s.startswith("helm_plan")
    and not s.endswith(OUTPUT_SUFFIXES)
    and s not in EXTERNAL
]


def test_the_doc_names_files_and_code() -> None:
    # guards the extraction itself: a regex that matched nothing would pass every check
    assert "helm_plan/latency/kernel.py" in PATHS
    assert "helm_plan.latency.kernel.batch_time_s" in DOTTED
    assert "LatencyModel.batch_time_s" in SHORT


@pytest.mark.parametrize("ref", PATHS)
def test_named_path_exists(ref: str) -> None:
    assert _path_exists(ref), f"docs/DESIGN.md names `{ref}`, which is not in the tree"


@pytest.mark.parametrize("name", DOTTED)
def test_dotted_name_resolves(name: str) -> None:
    assert _resolves(name), f"docs/DESIGN.md names `{name}`, which does not import"


@pytest.mark.parametrize("name", SHORT)
def test_short_dotted_name_resolves(name: str) -> None:
    assert _short_resolves(name), f"docs/DESIGN.md names `{name}`, which no library module has"
