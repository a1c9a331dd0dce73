"""Compile ahead: the later stages' kernels, in a background process, on a cold numba cache.

A first run (a fresh clone, or after an edit of a kernel's source) compiles every numba
kernel on first use, ~25 CPU-s for ``analyze --demo`` against ~17 CPU-s of work, and mostly
one kernel at a time on one core: the driver compiles the node kernels while the other
core idles, both workers compile the cluster kernel at once, and after the plan the driver
compiles the curves', the oracle's and the controller's kernels in turn while the workers
idle (numba compiles lazily, per process).

:func:`ahead` starts one ``spawn`` process that runs the stages' own library calls on a
few seconds of the same trace while the driver compiles the cluster kernel (the plan's
first simulation): the controller's step and the curves, then the cluster simulator under
every router the plan compares, the oracle and the policies (see :func:`warm`). Each
kernel it compiles lands in numba's on-disk cache (``cache=True``), where the run's own
first call of it loads it instead of compiling it; one still being compiled when the run
reaches it is compiled by the run as before. Nothing else is kept: the process writes no
file outside numba's cache, and its results are thrown away, so it never changes a result;
it is stopped when the run ends.

It starts only when the cache lacks a kernel it compiles (:func:`cold`), on a machine of
two or more cores, at most one per process at a time; ``AnalyzeConfig.precompile`` turns it
off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from helm_plan.analyze.config import AnalyzeConfig
from helm_plan.exec.local import spawn_worker

WARM_WINDOWS = 3
"""Windows of the trace the background process runs the stages on (the oracle and the
policies need more than one; every kernel it compiles is the same for any length)."""
WARM_MAX_REQUESTS = 3_000
"""At most this many of the trace's first requests (a kernel's types never depend on it)."""

LEFT_TO_RUN = ("helm_plan.plan.dense.", "helm_plan.plan.routed.")
"""Modules whose kernels the run compiles itself: those that build the plan's scaled and
routed traces (each under 0.5 s to compile; warming them would need the plan's own inputs)."""
NICE = 10
"""The background process's niceness above the run's once the routers' rules are compiled:
the plan's workers wait for those, and after them it takes only the cores the run leaves
idle (while the plan's workers run, it would slow them as much as it gains)."""

_running: list[Any] = []  # the process this process started, while it runs (spawn_worker)


def _sentinels() -> list[Any]:
    # one kernel of each group the process compiles: the cluster's, the controller's, the
    # curves' (any missing one means the cache is cold for that group)
    from helm_plan.cache import kvcurve
    from helm_plan.cluster import _kernel as cluster_kernel
    from helm_plan.controller import _kernel as controller_kernel

    return [cluster_kernel.run_window, controller_kernel.step, kvcurve._kv_multi_kernel]


def cold() -> bool:
    """Whether numba's cache lacks a current compiled version of a kernel :func:`warm`
    compiles (its index names none for this source: never written, or the source changed)."""
    for d in _sentinels():
        cache = getattr(d, "_cache", None)
        index = getattr(getattr(cache, "_cache_file", None), "_load_index", None)
        if index is None:  # caching off (NUMBA_DISABLE_JIT, ...): nothing to warm
            return False
        try:
            if not index():
                return True
        except OSError:
            return True
    return False


def _head(trace_path: Path, cfg: AnalyzeConfig) -> Any:
    """The trace's first :data:`WARM_WINDOWS` windows (at most :data:`WARM_MAX_REQUESTS`
    requests), as an Arrow table: the same columns and types as the run's trace."""
    f = pq.ParquetFile(trace_path)
    table = next(f.iter_batches(batch_size=WARM_MAX_REQUESTS))
    ts = table.column("ts_s").to_numpy()
    keep = int(np.searchsorted(ts, ts[0] + WARM_WINDOWS * cfg.window_s)) if len(ts) else 0
    return pa.Table.from_batches([table.slice(0, keep)])


def warm(trace_path: str, cfg: AnalyzeConfig, nice: int = 0) -> None:
    """Run the stages' library calls on the head of the trace (the background process's
    body; callable in-process, where it only costs the time). ``nice``: added to this
    process's niceness once the routers' rules are compiled.

    The run's first simulation (the plan's start factor, a one-node fleet) compiles the
    cluster kernel meanwhile, and with it the request kernel every simulator shares
    (``serve_request``); then come the plan's fleets behind each router, and once the plan
    is done the curves, the oracle (the node replay) and the policies (the controller).
    So the kernels that share nothing with the cluster kernel come first here (the
    controller's step, the curves' passes), and only then what builds on it (the routers'
    rules, the node replay), by when the run has cached it: the two processes compile no
    kernel twice but the trace context's small ``_kv_peak`` (before, with the cluster kernel
    here and the node replay there, each compiled ``serve_request``).
    """
    from helm_plan.analyze.policies_stage import stage_policies
    from helm_plan.analyze.stages import stage_curves, stage_oracle
    from helm_plan.cluster import ClusterConfig
    from helm_plan.cluster.compare import run_point
    from helm_plan.controller.features import N_FEATURES
    from helm_plan.controller.runtime import DEFAULT_PATH, Controller
    from helm_plan.plan.loadcurve import LOAD_CURVE_ROUTER
    from helm_plan.profiles import resolve_slo_ms
    from helm_plan.sim import load_context

    ctx = load_context(
        _head(Path(trace_path), cfg), gpu=cfg.gpu, model=cfg.model, latency=cfg.latency,
        pool_bytes=cfg.pool_bytes, pool_fraction=cfg.pool_fraction, seed=cfg.seed,
    )  # fmt: skip
    node = cfg.node_config(resolve_slo_ms(ctx.model, cfg.slo_ms))
    oracle = cfg.oracle_config()
    Controller.load(DEFAULT_PATH).step(np.zeros(N_FEATURES), None)
    # its KV pass before its EMB ones: the run starts with the EMB pass, so where the two
    # meet here they compile different kernels
    stage_curves(ctx, cfg.curves_config(), kv_first=True)
    if cfg.capacity:  # the plan's fleets: the load curve's router and the plan's
        for router in dict.fromkeys((LOAD_CURVE_ROUTER, *cfg.routers)):
            run_point(ctx, ClusterConfig(nodes=2, router=router, node=node), "static:0.5", oracle)
    if nice:
        os.nice(nice)
    labels = stage_oracle(ctx, node, oracle)
    stage_policies(ctx, node, oracle, labels, n_boot=10, confidence=cfg.confidence, seed=cfg.seed)


def _main(trace_path: str, cfg: AnalyzeConfig) -> None:
    # the run's output is the run's: nothing from here (a library's warning about a head of
    # three windows, say) reaches the user's terminal
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    with contextlib.suppress(Exception):  # a failure here only costs the run its head start
        warm(trace_path, cfg, NICE)


@contextlib.contextmanager
def ahead(trace_path: str | Path, cfg: AnalyzeConfig) -> Iterator[bool]:
    """Compile the run's later kernels in a background process while the block runs, when
    :func:`cold` and the machine has a core to spare; yields whether one started."""
    start = (
        cfg.precompile and (os.cpu_count() or 1) >= 2 and not _running and cold()
        and cfg.executor == "local"
    )  # fmt: skip
    if not start:
        yield False
        return
    # like a pool worker: no Ctrl-C report of its own, and gone when the run is
    proc = spawn_worker(_main, (str(trace_path), dataclasses.replace(cfg, workers=1)),
                        "helm-plan compile ahead")  # fmt: skip
    _running.append(proc)
    try:
        yield True
    finally:
        _running.remove(proc)
        if proc.is_alive():  # numba writes each cache file atomically: stopping is safe
            proc.terminate()
        proc.join()
