"""The executor protocol and the choice of a local backend."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from helm_plan.errors import HelmPlanError

T = TypeVar("T")
R = TypeVar("R")
Progress = Callable[[int, int], None]


class TaskError(HelmPlanError):
    """A task failed with an unexpected exception; the message names the task."""

    exit_code = 1


class ExecutorError(HelmPlanError):
    """An executor backend cannot run: a missing package, an unreachable cluster, a dead worker."""


class Executor(ABC):
    """Maps ``fn(shared, item)`` over items; results in item order.

    A context manager: leaving it calls :meth:`close`, which releases whatever the
    backend started (a local Ray instance); local backends hold nothing between maps.
    """

    def close(self) -> None:  # noqa: B027 - deliberately optional: local backends hold nothing
        """Release what this executor started; a no-op for the local backends."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def trickle(self) -> Executor | None:
        """A view that keeps one task of its maps in flight at a time, or None.

        Work that may run in the background of another map (a thread calling the
        view's ``map``) takes a worker only when one is free of the foreground's
        queue, instead of queueing a whole batch ahead of it. None: this backend
        has no spare worker to lend (in-process) or schedules on its own.
        """
        return None

    def share(self, obj: T) -> T:
        """``obj``, or an equal copy that this executor's workers read in place.

        Use the result instead of ``obj`` and drop ``obj``: a backend whose workers
        read one published copy (shared memory) hands back a view of that copy, so
        the caller holds no second one. Here: ``obj`` itself.
        """
        return obj

    @property
    @abstractmethod
    def workers(self) -> int:
        """How many tasks may run at once."""

    @abstractmethod
    def map(
        self,
        fn: Callable[[Any, T], R],
        items: Sequence[T],
        *,
        shared: Any = None,
        progress: Progress | None = None,
        label: Callable[[T], str] | None = None,
    ) -> list[R]:
        """``[fn(shared, it) for it in items]``; ``label(item)`` names a failed task."""


def task_error(exc: BaseException, what: str) -> BaseException:
    """A library error passes through with the task named; anything else is wrapped."""
    if isinstance(exc, HelmPlanError):
        exc.args = (f"{what}: {exc.args[0]}" if exc.args else what, *exc.args[1:])
        return exc
    return TaskError(f"{what} failed: {type(exc).__name__}: {exc}",
                     hint="a bug; rerun with --debug for the traceback")  # fmt: skip
