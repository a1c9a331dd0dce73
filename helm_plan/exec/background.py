"""Work that runs beside the foreground on the workers it leaves idle.

The carry oracle is sequential in windows and steps its forks on threads of
the driver, so a process pool of two has a worker idle for most of it. Work that
does not depend on the labels (the best-static search, the cache curves) can
fill that worker: :class:`Background` runs ``fn(view)`` on a daemon thread,
where ``view`` is ``executor.trickle()`` (one task in flight per map), so its
tasks take a worker only when one is free of the foreground's queue instead
of queueing a batch ahead of it. The answer is the same as running ``fn`` in
the foreground: only where and when its tasks run changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from helm_plan.exec.base import Executor

T = TypeVar("T")


class Background(Generic[T]):
    """``fn(view)`` on a daemon thread; :meth:`result` waits and re-raises its error here."""

    def __init__(self, view: Executor, fn: Callable[[Executor], T], name: str) -> None:
        self._out: dict[str, Any] = {}
        # a daemon: a Ctrl-C in the foreground never waits for a background task to end
        self._thread = threading.Thread(target=self._run, args=(view, fn), daemon=True,
                                        name=f"helm-plan {name}")  # fmt: skip
        self._thread.start()

    def _run(self, view: Executor, fn: Callable[[Executor], T]) -> None:
        try:
            self._out["value"] = fn(view)
        except BaseException as e:  # re-raised in the caller's thread by result()
            self._out["error"] = e

    def result(self) -> T:
        """Wait for ``fn``; its value, or its exception raised in this thread."""
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]


def background(executor: Executor, fn: Callable[[Executor], T], name: str) -> Background[T] | None:
    """``fn`` in the background of ``executor``'s pool, or None when it has no worker to lend."""
    view = executor.trickle()
    return None if view is None else Background(view, fn, name)
