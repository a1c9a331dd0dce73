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
    to it: a watchdog thread ends it once the parent is gone (it is reparented), and
    the error it would print on reading its task from the gone parent is noise.

    Not ``PR_SET_PDEATHSIG``: Linux sends that signal when the *thread* that forked the
    worker exits, not the process, and a pool spawns workers from whichever thread
    submits (the background best-static search's thread ends mid-run), so it killed
    live workers of a running pool (``BrokenProcessPool``).
    """
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    # the pid spawn recorded, not getppid(): a parent gone already would read as init's
    known = _mp.parent_process()
    parent = known.pid if known is not None and known.pid is not None else _os.getppid()
    import threading
    import time

    def watch() -> None:
        while _os.getppid() == parent:
            time.sleep(0.5)
        _os._exit(0)

    threading.Thread(target=watch, daemon=True, name="helm-plan parent watch").start()
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
