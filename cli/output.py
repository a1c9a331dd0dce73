"""The one output sink: every line the CLI prints goes through here.

Results go to stdout (a rich table, plain lines, or JSON with ``schema_version``);
notes (``note: ...``) and errors (``error: <problem>; <fix>``) to stderr, one line each.

``--json`` documents are always valid JSON: NaN and infinities become ``null``
(``json.dumps`` would write the invalid tokens ``NaN``/``Infinity``), numpy
scalars become numbers and paths strings. Each document starts with
``schema_version`` and ``command``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

import typer
from helm_plan_cli.progress import out_console
from rich.table import Table

from helm_plan.io import jsonable

SCHEMA_VERSION = "1"
"""Version of the CLI's ``--json`` documents (bump on a renamed or removed key)."""


clean = jsonable
"""``v`` with NaN/inf as None, numpy values as Python values, paths as strings."""


def emit_json(command: str, doc: Mapping[str, Any] | Any) -> None:
    """Print ``doc`` (a mapping or a dataclass) as one JSON object on stdout, led by ``schema_version`` and ``command``."""
    if dataclasses.is_dataclass(doc) and not isinstance(doc, type):
        doc = dataclasses.asdict(doc)
    obj = {"schema_version": SCHEMA_VERSION, "command": command, **doc}
    typer.echo(json.dumps(clean(obj), indent=2, allow_nan=False))


def emit_table(*tables: Table | str) -> None:
    """Print rich tables (or lines of text, see :func:`emit_line`) on stdout."""
    for t in tables:
        if isinstance(t, str):
            emit_line(t)
        else:
            out_console.print(t)


def emit_line(*lines: str) -> None:
    """Print lines of text on stdout as they are: never wrapped (scripts read them, and a pipe
    has no width) and never read as rich markup (a path may hold ``[...]``)."""
    for line in lines:
        typer.echo(line)


def emit_notes(notes: Iterable[str]) -> None:
    """Print each note as one ``note: ...`` line on stderr."""
    for note in notes:
        typer.echo(f"note: {note}", err=True)


def emit_error(line: str) -> None:
    """Print ``error: <line>`` on stderr (``line`` is ``<problem>; <fix>``)."""
    typer.echo(f"error: {line}", err=True)


def kv_table(title: str, rows: Iterable[tuple[str, str]], *, value_header: str = "value") -> Table:
    """A two-column (what, value) table."""
    t = Table(title=title)
    t.add_column("figure")
    t.add_column(value_header, justify="right")
    for k, v in rows:
        t.add_row(k, v)
    return t
