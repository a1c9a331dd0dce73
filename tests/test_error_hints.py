"""Every user-facing error the library or CLI raises carries its fix (``hint=``).

An AST scan of every ``HelmPlanError``-family call: a call without ``hint=`` is a
message that would print without the ``; <fix>`` part (the CLI then falls back
to a pointer to ``--help``). ``PENDING`` would list modules allowed to lag; it is empty.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ERRORS = {"HelmPlanError", "ConfigError", "TraceError", "ProfileError", "IngestError",
          "InputFileError"}  # fmt: skip
PENDING: tuple[str, ...] = ()


def _calls_without_hint(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name in ERRORS and not any(k.arg == "hint" for k in node.keywords):
            out.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)[:100]}")
    return out


def test_every_error_has_a_fix():
    files = [p for d in ("helm_plan", "cli") for p in sorted((REPO / d).rglob("*.py"))]
    assert len(files) > 50
    missing = [
        m
        for p in files
        if not (PENDING and str(p.relative_to(REPO)).startswith(PENDING))
        for m in _calls_without_hint(p)
    ]
    assert not missing, "\n".join(missing)
