"""`helm-plan ingest`: not registered yet (being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
