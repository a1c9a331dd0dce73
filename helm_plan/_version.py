"""The package version, importable by any module without importing the package's API."""

from __future__ import annotations

__version__ = "0.1.0"
