"""One node's replay cost, this tree against an earlier git revision (an A/B of a kernel change).

Both sides run ``simulate_node`` (gr-small on a100-80g, pool 25% of the footprint, 512
implicit candidates over four tables) on the same trace in fresh processes, interleaved so
both see the same machine load, in three runs:

- ``changing``: the whole trace at a ratio drawn anew for every 2 s window (seeded, uniform
  in [0.02, 0.9]: windows that thrash the EMB cache, windows where it holds every key) with
  the default refill (throttled: every lookup counts the key's hotness);
- ``changing lazy``: the same schedule with lazy refill (how the oracle and static runs step);
- ``static``: the whole trace at r = 0.3, lazy refill.

The figures are CPU µs per request, best of ``--repeat`` per side, for the whole
simulation and for the replay kernel alone (``core.replay``, the cache work). Each side
also prints a hash of its sojourns, per-request misses and window table: the table says
whether they are identical. The baseline is checked out into a temporary git worktree (its
own numba cache, so its kernels compile once in a warm-up run).

Trace: the cluster benchmark's steady synth trace of ``--requests`` requests.

Run: ``python benchmarks/bench_kernel_ab.py --baseline REV [--requests N] [--repeat K]
[--rounds R]`` (``--baseline-dir DIR`` compares against a source tree as it is, without git).
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
RUNS = ("changing", "changing lazy", "static")


def own_data(tree: Path) -> None:
    """Load the tree's own shipped data packages (its GPU profiles, its report templates).

    An editable install maps ``helm_plan._profiles`` to the installed checkout's folder, so a
    baseline imported from its own tree would read this tree's profiles (a key it does not
    know fails it); registering the tree's folders first makes every lookup the tree's own.
    """
    import importlib.util

    for package, folder in (("helm_plan._profiles", "profiles"), ("helm_plan._reports", "reports")):
        init = tree / folder / "__init__.py"
        if init.exists():
            spec = importlib.util.spec_from_file_location(
                package, init, submodule_search_locations=[str(init.parent)]
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[package] = module
            spec.loader.exec_module(module)


def child(path: str, repeat: int) -> None:
    import hashlib

    import numpy as np

    own_data(Path.cwd())  # run() starts a child in the tree it measures

    from helm_plan.sim import NodeConfig, load_context, simulate_node
    from helm_plan.sim import step as step_mod

    ctx = load_context(path, pool_fraction=0.25)
    simulate_node(ctx, 0.3, NodeConfig(window_s=1e6))  # compile or load the kernels
    n_w = ctx.n_windows(2.0)
    sched = np.round(np.random.default_rng(0).uniform(0.02, 0.9, n_w), 2)
    runs = {
        "changing": (sched, NodeConfig(window_s=2.0)),
        "changing lazy": (sched, NodeConfig(window_s=2.0, refill="lazy")),
        "static": (0.3, NodeConfig(window_s=2.0, refill="lazy")),
    }
    replay = step_mod.core.replay
    spent = [0.0]

    def timed_replay(*a, **k):  # noqa: ANN002, ANN003, ANN202
        c0 = time.process_time()
        try:
            return replay(*a, **k)
        finally:
            spent[0] += time.process_time() - c0

    out = {}
    n = ctx.arrays.n_requests
    step_mod.core.replay = timed_replay
    try:
        for name, (policy, cfg) in runs.items():
            best, best_k = float("inf"), float("inf")
            for _ in range(repeat):
                spent[0] = 0.0
                c0 = time.process_time()
                res = simulate_node(ctx, policy, cfg)
                best = min(best, time.process_time() - c0)
                best_k = min(best_k, spent[0])
            h = hashlib.sha1(res.sojourn_s.tobytes() + res.n_miss.tobytes())
            h.update(res.windows.write_ipc(None).getvalue())
            out[name] = {"us": best / n * 1e6, "kernel_us": best_k / n * 1e6,
                         "hash": h.hexdigest()}  # fmt: skip
    finally:
        step_mod.core.replay = replay
    print(json.dumps(out))


def run(tree: Path, trace: str, repeat: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--child", trace, str(repeat)], cwd=tree,
                         env=env, capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"run in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


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
                print("  " + ", ".join(f"{k}: baseline {theirs[-1][k]['kernel_us']:.1f} / this "
                                       f"tree {ours[-1][k]['kernel_us']:.1f} µs" for k in RUNS),
                      flush=True)  # fmt: skip
        finally:
            if not args.baseline_dir:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(base)], check=False)  # fmt: skip
    print("\n| figure | value | peer (same run) | ratio |\n|---|---|---|---|")
    for k in RUNS:
        same = {r[k]["hash"] for r in ours} == {r[k]["hash"] for r in theirs}
        for what, key in (("replay kernel", "kernel_us"), ("whole simulation", "us")):
            a = min(r[k][key] for r in ours)
            b = min(r[k][key] for r in theirs)
            print(f"| {k}, {args.requests:,} requests, {what}, CPU per request | {a:.1f} µs "
                  f"| {label}: {b:.1f} µs | {b / a:.2f}x faster; results "
                  f"{'identical' if same else 'DIFFER'} |")  # fmt: skip


if __name__ == "__main__":
    main()
