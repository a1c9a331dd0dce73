"""`helm-plan analyze --demo` from a cold numba cache finishes within the 60 s budget (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
def test_demo_cold_cache_under_60s(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cold")}
    out = tmp_path / "demo"
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "helm_plan_cli.main", "analyze", "--demo", "-o", str(out), "-q"],
        capture_output=True, env=env, timeout=300,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr.decode()
    s = json.loads((out / "summary.json").read_text())
    assert s["setup"]["windows"] >= 12 and s["trace"]["requests"] >= 10_000
    assert (out / "report.html").stat().st_size < 10 * 2**20
    assert wall <= 60.0, f"demo took {wall:.1f} s"
