"""A CLI worker lives as long as its parent process, not as long as the thread that spawned it.

A process pool spawns workers from whichever thread submits; ``analyze`` submits
best-static runs from a background thread that ends mid-run. The CLI's workers
once armed ``PR_SET_PDEATHSIG``, which Linux fires when the spawning *thread*
exits: live workers of a running pool got SIGTERM, and ``analyze --workers 2``
failed with ``BrokenProcessPool`` on most runs.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import helm_plan_cli  # noqa: F401  the spawned child imports it (this module) while it starts


def _wait_then_put(q) -> None:  # noqa: ANN001
    q.put("started")  # the CLI package is imported: whatever it arms is armed
    time.sleep(1.5)  # the spawning thread ends meanwhile
    q.put(os.getpid())


def test_worker_outlives_the_thread_that_spawned_it():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    box: dict[str, mp.process.BaseProcess] = {}

    def spawn() -> None:
        p = ctx.Process(target=_wait_then_put, args=(q,))
        p.start()
        box["p"] = p
        # stay until the worker has started: a thread that ends before it hands its children
        # to another thread of the process, and the bug only bit a longer-lived thread
        assert q.get(timeout=60) == "started"

    t = threading.Thread(target=spawn)
    t.start()
    t.join()  # the thread ends while the worker waits
    p = box["p"]
    p.join(timeout=60)
    assert p.exitcode == 0, f"worker ended with {p.exitcode} (-15: SIGTERM at the thread's exit)"
    assert q.get(timeout=5) == p.pid


def test_worker_still_exits_when_its_parent_dies(tmp_path: Path):
    # the parent spawns a CLI worker that would wait a minute, then is SIGKILLed: the worker
    # must notice (its parent watch) and exit, not linger as an orphan
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import multiprocessing as mp, sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_worker_threads import _sleep_long

        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=_sleep_long)
            p.start()
            print(p.pid, flush=True)
            time.sleep(120)
    """)
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    time.sleep(2.0)  # the child has imported the CLI package and armed its watch
    assert Path(f"/proc/{child}").exists()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the orphaned worker kept running"


def _sleep_long() -> None:
    time.sleep(60)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_analyze_with_two_workers_as_a_user_runs_it_is_quiet_and_succeeds(tmp_path: Path):
    # the installed entry point's module, so the workers import the CLI package as a user's
    # do (the bug above broke most such runs); stderr stays empty: no worker noise at exit
    # (a SharedMemory collected while arrays over it lived printed "Exception ignored")
    from conftest import small_table

    from helm_plan import trace

    t = small_table(1500, n_users=120, n_items=2000, max_new=6, n_candidates=8, seed=2)
    tp = trace.write(t, tmp_path / "t.parquet", {"source": "tests.small_table", "seed": 2})
    cfg = tmp_path / "plan.toml"
    cfg.write_text("[oracle]\ntrials = 2\ncoarse_step = 0.25\n[analyze]\nn_boot = 50\n")
    cmd = [sys.executable, "-m", "helm_plan_cli.main", "analyze", str(tp), "-o",
           str(tmp_path / "run"), "--workers", "2", "--no-capacity", "--window-s", "5",
           "--pool-fraction", "0.3", "-q", "--config", str(cfg), "--spill-dir", str(tmp_path)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert (tmp_path / "run" / "summary.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml", "run", "t.parquet"]
