"""Pick an executor backend from settings: the one call every command makes.

``get_executor(kind, workers, address)`` is all a command needs, so wiring a new
command to the executors is one line (``with get_executor(...) as ex:``). The
choice never changes a result, so none of these settings belong in a cache key.
"""

from __future__ import annotations

from dataclasses import dataclass

from helm_plan.config import require_int
from helm_plan.errors import ConfigError
from helm_plan.exec.base import Executor
from helm_plan.exec.local import local

EXECUTORS = ("local", "ray")
"""Executor backends by name."""


@dataclass(frozen=True)
class ExecutorConfig:
    """Which backend runs the parallel tasks, and how wide."""

    kind: str = "local"
    """``local`` (worker processes on this machine) or ``ray`` (a Ray instance or cluster)."""
    workers: int = 1
    """Tasks at once on this machine (0 = one per core): local processes, or the CPUs of the
    local Ray instance; a Ray cluster uses the CPUs its nodes declared instead."""
    address: str | None = None
    """Ray cluster address (``HOST:PORT`` from ``ray start --head``); None = a local instance."""

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {self.kind!r}",
                              hint="use --executor local or --executor ray")  # fmt: skip
        require_int("workers", self.workers, 0)
        if self.address is not None and self.kind != "ray":
            raise ConfigError(
                f"a Ray address ({self.address}) is set but the executor is {self.kind!r}",
                hint='add --executor ray (executor = "ray"), or drop the address',
            )

    def create(self) -> Executor:
        """A new executor; use it as a context manager so a local Ray instance is shut down."""
        if self.kind == "local":
            return local(self.workers)
        # imported here so helm_plan.exec never imports ray unless it is picked
        from helm_plan.exec.ray import RayExecutor, check_address, import_ray

        # a missing package or an unreachable cluster fails now, before any work, in one line
        import_ray()
        if self.address is not None:
            check_address(self.address)
            return RayExecutor(address=self.address)
        return RayExecutor(num_cpus=self.workers or None)


def get_executor(kind: str = "local", workers: int = 1, address: str | None = None) -> Executor:
    """The executor for ``--executor KIND --workers N --ray-address ADDR``."""
    return ExecutorConfig(kind, workers, address).create()
