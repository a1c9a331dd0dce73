"""Whether this process received Ctrl-C (set by the SIGINT watcher before it interrupts).

A KeyboardInterrupt raised at an unlucky point, e.g. inside a ctypes callback while numba
compiles, is swallowed there and surfaces later as some other error. When this is set, the
CLI reports any failure as the interruption it really is (exit 130, the interrupt line).
"""

from __future__ import annotations

import threading

SIGNALLED = threading.Event()
"""Set once SIGINT has been taken for the process."""
