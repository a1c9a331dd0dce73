"""Ctrl-C: whether this process received it (set by the SIGINT watcher), and what it prints.

A KeyboardInterrupt raised at an unlucky point, e.g. inside a ctypes callback while numba
compiles, is swallowed there and surfaces later as some other error. When this is set, the
CLI reports any failure as the interruption it really is (exit 130, the interrupt line).
"""

from __future__ import annotations

import threading

SIGNALLED = threading.Event()
"""Set once SIGINT has been taken for the process."""

INTERRUPTED = 130
"""Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it)."""
INTERRUPT_LINE = "error: interrupted; finished outputs are kept, rerun to resume"
"""The one line a Ctrl-C prints."""
