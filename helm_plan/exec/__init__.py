"""The executor seam: map a task over items, locally or on a Ray cluster.

Every embarrassingly parallel loop of the pipeline (oracle windows, static
sweeps, capacity bisection points, controller validation traces) calls
``executor.map(fn, items, shared=..., progress=...)``:

- ``fn(shared, item)`` is a module-level function (picklable by reference);
- ``shared`` is sent to each worker once, not once per task (trace arrays,
  the node context); the process pool publishes each element of a tuple
  ``shared`` once per executor lifetime, so a big input mapped many times
  reaches a worker once per run;
- results come back in item order, whatever order tasks finish in, so the
  answer is identical for any backend and worker count as long as ``fn`` is
  deterministic in ``(shared, item)`` (seed tasks from their index, never from
  a global RNG);
- ``progress(done, total)`` is called as tasks complete.

Backends: :class:`SerialExecutor` (in process) and :class:`ProcessExecutor`
(``spawn`` worker processes); :func:`local` picks one from a worker count;
``helm_plan.exec.ray.RayExecutor`` (the optional ``ray`` extra, imported only
when picked). :func:`get_executor` picks any of them from the CLI settings;
use the result as a context manager so a Ray instance it started is shut down.
A task that raises stops the map and the error propagates to the caller,
named by its task (``TaskError`` wraps non-library exceptions).
"""

from __future__ import annotations

from helm_plan.exec.background import Background, background
from helm_plan.exec.base import Executor, ExecutorError, Progress, TaskError
from helm_plan.exec.factory import EXECUTORS, ExecutorConfig, get_executor
from helm_plan.exec.local import ProcessExecutor, SerialExecutor, local

__all__ = [
    "EXECUTORS", "Background", "Executor", "ExecutorConfig", "ExecutorError", "ProcessExecutor", "Progress",
    "SerialExecutor", "TaskError", "background", "get_executor", "local",
]  # fmt: skip
