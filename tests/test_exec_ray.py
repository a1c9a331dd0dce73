"""The Ray executor gives the local executor's answers, names failed tasks, survives killed workers.

One local Ray instance (2 CPUs) serves the whole module; the last test closes it
and checks nothing of it is left running.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from conftest import small_table, untimed

from helm_plan import exec as executors
from helm_plan import trace
from helm_plan.analyze import build_config, run_analyze
from helm_plan.errors import ConfigError
from helm_plan.exec import Executor, ExecutorError, TaskError
from helm_plan.exec.ray import RayExecutor
from helm_plan.oracle import OracleConfig, best_static, label_windows, read_labels, write_labels
from helm_plan.sim import NodeConfig, load_context

# Ray workers import a task's function by module name, and this test module is not on their
# path (the library's tasks are, installed): ship this module's functions by value instead.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SAMPLE = Path(__file__).resolve().parents[1] / "datasets" / "samples" / "mixed-small.parquet"
NCFG = NodeConfig(slo_ms=1.0, window_s=10.0)
OCFG = OracleConfig(trials=3, seed=5, warmup="window")


@pytest.fixture(scope="module")
def rex():
    ex = RayExecutor(num_cpus=2)
    assert ex.workers == 2  # starts the instance once for the module
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def ctx():
    return load_context(SAMPLE, gpu="a100-80g", model="gr-small", pool_fraction=0.1, seed=5)


@pytest.fixture(scope="module")
def local_labels(ctx):
    return label_windows(ctx, NCFG, OCFG, executor=executors.local(1))


def _ipc(df) -> bytes:
    return df.write_ipc(None).getvalue()


def test_oracle_labels_identical_to_local(rex, ctx, local_labels):
    seen = []
    got = label_windows(ctx, NCFG, OCFG, lambda d, t: seen.append((d, t)), rex)
    n_w = ctx.n_windows(NCFG.window_s)
    assert seen[0] == (0, n_w) and seen[-1] == (n_w, n_w)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert _ipc(got.table) == _ipc(local_labels.table)


def test_best_static_identical_to_local(rex, ctx):
    want = best_static(ctx, NCFG, OCFG, executor=executors.local(1))
    got = best_static(ctx, NCFG, OCFG, executor=rex)
    assert (got.ratio, got.p99_ms, got.flatness) == (want.ratio, want.p99_ms, want.flatness)
    assert _ipc(got.evaluated) == _ipc(want.evaluated)


def test_capacity_plan_identical_to_local(rex):
    from helm_plan.plan import PlanConfig, plan

    t = small_table(1200, n_users=120, n_items=900, max_new=4, n_candidates=8, rate_qps=300.0,
                    seed=4)  # fmt: skip
    cfg = PlanConfig(gpus=("a100-80g",), policies=("best-static", "emb-max"),
                     routers=("jsq", "helm"), slo_ms=2.0, pool_fraction=0.3, scale=3.0,
                     max_nodes=8, node=NodeConfig(window_s=2.0), n_boot=50,
                     oracle=OracleConfig(coarse_step=0.5), load_max_requests=8000)  # fmt: skip
    want = plan(t, cfg, executor=executors.local(1))
    got = plan(t, cfg, executor=rex)
    for name in ("capacity", "evaluated", "savings", "load_curve", "max_qps"):
        assert _ipc(getattr(got, name)) == _ipc(getattr(want, name)), name
    assert got.answer == want.answer


# two whole analyzes with their capacity plans, one on Ray: 174 s alone on a slow 2-core
# machine (2026-12-07), past the suite's 300 s once with another test run beside it
@pytest.mark.timeout(600)
def test_analyze_summary_identical_to_local(rex, tmp_path):
    t = small_table(1500, n_users=150, n_items=2000, max_new=8, n_candidates=16, seed=3)
    tp = trace.write(t, tmp_path / "t.parquet", {"source": "tests.small_table", "seed": 3})
    plan = {
        "analyze": {"window_s": 5.0, "pool_fraction": 0.3, "n_boot": 50, "slo_ms": 0.5},
        "oracle": {"trials": 2, "coarse_step": 0.25, "warmup": "window"},
        "curves": {"n_points": 11},
    }
    cfg = build_config(plan)
    assert (cfg.executor, cfg.ray_address) == ("local", None)
    # the module's instance is running, so the ray run joins it (and leaves it running)
    runs = {
        k: build_config(plan, {"executor": k, "workers": w}) for k, w in (("local", 1), ("ray", 2))
    }
    out = {}
    for k, c in runs.items():
        res = run_analyze(tp, c, tmp_path / k)
        s = json.loads(res.summary_path.read_text())
        out[k] = untimed(s, also=("versions",))
    assert out["ray"] == out["local"]
    assert ray.is_initialized()
    # the executor is not in the stage keys: a ray rerun over the local run reuses every stage
    res = run_analyze(tp, runs["ray"], tmp_path / "local")
    assert [r.name for r in res.stages if not r.cached] == ["report"]


def test_cli_oracle_on_ray_matches_local(rex, local_labels, tmp_path):
    from helm_plan_cli.main import app
    from typer.testing import CliRunner

    out = tmp_path / "labels.parquet"
    args = ["oracle", str(SAMPLE), "-o", str(out), "--pool-fraction", "0.1", "--slo-ms", "1",
            "--trials", "3", "--seed", "5", "--warmup", "window", "--quiet"]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--executor", "ray", "--workers", "2"])
    assert res.exit_code == 0, res.output
    want = read_labels(write_labels(local_labels, tmp_path / "local.parquet"))
    assert _ipc(read_labels(out).table) == _ipc(want.table)
    addr = f"127.0.0.1:{_free_port()}"
    res = CliRunner().invoke(app, [*args, "--executor", "ray", "--ray-address", addr])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: cannot reach the Ray cluster at {addr}: ")
    assert res.stderr.count("\n") == 1
    res = CliRunner().invoke(app, [*args, "--ray-address", addr])
    assert res.exit_code == 2 and "add --executor ray" in res.stderr


def _fail_on(shared, x):
    if x == 17:
        raise ValueError("boom")
    if x == 4:
        raise ConfigError("bad value 4", hint="use another")
    return x


def test_task_errors_name_the_task(rex):
    with pytest.raises(TaskError) as e:
        rex.map(_fail_on, list(range(15, 19)), label=lambda w: f"window {w}")
    assert e.value.one_line() == (
        "window 17 failed: ValueError: boom; a bug; rerun with --debug for the traceback"
    )
    with pytest.raises(ConfigError) as e:
        rex.map(_fail_on, [4], label=lambda w: f"window {w}")
    assert e.value.one_line() == "window 4: bad value 4; use another"
    assert rex.map(_fail_on, [1, 2], shared=None) == [1, 2]  # the executor is still usable


def test_task_module_missing_on_workers_is_a_clear_error(rex, tmp_path, monkeypatch):
    # like a cluster node without helm-plan: the driver imports the task's module, workers cannot
    (tmp_path / "driver_only_mod.py").write_text("def task(shared, x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import driver_only_mod

    with pytest.raises(ExecutorError) as e:
        rex.map(driver_only_mod.task, [1], label=lambda x: f"plan point {x}")
    assert e.value.one_line().startswith("plan point 1 failed on Ray: ")
    assert "No module named 'driver_only_mod'" in str(e.value)
    assert "on every Ray node" in e.value.hint


def _kill_once_then(shared, item):
    fn, inner, marker = shared
    if item == 2 and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-run; Ray retries its task
    return fn(inner, item)


@dataclasses.dataclass
class _KillOnce(Executor):
    """Wraps the oracle's own task so window 2's first attempt kills its worker process."""

    inner: Executor
    marker: Path

    @property
    def workers(self) -> int:
        return self.inner.workers

    def map(self, fn, items, *, shared=None, progress=None, label=None):  # noqa: ANN001, ANN201
        return self.inner.map(_kill_once_then, items, shared=(fn, shared, str(self.marker)),
                              progress=progress, label=label)  # fmt: skip


def test_killed_worker_is_retried_with_identical_results(rex, ctx, local_labels, tmp_path):
    marker = tmp_path / "killed-once"
    got = label_windows(ctx, NCFG, OCFG, executor=_KillOnce(rex, marker))
    assert marker.exists()  # the kill happened
    assert _ipc(got.table) == _ipc(local_labels.table)


def _sleepy(shared, x):
    if x > 0:
        time.sleep(1.5)
        Path(shared, f"done-{x}").touch()
    return x


def test_ctrl_c_cancels_outstanding_tasks(rex, tmp_path):
    t_int = []

    def interrupt(done, total):
        if done:  # Ctrl-C right after the first task completes: 1 is running, 2 and 3 queued
            t_int.append(time.perf_counter())
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rex.map(_sleepy, [0, 1, 2, 3], shared=str(tmp_path), progress=interrupt)
    assert time.perf_counter() - t_int[0] < 1.0  # did not wait for the running task
    time.sleep(2.5)  # long enough for any surviving task to finish and leave its file
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert rex.map(_sleepy, [0], shared=str(tmp_path)) == [0]  # still usable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_settings_are_one_line_errors(monkeypatch):
    addr = f"127.0.0.1:{_free_port()}"
    t0 = time.perf_counter()
    with pytest.raises(ExecutorError) as e:
        RayExecutor(address=addr).map(_fail_on, [1])
    assert time.perf_counter() - t0 < 10
    assert e.value.one_line().startswith(f"cannot reach the Ray cluster at {addr}: ")
    assert "ray start --head" in e.value.hint
    with pytest.raises(ExecutorError, match="cannot reach"):  # at once, before any work
        executors.get_executor("ray", address=addr)
    with pytest.raises(ExecutorError, match="expected HOST:PORT"):
        RayExecutor(address="headnode").map(_fail_on, [1])
    with pytest.raises(ConfigError, match="executor must be one of local, ray, got 'spark'"):
        executors.get_executor("spark")
    with pytest.raises(ConfigError, match="Ray address .* is set but the executor is 'local'"):
        executors.get_executor("local", address="127.0.0.1:6379")
    assert isinstance(executors.get_executor("local", 2), executors.ProcessExecutor)
    with executors.get_executor("ray", 2) as ex:
        assert isinstance(ex, RayExecutor) and not ex.started  # ray starts on the first map
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the package were not installed
    with pytest.raises(ExecutorError) as e:
        executors.get_executor("ray")
    assert e.value.one_line().endswith("install it with pip install 'helm-plan[ray]'")


def test_ray_is_imported_only_when_picked():
    code = "import sys, helm_plan_cli.main, helm_plan.analyze; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _session_processes(session: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if session.encode() in (p / "cmdline").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def test_close_shuts_down_the_instance_it_started(rex):
    """Last in the module: closing the executor leaves no Ray instance behind."""
    rex.map(_fail_on, [1])
    session = Path(ray._private.worker._global_node.get_session_dir_path()).name
    assert _session_processes(session)  # raylet, GCS and workers of this instance
    rex.close()
    assert not ray.is_initialized() and not rex.started
    deadline = time.monotonic() + 10
    while _session_processes(session) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _session_processes(session) == []
