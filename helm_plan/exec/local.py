"""Local executor backends: in-process, and ``spawn`` worker processes."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import shared_memory
from typing import Any, TypeVar

from helm_plan.config import require_int
from helm_plan.exec import blocks, counters
from helm_plan.exec.base import Executor, ExecutorError, Progress, task_error
from helm_plan.exec.blocks import Ref

T = TypeVar("T")
R = TypeVar("R")

_WATCH_S = 0.5
"""How often a worker checks that the driver still runs, seconds."""
_CACHE_SIZE = 8
"""Shared objects a worker (and the parent's publication table) keeps at once, newest last."""


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


def _init_worker(parent: int) -> None:
    # Only the parent reports Ctrl-C; workers stop when the parent shuts the pool down. A
    # worker starts with SIGINT blocked (map spawns it so), so a Ctrl-C that reaches the
    # process group while it is still importing stays pending and is dropped here, instead
    # of printing a KeyboardInterrupt traceback from the worker's bootstrap.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # A pool's workers outlive a driver that is killed (SIGKILL, OOM): each holds both ends
    # of the task queue, so it never sees end-of-file and would wait (or replay) forever.
    # Exit as soon as this process is reparented, i.e. the driver is gone (``parent`` is the
    # driver's pid as it spawned us: a worker still importing when the driver dies exits too).

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="helm-plan parent watch").start()


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked while the block runs: a process spawned in it inherits the mask, so a
    Ctrl-C while it imports stays pending until :func:`_init_worker` ignores it (the
    parent's own pending Ctrl-C is delivered when the mask is restored)."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _as_worker(parent: int, target: Callable[..., None], args: tuple[Any, ...]) -> None:
    _init_worker(parent)
    target(*args)


def spawn_worker(target: Callable[..., None], args: tuple[Any, ...], name: str) -> Any:
    """Start a daemon ``spawn`` process running ``target(*args)`` as the pool's workers run
    their tasks: Ctrl-C left to this process, gone when this process is. Returns it."""
    proc = mp.get_context("spawn").Process(
        target=_as_worker, args=(os.getpid(), target, args), daemon=True, name=name
    )
    with sigint_blocked():
        proc.start()
    return proc


def _call(fn: Callable[[Any, Any], Any], refs: tuple[Ref, ...], whole: bool, item: Any) -> Any:
    parts = tuple(blocks.load(r, _CACHE_SIZE) for r in refs)
    # the result and the task's work counts (the driver adds them into its own)
    return counters.counted(fn, parts[0] if whole else parts, item)


class ProcessExecutor(Executor):
    """A pool of ``spawn`` worker processes; each shared object reaches a worker once.

    ``shared`` is published once into a shared-memory block: its pickle, and
    beside it every contiguous numpy array it holds (pickle protocol 5's
    out-of-band buffers). A worker unpickles it the first time one of its tasks
    needs it and keeps it (the newest :data:`_CACHE_SIZE` objects); the arrays
    it gets are views of the block, so all workers read one copy of the trace
    and none holds its own; an array already in a block the driver holds a view of
    (:meth:`share`) is referenced there, not copied (:mod:`helm_plan.exec.blocks`).
    Tasks must not write into shared inputs (they never
    could: a worker's copy served all its tasks). A tuple ``shared`` is published element
    by element and each element is remembered by identity, so a caller that maps
    many times over the same big input (the trace) plus a small changing part
    (a node's state at a window) ships the big one once per worker for the whole
    run. Inside ``with`` the pool lives until the block ends, so repeated maps
    pay no process start-up; outside it each map starts and stops its own pool.
    """

    def __init__(self, workers: int, in_flight: int | None = None) -> None:
        self._workers = workers
        self._in_flight = in_flight  # set on a trickle view: tasks of one map at once
        self._keep = False
        self._pool: ProcessPoolExecutor | None = None
        self._published: dict[int, tuple[Any, Ref, shared_memory.SharedMemory]] = {}
        self._lock = threading.Lock()
        self._pinned: dict[int, int] = {}  # id -> maps using it, +1 if shared (never evicted)
        self._next_token = 0
        self._views: set[int] = set()  # ids of the views share handed out (pinned, so alive)
        self._mappings: list[blocks.Mapping] = []  # the views' blocks, as the driver maps them

    @property
    def workers(self) -> int:
        return self._workers

    def trickle(self) -> ProcessExecutor | None:
        """A view sharing this pool and its published inputs, one task in flight per map."""
        if not self._keep or self._workers < 2:
            return None  # a pool that lives for one map has nothing to lend
        view = ProcessExecutor(self._workers, in_flight=1)
        view._owner = self
        return view

    _owner: ProcessExecutor | None = None

    def share(self, obj: T) -> T:
        """Publish ``obj`` now and return a view of the published copy (see the base class).

        Only a pool that lives for a ``with`` block shares (one that lives for a
        single map frees its blocks after it). The view is pinned for the pool's life:
        every later map that passes it ships nothing new, and sharing it again returns
        it. Where shared memory is too small or cannot be mapped by path, ``obj`` comes
        back and maps behave as before.
        """
        if self._owner is not None:
            return self._owner.share(obj)
        if not self._keep or self._workers < 2:
            return obj
        with self._lock:
            if id(obj) in self._views:
                return obj  # already a view of its block
            self._pin(obj)
            try:
                ref = self._publish(obj)
            except ExecutorError:
                return obj  # the first map that needs the workers raises it, as it did
            finally:
                self._unpin(obj)
            got = blocks.driver_view(ref)
            if got is None:
                return obj
            view, maps = got
            self._mappings += maps  # later publications reference these, not copy them
            # the block is now remembered by the view, so ``obj`` can be freed
            _, _, block = self._published.pop(id(obj))
            self._published[id(view)] = (view, ref, block)
            self._pin(view)  # never unpinned: the pool's life
            self._views.add(id(view))
        return view

    def _pin(self, obj: Any) -> None:
        self._pinned[id(obj)] = self._pinned.get(id(obj), 0) + 1

    def _unpin(self, obj: Any) -> None:
        n = self._pinned.pop(id(obj), 0) - 1
        if n > 0:
            self._pinned[id(obj)] = n

    def __enter__(self) -> ProcessExecutor:
        self._keep = True
        return self

    def close(self) -> None:
        """Stop the pool and free every published block."""
        self._keep = False
        self._shutdown(wait=True)

    def _shutdown(self, *, wait: bool) -> None:
        if self._owner is not None:
            self._owner._shutdown(wait=wait)
            return
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
        for _, _, block in self._published.values():
            block.close()
            with contextlib.suppress(FileNotFoundError):  # a failed start may have freed it
                block.unlink()
        self._published.clear()
        self._views.clear()
        self._mappings.clear()

    def _publish(self, obj: Any) -> Ref:
        """A reference to ``obj`` in shared memory (reused while the same object is published)."""
        hit = self._published.get(id(obj))
        if hit is not None and hit[0] is obj:
            self._published[id(obj)] = self._published.pop(id(obj))  # now the newest
            return hit[1]
        self._next_token += 1
        ref, block = blocks.pack(obj, self._next_token, self._mappings)
        self._published[id(obj)] = (obj, ref, block)
        for key in [k for k in self._published if k not in self._pinned]:
            if len(self._published) <= _CACHE_SIZE:
                break
            _, _, old = self._published.pop(key)
            old.close()
            old.unlink()
        return ref

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
        if min(self._workers, total) <= 1:
            return SerialExecutor().map(fn, items, shared=shared, progress=progress, label=label)
        if self._owner is not None:
            return self._owner._map(fn, items, shared, progress, label, self._in_flight or total)
        return self._map(fn, items, shared, progress, label, total)

    def _map(self, fn, items, shared, progress, label, in_flight):  # noqa: ANN001, ANN202
        total = len(items)
        out: list[Any] = [None] * total
        whole = not isinstance(shared, tuple)
        parts: tuple[Any, ...] = ()
        try:
            with self._lock:  # a trickle view may map from another thread
                parts = (shared,) if whole else tuple(shared)
                for x in parts:  # pinned first: publishing one part never evicts another
                    self._pin(x)
                refs = tuple(self._publish(x) for x in parts)
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(
                        max_workers=self._workers, mp_context=mp.get_context("spawn"),
                        initializer=_init_worker, initargs=(os.getpid(),),
                    )  # fmt: skip
                pool = self._pool
            futs: dict[Any, int] = {}
            todo = iter(enumerate(items))

            def submit(k: int) -> None:
                with sigint_blocked():  # workers are spawned by submit
                    for i, it in itertools.islice(todo, k):
                        futs[pool.submit(_call, fn, refs, whole, it)] = i

            submit(in_flight)
            done = 0
            while futs:
                finished, _ = wait(futs, return_when=FIRST_COMPLETED)
                for f in finished:
                    i = futs.pop(f)
                    try:
                        out[i], counts = f.result()
                    except Exception as e:
                        raise task_error(e, label(items[i]) if label else _default_label(i)) from e
                    counters.add(counts)
                    done += 1
                    if progress:
                        progress(done, total)
                submit(len(finished))
        except BaseException:
            self._shutdown(wait=False)
            raise
        finally:
            with self._lock:
                for x in parts:
                    self._unpin(x)
        if not self._keep:
            self._shutdown(wait=True)
        return out


def local(workers: int = 1) -> Executor:
    """Serial for ``workers == 1``, else a process pool (0 = one per core)."""
    require_int("workers", workers, 0)
    n = workers if workers > 0 else (os.cpu_count() or 1)
    return SerialExecutor() if n == 1 else ProcessExecutor(n)
