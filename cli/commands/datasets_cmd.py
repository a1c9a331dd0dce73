"""`helm-plan datasets [DIR]`: the public logs the tests read, and a check of DIR's copies."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.options import JsonOpt, QuietOpt
from helm_plan_cli.output import emit_json, emit_table
from rich.table import Table

from helm_plan import datasets as D
from helm_plan.errors import InputFileError

DirArg = Annotated[
    Path | None,
    typer.Argument(
        help=f"Folder to check against the SHA-256s (default: ${D.ENV_DIR} if set; "
        "without either, only list).",
        show_default=False,
    ),
]


def datasets_command(
    folder: DirArg = None, as_json: JsonOpt = False, quiet: QuietOpt = False
) -> None:
    """List the public logs (source, license, SHA-256) and check a folder's copies against them.

    The logs are not redistributed with helm-plan; download each from its source.
    Exits non-zero when a checked file is missing or differs.
    """
    if folder is None and os.environ.get(D.ENV_DIR):
        folder = Path(os.environ[D.ENV_DIR])
    statuses = D.check(folder) if folder is not None else None
    rows = [
        {
            "file": ds.file,
            "what": ds.what,
            "source": ds.source,
            "license": ds.license,
            "sha256": ds.sha256,
            **({} if statuses is None else {"status": statuses[i].status}),
        }
        for i, ds in enumerate(D.CATALOG)
    ]
    bad = [] if statuses is None else [s for s in statuses if s.status != "ok"]
    if as_json:
        emit_json("datasets", {"folder": None if folder is None else str(folder), "datasets": rows})
    else:
        t = Table(title="public logs" + ("" if folder is None else f" in {folder}"))
        for col in ("file", "source", "license", "sha256", *(["status"] if statuses else [])):
            t.add_column(col, overflow="fold")
        for r in rows:
            t.add_row(
                r["file"], r["source"], r["license"], r["sha256"] or "(folder of .csv files)",
                *([r["status"]] if statuses else []),
            )  # fmt: skip
        emit_table(t)
    if bad:
        raise InputFileError(
            f"{len(bad)} of {len(D.CATALOG)} logs in {folder} are missing or differ: "
            + ", ".join(f"{s.dataset.file} ({s.status})" for s in bad),
            hint="download those files from their sources into the folder",
        )


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("datasets")(datasets_command)
