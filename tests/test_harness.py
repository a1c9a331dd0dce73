"""The test harness itself: a hung compiled loop fails the run in minutes, not CI's budget."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

HUNG = """
import numba as nb
import numpy as np


@nb.njit  # holds the GIL: pytest-timeout's own timer thread can never run
def spin(a):
    i = 0
    while a[0] >= 0:  # never ends (a kernel bug: a loop whose index never advances)
        i += 1
        if i < 0:
            a[1] += 1
    return i


def test_a_kernel_that_never_returns():
    spin(np.array([1, 0]))
"""


def test_a_hung_kernel_that_holds_the_gil_ends_the_run_with_its_stack(tmp_path):
    (tmp_path / "test_hung.py").write_text(HUNG)
    (tmp_path / "conftest.py").write_text(
        "from hang_watchdog import pytest_runtest_protocol, pytest_sessionstart  # noqa: F401\n"
    )
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "2",
         "-o", "timeout_method=thread", "test_hung.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode != 0
    assert "Timeout" in r.stderr and "test_a_kernel_that_never_returns" in r.stderr, r.stderr
    assert took < 120  # 2 s timeout + the watchdog's margin + numba's import and compile
