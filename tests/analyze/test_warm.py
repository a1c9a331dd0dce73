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


_SIGNATURES = textwrap.dedent(
    """
    import gc, json, sys
    from numba.core.registry import CPUDispatcher
    from helm_plan.analyze import build_config, demo_plan, run_analyze, warm
    mode, trace, out = sys.argv[1:]
    cfg = build_config(demo_plan(), {"workers": 1, "precompile": False})
    run_analyze(trace, cfg, out) if mode == "run" else warm.warm(trace, cfg)
    sigs = {}
    for d in gc.get_objects():
        if isinstance(d, CPUDispatcher) and d.py_func.__module__.startswith("helm_plan"):
            name = d.py_func.__module__ + "." + d.py_func.__qualname__
            sigs.setdefault(name, []).extend(str(s) for s in d.signatures)
    print(json.dumps(sigs))
    """
)


def _signatures(mode: str, trace: Path, out: Path) -> dict[str, list[str]]:
    run = subprocess.run([sys.executable, "-c", _SIGNATURES, mode, str(trace), str(out)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_warm_compiles_what_the_run_calls(trace, tmp_path):  # noqa: ANN001
    # each in a fresh interpreter: the kernels (and argument types) a demo-configured run
    # calls, against those warm() compiles on the head of the same trace
    ran = _signatures("run", trace, tmp_path / "run")
    warmed = _signatures("warm", trace, tmp_path / "unused")
    assert not (tmp_path / "unused").exists()  # warm() writes nothing but numba's cache
    missed = {k: [s for s in v if s not in warmed.get(k, [])] for k, v in ran.items()}
    missed = {k: v for k, v in missed.items() if v}
    assert all(k.startswith(warm.LEFT_TO_RUN) for k in missed), missed
    # the big ones are among those it compiles ahead
    for k in ("helm_plan.cluster._kernel.run_window", "helm_plan.controller._kernel.step",
              "helm_plan.cache.kvcurve._kv_multi_kernel",
              "helm_plan.cluster.routers.helm.Helm.route"):  # fmt: skip
        assert ran[k] and set(ran[k]) <= set(warmed[k]), k
