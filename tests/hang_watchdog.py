"""A watchdog no compiled loop can stall (its hooks are re-exported by tests/conftest.py).

pytest-timeout's thread method (``timeout_method = "thread"`` in pyproject.toml) ends a test
that passes its timeout, but its timer is a Python thread: a numba kernel that holds the GIL
keeps it from ever running. faulthandler's watchdog is a C thread: shortly after the test's
timeout it dumps every thread's stack (the hung test on top) to the session's stderr and
ends the run with exit status 1, so a hung kernel fails CI in minutes instead of eating it.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from typing import IO

import pytest

WATCHDOG_MARGIN_S = 10.0
"""The watchdog fires this long after a test's timeout (pytest-timeout's thread fires first when
it can take the GIL)."""

_REAL_STDERR: list[IO[str]] = []
"""stderr as the session started (fd capture swaps fd 2 for a file while a test runs)."""


def timeout_s(item: pytest.Item) -> float:
    """The test's pytest-timeout limit: its ``timeout`` marker, else --timeout, else the ini."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and (mark.args or "timeout" in mark.kwargs):
        return float(mark.args[0] if mark.args else mark.kwargs["timeout"])
    opt = item.config.getoption("timeout", None)
    return float(opt if opt is not None else item.config.getini("timeout") or 0)


def pytest_sessionstart(session: pytest.Session) -> None:
    _REAL_STDERR.append(os.fdopen(os.dup(2), "w"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201
    t = timeout_s(item)
    if t > 0:
        err = _REAL_STDERR[0] if _REAL_STDERR else sys.stderr
        faulthandler.dump_traceback_later(t + WATCHDOG_MARGIN_S, exit=True, file=err)
    try:
        yield
    finally:
        if t > 0:
            faulthandler.cancel_dump_traceback_later()
