"""Where the shipped data files live: inside the wheel, or in a source checkout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_dir(package: str, source_folder: str) -> Path:
    """The folder of data package ``package`` (e.g. ``helm_plan._profiles``).

    An installed wheel maps the top-level ``source_folder`` (``profiles/``)
    into ``package``; when ``helm_plan`` is imported straight from a source
    checkout (``python -m`` in the repo root) that mapping does not exist, so
    fall back to the folder beside the package.
    """
    try:
        return Path(str(resources.files(package)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / source_folder
