"""Local executor backends: in-process, and ``spawn`` worker processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from helm_plan.config import require_int
from helm_plan.exec.base import Executor, Progress, task_error

T = TypeVar("T")
R = TypeVar("R")

_SHARED: dict[str, Any] = {}
"""The worker process's copy of ``shared`` (set once by the pool initializer)."""


def _default_label(i: int) -> str:
    return f"task {i}"


class SerialExecutor(Executor):
    """Runs every task in this process, in order."""

    @property
    def workers(self) -> int:
        return 1

    def map(self, fn, items, *, shared=None, progress=None, label=None):  # noqa: ANN001, ANN201
        out: list[Any] = []
        total = len(items)
        if progress:
            progress(0, total)
        for i, it in enumerate(items):
            try:
                out.append(fn(shared, it))
            except Exception as e:
                raise task_error(e, label(it) if label else _default_label(i)) from e
            if progress:
                progress(i + 1, total)
        return out


def _init_worker(shared: Any) -> None:
    # Only the parent reports Ctrl-C; workers stop when the parent shuts the pool down. A
    # worker starts with SIGINT blocked (map spawns it so), so a Ctrl-C that reaches the
    # process group while it is still importing stays pending and is dropped here, instead
    # of printing a KeyboardInterrupt traceback from the worker's bootstrap.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _SHARED["value"] = shared


def _call(fn: Callable[[Any, Any], Any], item: Any) -> Any:
    return fn(_SHARED["value"], item)


class ProcessExecutor(Executor):
    """A pool of ``spawn`` worker processes; ``shared`` is pickled once per worker."""

    def __init__(self, workers: int) -> None:
        self._workers = workers

    @property
    def workers(self) -> int:
        return self._workers

    def map(  # noqa: D102
        self,
        fn: Callable[[Any, T], R],
        items: Sequence[T],
        *,
        shared: Any = None,
        progress: Progress | None = None,
        label: Callable[[T], str] | None = None,
    ) -> list[R]:
        total = len(items)
        if progress:
            progress(0, total)
        n = min(self._workers, total)
        if n <= 1:
            return SerialExecutor().map(fn, items, shared=shared, progress=progress, label=label)
        out: list[Any] = [None] * total
        ex = ProcessPoolExecutor(
            max_workers=n, mp_context=mp.get_context("spawn"),
            initializer=_init_worker, initargs=(shared,),
        )  # fmt: skip
        try:
            # workers are spawned by submit: block SIGINT meanwhile so they inherit the mask
            # (the parent's own pending Ctrl-C is delivered when the mask is restored)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                futs = {ex.submit(_call, fn, it): i for i, it in enumerate(items)}
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for done, f in enumerate(as_completed(futs), 1):
                i = futs[f]
                try:
                    out[i] = f.result()
                except Exception as e:
                    raise task_error(e, label(items[i]) if label else _default_label(i)) from e
                if progress:
                    progress(done, total)
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown(wait=True)
        return out


def local(workers: int = 1) -> Executor:
    """Serial for ``workers == 1``, else a process pool (0 = one per core)."""
    require_int("workers", workers, 0)
    n = workers if workers > 0 else (os.cpu_count() or 1)
    return SerialExecutor() if n == 1 else ProcessExecutor(n)
