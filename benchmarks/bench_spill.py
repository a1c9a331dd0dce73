"""History tokens on disk (``--spill-dir``) against tokens in memory, on one whole-trace run.

A trace's history tokens are its largest array (4 bytes a token: about 0.5 GiB
at 1.5M requests of the ``bench_analyze.py`` trace, 3.7 GB at 10M). With
``spill_dir`` they live in an unlinked file and every kernel drops their mapped
pages after each window or span (:func:`helm_plan.io.release_spilled`), so the
process holds a window's pages rather than the trace's. Each side runs in a
fresh process: the load (``load_context``), the workload tables (a pass over
every token) and one whole-trace node simulation at r = 0.5. Memory is the
process's ``VmHWM`` (file pages it maps count, as anonymous ones do); the
sojourns of both sides are hashed: ``same sojourns: True`` when they agree.

Pool: ``--pool-fraction`` of the footprint (0.05 by default: 25 % of a 1.5M-request
trace's footprint exceeds an A100's HBM).

``--trace FILE`` measures an existing trace instead (e.g. a 10M-request one), and
``--windows N`` runs the node over its first ``N`` windows only (a whole 10M-request
run takes most of an hour a side on one core).

Run: ``python benchmarks/bench_spill.py [--requests N | --trace FILE] [--windows N]
[--pool-fraction F] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(path: str, spill: str, pool_fraction: float, windows: int) -> None:
    import hashlib

    import numpy as np
    from bench_analyze import peak_mib as _peak_mib  # this process's VmHWM

    from helm_plan.analyze.stages import workload_tables
    from helm_plan.sim import NodeConfig, StaticPolicy, load_context, simulate_node
    from helm_plan.sim.policy import runner_config
    from helm_plan.sim.step import NodeRunner

    t0 = time.perf_counter()
    ctx = load_context(path, pool_fraction=pool_fraction, spill_dir=spill or None)
    load_s, loaded = time.perf_counter() - t0, _peak_mib()
    t0 = time.perf_counter()
    workload_tables(ctx.arrays, ctx.model.max_seq_len)
    if windows:  # the first windows only, stepped as simulate_node steps them
        node = NodeRunner(ctx, runner_config(NodeConfig(), [StaticPolicy(0.5)]))
        parts = [node.step(0.5).sojourn_s for _ in range(min(windows, node.n_windows))]
        sojourn, served = np.concatenate(parts), int(node.edges[len(parts)])
    else:
        sojourn = simulate_node(ctx, np.array([0.5]), NodeConfig()).sojourn_s
        served = ctx.arrays.n_requests
    run_s = time.perf_counter() - t0
    sha = hashlib.sha256(np.ascontiguousarray(sojourn).tobytes()).hexdigest()
    print(json.dumps({"load_s": load_s, "run_s": run_s, "loaded_mib": loaded,
                      "peak_mib": _peak_mib(), "requests": ctx.arrays.n_requests,
                      "served": served, "tokens_mib": ctx.arrays.hist_values.nbytes / 2**20,
                      "sha": sha}))  # fmt: skip


def run_child(path: Path, spill: str, pool_fraction: float, windows: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(path), spill, str(pool_fraction),
                          str(windows)], capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"child (spill {spill!r}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_200_000)
    ap.add_argument("--trace", help="an existing trace file instead of the generated one")
    ap.add_argument("--windows", type=int, default=0, help="run the first N windows (0 = all)")
    ap.add_argument("--pool-fraction", type=float, default=0.05)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the trace is cached")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], float(args.child[2]), int(args.child[3]))
        return
    from bench_analyze import make_trace  # the same trace file, written once and reused

    p = Path(args.trace) if args.trace else make_trace(Path(args.dir), args.requests, 64)
    with tempfile.TemporaryDirectory(dir=args.dir) as spill:
        ours = run_child(p, spill, args.pool_fraction, args.windows)
        peer = run_child(p, "", args.pool_fraction, args.windows)
        left = list(Path(spill).iterdir())
    same = ours["sha"] == peer["sha"]
    print(f"\ntrace: {p.name}, {ours['requests']:,} requests, tokens {ours['tokens_mib']:,.0f} MiB")
    print("| figure | ours (tokens on disk) | peer: tokens in memory (same run) | ratio |")
    print("|---|---|---|---|")
    what = (
        f"the first {args.windows} windows ({ours['served']:,} requests)"
        if args.windows
        else "one whole-trace run"
    )
    print(f"| load, workload tables, {what} at r = 0.5 | {ours['peak_mib']:,.0f} MiB peak "
          f"({ours['loaded_mib']:,.0f} by the load's end); load {ours['load_s']:.1f} s, run "
          f"{ours['run_s']:.1f} s | {peer['peak_mib']:,.0f} MiB ({peer['loaded_mib']:,.0f}); "
          f"load {peer['load_s']:.1f} s, run {peer['run_s']:.1f} s | "
          f"{ours['peak_mib'] / peer['peak_mib']:.2f}x memory, "
          f"{(ours['load_s'] + ours['run_s']) / (peer['load_s'] + peer['run_s']):.2f}x time |")  # fmt: skip
    print(f"\nsame sojourns: {same}; spill files left behind: {len(left)}")


if __name__ == "__main__":
    main()
