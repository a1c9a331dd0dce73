"""One node's replay cost, this tree against an earlier git revision (an A/B of a kernel change).

Both sides run ``simulate_node`` (static r = 0.3, lazy refill, gr-small on a100-80g, pool 25%
of the footprint) on the same trace in fresh processes, interleaved so both see the same
machine load; the figure is CPU µs per request, best of ``--repeat`` per side. The baseline
is checked out into a temporary git worktree (its own numba cache, so its kernels compile
once in a warm-up run).

Trace: the cluster benchmark's steady synth trace of ``--requests`` requests.

Run: ``python benchmarks/bench_kernel_ab.py --baseline REV [--requests N] [--repeat K]``
(``--baseline-dir DIR`` compares against a source tree as it is, without git).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(path: str, repeat: int) -> None:
    from helm_plan.sim import NodeConfig, load_context, simulate_node

    ctx = load_context(path, pool_fraction=0.25)
    simulate_node(ctx, 0.3, NodeConfig(window_s=1e6))  # compile or load the kernels
    best = float("inf")
    for _ in range(repeat):
        c0 = time.process_time()
        simulate_node(ctx, 0.3, NodeConfig(refill="lazy"))
        best = min(best, time.process_time() - c0)
    print(json.dumps({"us_per_req": best / ctx.arrays.n_requests * 1e6}))


def run(tree: Path, trace: str, repeat: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--child", trace, str(repeat)], cwd=tree,
                         env=env, capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"run in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["us_per_req"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", help="git revision to compare against")
    ap.add_argument(
        "--baseline-dir",
        help="a source tree to compare against as it is, instead of a worktree of --baseline",
    )
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per side")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if not args.baseline and not args.baseline_dir:
        ap.error("--baseline REV (or --baseline-dir DIR) is required")
    label = args.baseline or args.baseline_dir
    from bench_cluster import make_trace  # this script's folder is on sys.path

    trace = Path(tempfile.gettempdir()) / f"bench_cluster_steady_{args.requests}.parquet"
    make_trace(trace, args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline_dir:
            base = Path(args.baseline_dir).resolve()
        else:
            base = Path(tmp) / "baseline"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                            str(base), args.baseline], check=True)  # fmt: skip
        try:
            ours, theirs = [], []
            for _ in range(args.rounds):
                theirs.append(run(base, str(trace), args.repeat))
                ours.append(run(ROOT, str(trace), args.repeat))
                print(f"  baseline {theirs[-1]:.1f} µs/req, this tree {ours[-1]:.1f}", flush=True)
        finally:
            if not args.baseline_dir:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(base)], check=False)  # fmt: skip
    print("\n| figure | value | peer (same run) | ratio |\n|---|---|---|---|")
    print(
        f"| one node, {args.requests:,} requests, CPU per request | {min(ours):.1f} µs "
        f"| {label}: {min(theirs):.1f} µs | {min(theirs) / min(ours):.2f}x faster |"
    )


if __name__ == "__main__":
    main()
