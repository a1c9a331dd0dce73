"""Loading a trace into the simulators' dense arrays, against just reading the file.

``load_context`` streams the parquet file twice in batches (validate and collect,
then map ids to int32 and scatter them straight into the per-user histories, a
counting sort by user; ``helm_plan/_densify.py``). The peer is
``pyarrow.parquet.read_table`` of the same file: reading it into memory and doing
nothing else. Each side runs in a fresh process; memory is its ``VmHWM``.

Trace: ``helm_plan.synth`` steady regime at 2000 QPS, ``--requests`` long (the
cluster benchmark's trace: about 100 history tokens per request).

Run: ``python benchmarks/bench_load.py [--requests N] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def child(path: str, what: str) -> None:
    import pyarrow.parquet as pq

    from helm_plan.sim import load_context

    base = peak_mib()
    t0 = time.perf_counter()
    if what == "load":
        ctx = load_context(path, pool_fraction=0.25)
        tokens = len(ctx.arrays.hist_values)
    else:
        t = pq.read_table(path)
        tokens = sum(len(c.values) for c in t.column("new_items").chunks)
    print(json.dumps({"wall_s": time.perf_counter() - t0, "peak_mib": peak_mib(),
                      "base_mib": base, "tokens": tokens}))  # fmt: skip


def run_child(path: Path, what: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(path), what],
                         capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"child {what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the trace is cached")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    from bench_cluster import make_trace  # the same trace file, written once and reused

    p = Path(args.dir) / f"bench_cluster_steady_{args.requests}.parquet"
    make_trace(p, args.requests)
    run_child(p, "load")  # compile (or load) the numba kernels once
    ours, peer = run_child(p, "load"), run_child(p, "read")
    tok = ours["tokens"]
    print("\n| figure | value | peer (same run) | ratio |\n|---|---|---|---|")
    print(f"| load_context, {args.requests:,} requests ({tok / 1e6:,.0f}M history tokens, "
          f"{p.stat().st_size / 2**20:,.0f} MiB file) | {ours['wall_s']:.1f} s, "
          f"{ours['peak_mib']:,.0f} MiB peak ({ours['base_mib']:,.0f} before) | "
          f"pyarrow read_table only: {peer['wall_s']:.1f} s, {peer['peak_mib']:,.0f} MiB "
          f"peak | {ours['peak_mib'] / peer['peak_mib']:.2f}x memory, "
          f"{ours['wall_s'] / peer['wall_s']:.1f}x time; "
          f"{(ours['peak_mib'] - ours['base_mib']) * 2**20 / tok:.1f} B per token |")  # fmt: skip


if __name__ == "__main__":
    main()
