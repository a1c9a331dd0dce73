"""The one output guard: every command checks all its outputs against all its inputs first.

A command names every file it reads (traces, label sets, profiles given as TOML
paths, controllers inside ``controller:FILE.npz`` policy specs, arrival logs,
plan files) and every file it writes (``-o``, ``--save-labels``,
``--stream-out``, the files of a run directory), and calls :func:`guard`
before any work: an output that is an input, that cannot be written, or that
two outputs share is refused with one line (:func:`helm_plan.io.check_outputs`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from helm_plan import io
from helm_plan.controller.runtime import Controller
from helm_plan.errors import ConfigError
from helm_plan.policies import parse_policy
from helm_plan.policies.specs.controller import ControllerSpec

PathLike = str | os.PathLike[str]


def policy_files(specs: Iterable[str | None]) -> list[Path]:
    """The files named inside policy specs (``schedule:FILE``, ``controller:FILE.npz``), each
    spec also checked, and a named controller loaded (shapes, finite weights, version, card):
    a corrupt one is refused before any work, never run."""
    out = []
    for spec in specs:
        if spec:
            parsed = parse_policy(spec)
            path = getattr(parsed, "path", None)
            if path is not None:
                out.append(Path(path))
                if isinstance(parsed, ControllerSpec):
                    Controller.load(path)
    return out


def comma_items(text: str | None) -> list[str]:
    """The items of a comma list option (``--gpus a,b``, ``--policies x,y``)."""
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def guard(
    *,
    inputs: Iterable[PathLike | None] = (),
    outputs: Mapping[str, PathLike | None] | None = None,
    policies: Iterable[str | None] = (),
    run_dir: PathLike | None = None,
    run_files: Iterable[str] = (),
) -> None:
    """Refuse, before any work, every output that would overwrite an input, cannot be written,
    or is another output's file.

    ``inputs`` are the paths read (names that are no file, e.g. a shipped profile, are
    skipped); ``policies`` are policy specs whose files are inputs too; ``outputs`` maps
    each output option to its path; ``run_dir`` with ``run_files``: a run directory and
    the files a run writes there.
    """
    outs: dict[str, PathLike | None] = dict(outputs or {})
    if run_dir is not None:
        d = Path(run_dir)
        if d.exists() and not d.is_dir():
            raise ConfigError(f"run directory {d} is a file", hint="pass a folder to --out")
        outs.update({f"-o {d / name}": d / name for name in run_files})
    io.check_outputs(outs, [*inputs, *policy_files(policies)])
