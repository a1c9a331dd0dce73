"""The compile-ahead process (:mod:`helm_plan.analyze.warm`): when it starts, that it stops
with its run, that its cache check reads numba's own index, and that it compiles the kernels
(and signatures) the run calls."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helm_plan import synth
from helm_plan.analyze import build_config, demo_plan, demo_synth_config, warm


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("warm") / "demo20.parquet"
    synth.write(dataclasses.replace(demo_synth_config(), duration_s=20.0), path)
    return path


def _cfg(**kw: object):  # noqa: ANN202
    return dataclasses.replace(build_config(demo_plan(), {"workers": 1}), **kw)


def test_nothing_starts_when_off_warm_or_one_core(monkeypatch, trace):  # noqa: ANN001
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(warm, "cold", lambda: True)
    with warm.ahead(trace, _cfg(precompile=False)) as started:
        assert not started and not warm._running
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    with warm.ahead(trace, _cfg()) as started:
        assert not started
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(warm, "cold", lambda: False)
    with warm.ahead(trace, _cfg()) as started:
        assert not started and not warm._running


def test_the_process_ends_with_its_block_and_is_alone(monkeypatch, trace):  # noqa: ANN001
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(warm, "cold", lambda: True)
    with warm.ahead(trace, _cfg()) as started:
        assert started
        (proc,) = warm._running
        assert proc.is_alive() and proc.daemon
        with warm.ahead(trace, _cfg()) as again:  # a nested run starts no second one
            assert not again and warm._running == [proc]
    assert not warm._running
    # stopped, not waited for: the block ended long before its imports could
    assert not proc.is_alive() and proc.exitcode == -signal.SIGTERM


def test_a_ctrl_c_while_it_starts_is_dropped(monkeypatch, trace):  # noqa: ANN001
    # the run reports Ctrl-C and stops it; the process itself must neither die of it nor
    # print a KeyboardInterrupt traceback while it imports (it starts with SIGINT blocked)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(warm, "cold", lambda: True)
    with warm.ahead(trace, _cfg()):
        (proc,) = warm._running
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(1.0)
        assert proc.is_alive()
    assert proc.exitcode == -signal.SIGTERM


def test_cold_reads_numba_index(monkeypatch, tmp_path):  # noqa: ANN001
    # a kernel of its own, cached beside its source: cold until its first call writes the
    # cache, warm after, cold again once the source changes (numba's index is stamped with it)
    src = tmp_path / "warm_probe.py"
    code = "import numba\n@numba.njit(cache=True)\ndef f(x):\n    return x + {}\n"
    src.write_text(code.format(1))
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("warm_probe")
    monkeypatch.setattr(warm, "_sentinels", lambda: [mod.f])
    assert warm.cold()
    assert mod.f(1) == 2
    assert not warm.cold()
    src.write_text(code.format(22))  # another size and time stamp
    os.utime(src, (1, 1))
    sys.modules.pop("warm_probe")
    mod = importlib.import_module("warm_probe")
    assert warm.cold()
    assert mod.f(1) == 23
    assert not warm.cold()


_COMPILED = textwrap.dedent(
    """
    import json, sys
    from numba.core import event
    from helm_plan.analyze import build_config, demo_plan, run_analyze, warm

    compiled, depth = [], [0]

    class Top(event.Listener):  # the kernels compiled here, not those compiled inside them
        def on_start(self, e):
            if depth[0] == 0:
                d = e.data["dispatcher"].py_func
                compiled.append(d.__module__ + "." + d.__qualname__)
            depth[0] += 1

        def on_end(self, e):
            depth[0] -= 1

    event.register("numba:compile", Top())
    mode, trace, out = sys.argv[1:]
    cfg = build_config(demo_plan(), {"workers": 1, "precompile": False})
    run_analyze(trace, cfg, out) if mode == "run" else warm.warm(trace, cfg)
    print(json.dumps(compiled))
    """
)


def _compiled(mode: str, trace: Path, out: Path, cache: Path) -> list[str]:
    env = os.environ | {"NUMBA_CACHE_DIR": str(cache)}
    run = subprocess.run([sys.executable, "-c", _COMPILED, mode, str(trace), str(out)],
                         capture_output=True, text=True, check=True, env=env)  # fmt: skip
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_after_warm_the_run_compiles_only_its_plan_trace_kernels(trace, tmp_path):  # noqa: ANN001
    # an empty numba cache of their own, as on a first run: warm() on the head of the trace,
    # then a demo-configured run of the whole trace, each in a fresh interpreter, with numba's
    # compile events recorded; the run must find in the cache every kernel it calls (and for
    # its argument types) but those that build the plan's scaled and routed traces
    cache = tmp_path / "numba"
    warmed = _compiled("warm", trace, tmp_path / "unused", cache)
    assert not (tmp_path / "unused").exists()  # warm() writes nothing but numba's cache
    for k in ("helm_plan.cluster._kernel.run_window", "helm_plan.controller._kernel.step",
              "helm_plan.cache.kvcurve._kv_multi_kernel",
              "helm_plan.cluster.routers.helm.Helm.route"):  # fmt: skip
        assert k in warmed, k  # compiled there (the cache started empty)
    ran = _compiled("run", trace, tmp_path / "run", cache)
    assert (tmp_path / "run" / "summary.json").is_file()
    assert all(k.startswith(warm.LEFT_TO_RUN) for k in ran), ran
