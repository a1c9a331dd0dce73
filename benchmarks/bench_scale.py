"""Scaling a loaded trace for the plan: the dense arrays directly, against the table route.

``plan`` and ``analyze``'s capacity stage scale the trace to the planned traffic
(users scaling: ``K`` clones). Ours: ``plan.dense.scale_arrays`` on the arrays
``arrays.from_file`` loaded. The peer, measured in the same run, is what the
capacity stage did before: read the trace as an Arrow table (``trace.read``),
scale the table (``plan.scale``) and densify the scaled copy (``from_table``),
with the loaded arrays held beside them (``analyze`` holds its context
throughout). Each side runs in a fresh process after the same load; memory is
its ``VmHWM``, time is the scaling alone. Both sides' arrays are hashed, field
by field: the script prints ``same arrays at every factor: True`` when they agree.

Trace: ``helm_plan.synth`` mixed regime at 250 QPS with 64 candidates (the
``bench_analyze.py`` trace), ``--requests`` long.

Run: ``python benchmarks/bench_scale.py [--requests N] [--factors 1,3.46,0.6] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status (Linux only)")


def child(path: str, what: str, factor: float) -> None:
    import dataclasses
    import hashlib

    import numpy as np

    from helm_plan import trace
    from helm_plan.arrays import from_file, from_table
    from helm_plan.plan import scale, scale_arrays

    a = from_file(path, seed=0)
    loaded = _status_mib("VmRSS:")
    t0 = time.perf_counter()
    if what == "ours":
        s, _ = scale_arrays(a, factor, seed=0)
    else:
        table = trace.read(path)
        scaled, _ = scale(table, factor, seed=0)
        s = from_table(scaled, seed=0)
        del table, scaled
    wall = time.perf_counter() - t0
    peak = _status_mib("VmHWM:")
    h = hashlib.sha256()
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        h.update(f.name.encode())
        if isinstance(v, np.ndarray):
            h.update(memoryview(np.ascontiguousarray(v)).cast("B"))
            h.update(str(v.dtype).encode())
        else:
            h.update(repr(v).encode())
    print(json.dumps({"wall_s": wall, "peak_mib": peak, "loaded_mib": loaded,
                      "requests": s.n_requests, "sha": h.hexdigest()}))  # fmt: skip


def run_child(path: Path, what: str, factor: float) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(path), what, str(factor)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"child {what} x{factor} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_200_000)
    ap.add_argument("--factors", default="1,3.46,0.6", help="scale factors, comma-separated")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the trace is cached")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], float(args.child[2]))
        return
    from bench_analyze import make_trace  # the same trace file, written once and reused

    p = make_trace(Path(args.dir), args.requests, 64)
    factors = [float(f) for f in args.factors.split(",")]
    run_child(p, "ours", factors[0])  # compile (or load) the numba kernels once
    rows, same = [], True
    for k in factors:
        ours, peer = run_child(p, "ours", k), run_child(p, "peer", k)
        rows.append(
            f"| scale x{k:g} by users, {ours['requests']:,} requests out | "
            f"{ours['peak_mib']:,.0f} MiB peak ({ours['loaded_mib']:,.0f} after the load), "
            f"{ours['wall_s']:.1f} s | table route: {peer['peak_mib']:,.0f} MiB, "
            f"{peer['wall_s']:.1f} s | {ours['peak_mib'] / peer['peak_mib']:.2f}x memory, "
            f"{ours['wall_s'] / peer['wall_s']:.2f}x time; same arrays: "
            f"{ours['sha'] == peer['sha']} |"
        )
        same &= ours["sha"] == peer["sha"]
    print(f"\ntrace: {p.name}")
    print("| figure | ours | peer (same run) | ratio |\n|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nsame arrays at every factor: {same}")


if __name__ == "__main__":
    main()
