"""One exception family for every user-facing problem.

Each error carries the problem (``str(err)``) and, where one exists, the fix
(``err.hint``). The CLI prints both on one line and exits non-zero.
"""

from __future__ import annotations


class HelmPlanError(Exception):
    """Base class: a problem the user can fix (bad input, bad option, bad file)."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        msg = str(self)
        return f"{msg}; {self.hint}" if self.hint else msg


class ConfigError(HelmPlanError):
    """An option, config field or plan file is invalid."""


class TraceError(HelmPlanError):
    """A request trace is unreadable or breaks the canonical schema."""


class ProfileError(HelmPlanError):
    """A GPU, model or latency profile is unknown or invalid."""


class IngestError(HelmPlanError):
    """A source log cannot be converted into a trace."""


class InputFileError(HelmPlanError):
    """A file is missing, unreadable or in an unexpected format."""


class HelmPlanNote(UserWarning):
    """Something the user should know that is not an error (e.g. a trace was rebased).

    The library issues these with :func:`warnings.warn` (it prints nothing);
    the CLI shows each as one ``note: ...`` line on stderr.
    """
