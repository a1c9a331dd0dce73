"""A run directory belongs to one run at a time and to one trace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helm_plan import rundir
from helm_plan.errors import ConfigError


def test_second_run_fails_at_once_and_the_lock_is_released(tmp_path):
    d = tmp_path / "run"
    with rundir.claim(d, "a" * 64, {"x": 1}):
        assert (d / rundir.LOCK).is_file()
        with pytest.raises(ConfigError) as e, rundir.claim(d, "a" * 64, {}):
            pass
        assert "is in use by another run" in e.value.one_line()
        assert "pass another --out" in e.value.one_line()
    assert not (d / rundir.LOCK).exists()
    assert json.loads((d / rundir.RECORD).read_text())["trace_sha256"] == "a" * 64
    with rundir.claim(d, "a" * 64, {}):  # the same trace may run there again
        pass


def test_another_trace_is_refused(tmp_path):
    d = tmp_path / "run"
    with rundir.claim(d, "a" * 64, {}):
        pass
    with (
        pytest.raises(ConfigError, match="holds the run of another trace"),
        rundir.claim(d, "b" * 64, {}),
    ):
        pass
    assert not (d / rundir.LOCK).exists()  # a refused run leaves no lock behind


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    import socket

    (d / rundir.LOCK).write_text(
        json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()})
    )
    with rundir.claim(d, "c" * 64, {}):
        pass
    # a lock held by a live process (this one) is respected
    (d / rundir.LOCK).write_text(json.dumps({"pid": 1, "host": socket.gethostname()}))
    with pytest.raises(ConfigError, match="pid 1"), rundir.claim(d, "c" * 64, {}):
        pass
