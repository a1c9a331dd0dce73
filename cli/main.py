"""The ``helm-plan`` console-script entry point (the app itself is :mod:`helm_plan_cli.app`).

This module imports nothing heavy at the top: :func:`main` must block SIGINT
before numeric libraries start their threads (see :func:`_take_sigint`), and a
spawned worker re-runs this module while it starts.
"""

from __future__ import annotations

import _thread
import gc
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
from typing import Any

from helm_plan_cli._interrupt import INTERRUPT_LINE, INTERRUPTED, SIGNALLED

__all__ = ["INTERRUPTED", "INTERRUPT_LINE", "main"]


def __getattr__(name: str) -> Any:  # noqa: ANN401
    # `from helm_plan_cli.main import app` keeps working, loading the app on first use.
    if name == "app":
        from helm_plan_cli.app import app

        return app
    raise AttributeError(name)


def _watch_sigint() -> None:
    """Take Ctrl-C for the whole process (SIGINT is blocked in every other thread).

    First Ctrl-C: stop the worker processes now (the pool would otherwise wait for
    their current task) and raise KeyboardInterrupt in the main thread, which
    unwinds normally (atomic writes clean up). A second Ctrl-C exits at once.
    """
    signal.sigwait({signal.SIGINT})
    SIGNALLED.set()
    for p in multiprocessing.active_children():
        p.terminate()
    _thread.interrupt_main()
    # CPython 3.11 sees a signal tripped from another thread only at the main thread's
    # next eval-breaker event: waking every 50 ms takes the GIL and so provides one.
    while signal.sigtimedwait({signal.SIGINT}, 0.05) is None:
        pass
    sys.stderr.write(INTERRUPT_LINE + "\n")
    sys.stderr.flush()
    os._exit(INTERRUPTED)


def _take_sigint() -> None:
    """Block SIGINT in this thread and in every thread and process started after it.

    A signal for the process goes to some thread that does not block it; in CPython
    3.11 one landing in a non-Python thread (polars, numba and DuckDB start them)
    is noticed late or never. Blocked everywhere, it reaches only the watcher
    thread. Worker processes inherit the mask from birth, so a terminal's Ctrl-C
    (sent to the whole process group) is reported by the parent alone.
    """
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # started with Ctrl-C ignored (a shell's background job): keep it so
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    threading.Thread(target=_watch_sigint, name="helm-plan-sigint", daemon=True).start()


def main() -> None:
    """Console-script entry point."""
    _take_sigint()  # first: before any import that starts threads
    code = None
    try:
        from helm_plan_cli import app as cli

        cli.set_debug("--debug" in sys.argv)
        cli.app(prog_name="helm-plan")
    except SystemExit as e:
        if e.code != INTERRUPTED:
            raise
        code = e.code
    except KeyboardInterrupt:  # while loading, before the app maps it to its line
        sys.stderr.write(INTERRUPT_LINE + "\n")
        code = INTERRUPTED
    except BrokenPipeError:
        # the reader of stdout went away (`helm-plan ... | head`): nothing is wrong with
        # the run, but nothing more can be shown. Point stdout at /dev/null so the exit's
        # flush cannot raise again, and exit 1 as Python does on EPIPE (its docs' recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    if code is None:
        return
    # Interrupted (outside the except block, so the unwound frames are freed): skip
    # interpreter teardown, where compiled-code and DuckDB threads caught mid-call
    # can crash it (SIGSEGV instead of exit 130). First run multiprocessing's own
    # exit step, minus the joins: release the pools' named semaphores (else its
    # resource tracker warns of leaks after we are gone).
    gc.collect()
    run_finalizers = getattr(multiprocessing.util, "_run_finalizers", None)
    if run_finalizers is not None:
        run_finalizers(0)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
