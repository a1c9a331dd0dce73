"""Which options of a command name files, read from the typer app (for the guard and hostile
tables' completeness checks)."""

from __future__ import annotations

import typer
from helm_plan_cli.main import app

#: String options that name files (profiles by TOML path, policies by spec, plan files).
FILE_STRING_OPTIONS = {"--gpu", "--model", "--latency", "--gpus", "--policy", "--policies",
                       "--config"}  # fmt: skip
#: Path options that are neither read nor kept: a scratch folder of unlinked files.
SCRATCH = {"--spill-dir"}
#: Options named like file options that read no file.
NOT_FILES = {("calibrate", "--gpu")}  # the GPU name written into the profile, never read


def commands() -> dict[str, typer.core.TyperCommand]:
    """Every command of the app, by name."""
    return dict(typer.main.get_command(app).commands)


def file_options(name: str) -> set[str]:
    """The file options of command ``name``: long option names, and positional arguments in
    upper case (``TRACE``, ``PATH``, ...); ``--out`` is ``-o``."""
    names = set()
    for p in commands()[name].params:
        desc = p.type_descriptor
        opt = next((o for o in p.opts if o.startswith("--")), p.name.upper())
        opt = "-o" if opt == "--out" else opt
        pathy = desc.is_path or "Path" in str(desc.annotation)
        if (
            (pathy or opt in FILE_STRING_OPTIONS)
            and opt not in SCRATCH
            and (name, opt) not in NOT_FILES
        ):
            names.add(opt)
    return names
