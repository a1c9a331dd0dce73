"""``helm-plan analyze --demo`` on its first run: compiling ahead against compiling on first use.

A first run (a fresh clone, or after a kernel's source changed) compiles every numba kernel
it calls. Each figure here is the README's demo command in a fresh process, a fresh output
folder and, by default, an **empty** numba cache (``NUMBA_CACHE_DIR`` in a new scratch
folder: what the first run after ``pip install`` compiles): once as shipped (the later
stages' kernels compiled in a background process, :mod:`helm_plan.analyze.warm`), and once
with ``[analyze] precompile = false`` (the peer: every kernel compiled where it is first
called). Prints wall and CPU seconds of each and their ratio, and checks that both wrote
the same summary (but for the timings, the output folder and the controller's measured
decision latency). ``--cache kept`` uses the numba cache as it is (on a warm
cache the background process never starts: both runs are the warm demo).

Run: ``python benchmarks/bench_demo.py [--runs N] [--cache fresh|kept] [--duration S]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-c", "from helm_plan_cli.main import main; main()"]


def one(d: Path, precompile: bool, cache: str, duration: float | None) -> tuple[float, float, dict]:
    """Wall and CPU seconds (the run and its children) of one demo, and its summary."""
    work = Path(tempfile.mkdtemp(dir=d))
    plan = work / "plan.toml"
    text = f"[analyze]\nprecompile = {'true' if precompile else 'false'}\n"
    if duration is not None:
        text += f"[demo]\nduration_s = {duration}\n"
    plan.write_text(text)
    env = dict(os.environ)
    if cache == "fresh":
        env["NUMBA_CACHE_DIR"] = str(work / "numba")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([*CLI, "analyze", "--demo", "--config", str(plan), "-o", str(work / "out"),
                    "--quiet"], cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = json.loads((work / "out" / "summary.json").read_text())
    # what may differ between two runs of one command: the timings, the output folder, and
    # the controller's decision latency (measured in the run, by its own timer)
    summary.pop("timings_s")
    summary["trace"].pop("path")
    (summary.get("controller") or {}).pop("decision_latency_us", None)
    return wall, cpu, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="runs of each (alternating)")
    ap.add_argument("--cache", choices=("fresh", "kept"), default="fresh")
    ap.add_argument("--duration", type=float, default=None, help="demo trace seconds (40)")
    args = ap.parse_args()
    rows: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    summaries = []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.runs):
            for pre in (True, False):
                wall, cpu, summary = one(Path(d), pre, args.cache, args.duration)
                rows[pre].append((wall, cpu))
                summaries.append(summary)
                print(f"precompile={pre!s:5}  wall {wall:6.1f} s  cpu {cpu:6.1f} s", flush=True)
    same = all(s == summaries[0] for s in summaries)
    best = {pre: min(w for w, _ in r) for pre, r in rows.items()}
    print(f"numba cache: {args.cache}; best of {args.runs}")
    print(f"demo, compiling ahead:           {best[True]:6.1f} s wall")
    print(f"demo, compiling on first use:    {best[False]:6.1f} s wall (peer)")
    print(f"ratio (peer / ahead):            {best[False] / best[True]:6.2f}x")
    print(f"summaries identical: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
