"""Ctrl-C while worker processes label windows: one line, exit 130, workers gone at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import small_table

from helm_plan import trace


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out


def test_ctrl_c_during_parallel_oracle_is_one_line_and_stops_the_workers(tmp_path: Path):
    t = small_table(4000, n_users=300, n_items=4000, max_new=8, n_candidates=16, rate_qps=40.0)
    tp = trace.write(t, tmp_path / "t.parquet", {"source": "tests.small_table"})
    out = tmp_path / "labels.parquet"
    cmd = [sys.executable, "-m", "helm_plan_cli.main", "oracle", str(tp), "-o", str(out),
           "--workers", "2", "--trials", "40", "--window-s", "5", "--pool-fraction", "0.3",
           "--warmup", "window"]  # fmt: skip
    # Its own process group, like a shell job: Ctrl-C reaches the parent and its workers.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while len(_children(proc.pid)) < 2:  # the resource tracker, then the spawned workers
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "workers never started"
        time.sleep(0.05)
    time.sleep(1.5)  # workers busy labelling
    workers = _children(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10, "the parent waited for its workers' tasks"
    assert proc.returncode == 130, err.decode()
    lines = err.decode().strip().splitlines()
    assert lines == ["error: interrupted; finished outputs are kept, rerun to resume"], err.decode()
    assert not out.exists() and not list(tmp_path.glob(".labels.parquet.*"))
    time.sleep(0.5)
    assert not [w for w in workers if Path(f"/proc/{w}").exists()
                and "Z" not in (Path(f"/proc/{w}") / "stat").read_text().split()[2]]  # fmt: skip
