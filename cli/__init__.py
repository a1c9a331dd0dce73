"""The thin typer app behind the ``helm-plan`` entry point (installed as ``helm_plan_cli``)."""

import multiprocessing as _mp
import os as _os
import signal as _signal
import sys as _sys


def _worker_follows_parent() -> None:
    """In a spawned worker: ignore Ctrl-C, die with the parent, and stay quiet when orphaned.

    A spawned worker imports this package first while it starts (spawn re-runs the
    main module), before any heavy import. Only the parent reports Ctrl-C (and stops
    the workers it knows of). A worker still starting at that moment is not yet known
    to it: the kernel ends it when the parent exits (Linux), and the error it would
    print on reading its task from the gone parent is noise.
    """
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    parent = _os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(_signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: fall back to a watchdog thread
        import threading
        import time

        def watch() -> None:
            while _os.getppid() == parent:
                time.sleep(0.5)
            _os._exit(0)

        threading.Thread(target=watch, daemon=True).start()
    if _os.getppid() != parent:  # the parent exited before the death signal was armed
        _os._exit(0)
    default_hook = _sys.excepthook

    def quiet_when_orphaned(tp, value, tb):  # noqa: ANN001, ANN202
        import pickle

        # Reading the task from a parent that stopped mid-write: truncated or gone.
        if _os.getppid() != parent or issubclass(tp, EOFError | OSError | pickle.UnpicklingError):
            return
        default_hook(tp, value, tb)

    _sys.excepthook = quiet_when_orphaned


if getattr(_mp.current_process(), "_inheriting", False):
    _worker_follows_parent()
