"""Ray backend of the executor seam: the same tasks on a local Ray instance or a cluster.

Ray (an existing distributed engine) schedules the tasks; this module only
adapts it to :meth:`Executor.map`'s contract, so results are identical to the
local backends:

- ``shared`` is put in the object store once (a tuple element by element,
  each element remembered by identity for the executor's lifetime, so a big
  input mapped many times is put once per run); each worker process fetches an
  object on its first task that needs it and keeps the newest few (the same
  "once per worker" as the local process pool);
- results are collected in item order; progress advances as tasks complete;
- a task's own exception reaches the driver named by its task
  (:func:`~helm_plan.exec.base.task_error`); a worker that dies (killed, out
  of memory) is retried by Ray up to ``max_retries`` times, which is safe
  because every task is a pure function of ``(shared, item)``;
- Ctrl-C (or any error) cancels the outstanding tasks before re-raising.

``ray`` is imported when the executor first runs a map, never at import time,
so it stays an optional extra (``pip install 'helm-plan[ray]'``). Without an
address the executor starts a private local instance (``address="local"``,
never someone else's) and shuts it down on :meth:`close`; with one it connects
and only disconnects on close.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from helm_plan.exec import counters
from helm_plan.exec.base import Executor, ExecutorError, Progress, task_error

T = TypeVar("T")
R = TypeVar("R")

MAX_RETRIES = 3
"""Retries of a task whose worker died (system failures only, never a task's own exception)."""
CONNECT_TIMEOUT_S = 5.0
"""How long the reachability check of ``--ray-address`` waits (Ray itself retries for minutes)."""
WAIT_S = 0.5
"""ray.wait slice: short so Ctrl-C reaches the driver's Python promptly."""
CANCEL_S = 5.0
"""How long a cancel keeps re-cancelling tasks that have not stopped yet."""
INSTALL_HINT = "pip install 'helm-plan[ray]'"

_WORKER: dict[str, Any] = {}
"""A Ray worker process's copies of shared objects by object id (the newest ``_KEEP``)."""
_KEEP = 8
"""Shared objects a worker, and the driver's table of put objects, keep at once."""


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ExecutorError(f"the ray executor needs the ray package ({e})",
                            hint=f"install it with {INSTALL_HINT}") from None  # fmt: skip
    return ray


def _shared(box: list[Any]) -> Any:
    # The refs travel inside a list so Ray does not resolve them per task; the worker
    # resolves each once and keeps the newest few (a run's maps share the big ones).
    refs, whole = box
    parts = []
    for ref in refs:
        key = ref.hex()
        if key not in _WORKER:
            import ray

            _WORKER[key] = ray.get(ref)
            while len(_WORKER) > _KEEP:
                del _WORKER[next(iter(_WORKER))]
        parts.append(_WORKER[key])
    return parts[0] if whole else tuple(parts)


def _run_task(fn: Callable[[Any, Any], Any], box: list[Any], item: Any) -> Any:
    # the result and the task's work counts (the driver adds them into its own)
    return counters.counted(fn, _shared(box), item)


def check_address(address: str) -> None:
    """Fail fast, in one line, when nothing listens at ``address`` (``HOST:PORT`` or ``ray://``)."""
    if address in ("auto", "local"):
        return  # Ray resolves these itself, and quickly
    hostport = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = hostport.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise ExecutorError(
            f"bad Ray address {address!r}: expected HOST:PORT",
            hint="pass the address `ray start --head` printed, e.g. 10.0.0.5:6379",
        )
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise ExecutorError(
            f"cannot reach the Ray cluster at {address}: {e.strerror or type(e).__name__}",
            hint="start it with `ray start --head` and pass the address it prints, "
            "or omit --ray-address to start a local Ray instance",
        ) from None


def _first_line(e: BaseException) -> str:
    # Ray colours its task headers; keep the one line plain
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Force-cancel ``refs`` and make sure they stopped.

    Ray can miss a cancel that lands while a task is being handed to a worker (ray
    issue #24359: the task then runs to completion), so cancel again until every ref
    has resolved; it took at most 4 rounds (0.4 s) in 12 trials on the 2-core dev box.
    """
    deadline = time.monotonic() + CANCEL_S
    while refs and time.monotonic() < deadline:
        for ref in refs:
            ray.cancel(ref, force=True)
        _, refs = ray.wait(refs, num_returns=len(refs), timeout=0.1)


class RayExecutor(Executor):
    """Runs each task as a Ray task; a local instance unless ``address`` names a cluster.

    ``num_cpus`` sizes the local instance (None = every core of this machine); it
    cannot be set for a cluster, whose nodes declared their CPUs at ``ray start``.
    Use it as a context manager, or call :meth:`close`, to shut down what it started.
    """

    def __init__(
        self, address: str | None = None, num_cpus: int | None = None,
        max_retries: int = MAX_RETRIES,
    ) -> None:  # fmt: skip
        if address is not None and num_cpus is not None:
            raise ExecutorError(
                "num_cpus sizes a local Ray instance and cannot be set with a cluster address",
                hint="size the cluster with `ray start --num-cpus N` on each node",
            )
        self.address = address
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self._ray: Any = None
        self._remote: Any = None
        self._owned = False
        self._puts: dict[int, tuple[Any, Any]] = {}  # id -> (object, its ref), newest last

    @property
    def started(self) -> bool:
        """True once this executor has started or joined a Ray instance (and not closed it)."""
        return self._ray is not None

    @property
    def workers(self) -> int:
        """CPUs of the Ray instance (starts it if needed)."""
        ray = self._start()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def _start(self) -> Any:
        if self._ray is not None:
            return self._ray
        ray = import_ray()
        if self.address is not None:
            check_address(self.address)
        if ray.is_initialized():
            self._owned = False  # the caller's own Ray session: use it, leave it running
        elif self.address is None:
            # "local", not None: None would join whatever cluster RAY_ADDRESS or the
            # last `ray start` points at, and then close() could not tell what it owns.
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False,
                     logging_level=logging.WARNING, log_to_driver=False)  # fmt: skip
            self._owned = True
        else:
            try:
                ray.init(address=self.address, logging_level=logging.WARNING,
                         log_to_driver=False)  # fmt: skip
            except Exception as e:
                raise ExecutorError(
                    f"cannot connect to the Ray cluster at {self.address}: {_first_line(e)}",
                    hint="check the address `ray start --head` printed, and that this "
                    "machine runs the same ray and Python versions as the cluster",
                ) from None
            self._owned = True  # ray.shutdown() only disconnects this driver from a cluster
        self._remote = ray.remote(num_cpus=1, max_retries=self.max_retries,
                                  retry_exceptions=False)(_run_task)  # fmt: skip
        self._ray = ray
        return ray

    def close(self) -> None:
        """Shut down the local instance this executor started (or disconnect from the cluster)."""
        ray, self._ray, self._remote = self._ray, None, None
        self._puts.clear()  # refs die with the session
        if ray is not None and self._owned:
            ray.shutdown()
        self._owned = False

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
        if total == 0:
            return []
        ray = self._start()
        whole = not isinstance(shared, tuple)
        box = [[self._put(ray, x) for x in ((shared,) if whole else shared)], whole]
        # ref -> item index; a ref is dropped once read, so the driver holds no result twice
        index = {self._remote.remote(fn, box, it): i for i, it in enumerate(items)}
        out: list[Any] = [None] * total
        pending = list(index)
        done = 0
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=WAIT_S)
                for ref in ready:
                    i = index.pop(ref)
                    try:
                        out[i], counts = ray.get(ref)
                    except Exception as e:
                        what = label(items[i]) if label else f"task {i}"
                        raise self._error(e, what) from None
                    counters.add(counts)
                    done += 1
                    if progress:
                        progress(done, total)
        except BaseException:
            _cancel(ray, pending)
            raise
        return out

    def _put(self, ray: Any, obj: Any) -> Any:
        """``obj``'s ref in the object store, put once while the same object is in use."""
        hit = self._puts.pop(id(obj), None)
        if hit is None or hit[0] is not obj:
            hit = (obj, ray.put(obj))
        self._puts[id(obj)] = hit
        while len(self._puts) > _KEEP:  # a task holding a dropped ref keeps it alive
            del self._puts[next(iter(self._puts))]
        return hit[1]

    def _error(self, e: Exception, what: str) -> BaseException:
        """The task's own exception named by its task, or a one-line Ray failure."""
        exc = self._ray.exceptions
        cause = getattr(e, "cause", None) if isinstance(e, exc.RayTaskError) else None
        if isinstance(cause, BaseException) and not isinstance(cause, exc.RayError):
            return task_error(cause, what)
        if isinstance(cause, exc.RaySystemError):  # the task could not even start
            msg = _first_line(cause)
            if "No module named" in msg:  # typically a cluster node without helm-plan
                return ExecutorError(f"{what} failed on Ray: {msg}",
                                     hint="install the same helm-plan and ray on every Ray node, "
                                     "and run the driver from that environment")  # fmt: skip
            return task_error(RuntimeError(msg), what)
        if isinstance(e, exc.RayTaskError):  # the task raised something Ray could not ship back
            return task_error(RuntimeError(_first_line(cause or e)), what)
        return ExecutorError(
            f"{what} failed on Ray: {type(e).__name__}: {_first_line(e)}",
            hint=f"its worker or node died (killed, out of memory) {self.max_retries + 1} times; "
            "see `ray status` and the Ray logs (/tmp/ray/session_latest/logs)",
        )
