"""``analyze`` at scale (issue 15): replays, workers, peak memory, SHARDS memory.

Each figure runs in a fresh process (``--child``), so its peak memory (``VmHWM``
of the driver) is its own, and prints one JSON line.

1. **replays**: requests replayed through the cache core during ``analyze``
   (``helm_plan.cache.core.REPLAYED``, every kernel call counts, the workers'
   too: a pool adds each task's count back into the driver's) divided by the
   trace's length, per stage at one worker (at two, the stages overlap), and in
   all at two (the same work: it is checked). Target: <= 15 in all.
2. **workers**: wall time of ``analyze --workers 2`` against ``--workers 1`` on
   the same trace, each in a fresh process with a fresh run directory
   (identical outputs are checked: labels and summary). Target: >= 1.6x.
3. **peak memory** of each of those runs: the driver's peak RSS, and the peak of
   the proportional set size (PSS) summed over the driver, its workers and the
   resource tracker, sampled from ``/proc/PID/smaps_rollup`` every 0.2 s (a
   worker's own peak is not measurable through ``RUSAGE_CHILDREN``: Linux carries
   ``ru_maxrss`` across the ``spawn`` exec; PSS counts a page the processes share,
   such as the trace's shared-memory block, once in all; it also splits the
   libraries' pages with any other process that maps them, so on a busy machine it
   can read below the driver's RSS).
4. **SHARDS 1%** peak memory of the curves pass against the exact pass on the
   same trace, each in a fresh process from loading the file to the curves, as
   ``helm-plan profile`` runs them: the exact pass on the full dense arrays
   (``arrays.from_file``), the SHARDS pass on the sampled load
   (``cache.sampled.load``: only the tokens it can sample). Target: <= 0.2x.

Traces: ``helm_plan.synth`` mixed regime (steady, trend, burst thirds), pool
fraction 0.25, ``--candidates`` per request (64 default; the synth default is
512), ``--requests`` long; ``analyze`` with ``--no-capacity`` unless
``--capacity`` (the plan stage then runs first, on a request budget).

Run: ``python benchmarks/bench_analyze.py [--requests N] [--candidates K]
[--capacity] [--skip-workers] [--skip-shards] [--shards-requests N] [--shards-trace FILE]
[--exact-load-only]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QPS = 250.0


def peak_mib() -> float:
    """This process's peak RSS (VmHWM: Linux carries ru_maxrss across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def make_trace(d: Path, n: int, candidates: int) -> Path:
    from helm_plan import synth
    from helm_plan.synth import SynthConfig

    p = d / f"bench_analyze_mixed_{n}_{candidates}.parquet"
    if not p.exists():
        synth.write(SynthConfig(regime="mixed", qps=QPS, duration_s=n / QPS,
                                candidates=candidates, seed=1), p)  # fmt: skip
    return p


def child_analyze(trace_path: str, workers: int, capacity: bool, out: str) -> None:
    import resource

    import pyarrow.parquet as pq

    from helm_plan.analyze import AnalyzeConfig, run_analyze
    from helm_plan.cache import core

    # the footer's count: reading the table here (about 0.7 KB a request) would be this
    # process's peak at a million requests, not analyze's
    n = pq.ParquetFile(trace_path).metadata.num_rows
    per_stage: dict[str, float] = {}

    @contextlib.contextmanager
    def pf(label: str):  # noqa: ANN202
        r0 = core.REPLAYED["requests"]
        yield lambda done, total: None
        per_stage[label.split(" ")[0]] = (core.REPLAYED["requests"] - r0) / n

    cfg = AnalyzeConfig(workers=workers, capacity=capacity, pool_fraction=0.25)
    t0 = time.perf_counter()
    res = run_analyze(trace_path, cfg, out, pf)
    wall = time.perf_counter() - t0
    me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {"driver": me.ru_utime + me.ru_stime, "workers": ch.ru_utime + ch.ru_stime}
    summary = {k: v for k, v in res.summary.items() if k != "timings_s"}
    print(json.dumps({"wall_s": wall, "peak_mib": peak_mib(),
                      "requests": n, "replays": core.REPLAYED["requests"] / n, "cpu_s": cpu,
                      "per_stage": per_stage, "stages_s": res.summary["timings_s"],
                      "summary": json.dumps(summary, sort_keys=True, default=str),
                      "labels": str(res.labels_path)}))  # fmt: skip


def child_curves(trace_path: str, sample_rate: float, load_only: bool = False) -> None:
    from bench_cluster import load_capped  # 25% of a 1.2M trace's footprint exceeds an A100

    from helm_plan.cache import sampled
    from helm_plan.cache.curves import CurvesConfig, compute_curves
    from helm_plan.pool import Pool
    from helm_plan.profiles import DEFAULT_MODEL, load_model

    data = None
    t0 = time.perf_counter()
    if sample_rate < 1.0:  # as `helm-plan profile --sample-rate`: only the tokens SHARDS reads
        data = sampled.load(Path(trace_path), load_model(DEFAULT_MODEL), sample_rate=sample_rate)
        ctx = load_capped(data.workload)
    else:
        ctx = load_capped(Path(trace_path))
    loaded = peak_mib()
    load_s = time.perf_counter() - t0
    if load_only:  # the exact pass of a 10M trace takes hours: its load is a lower bound
        print(json.dumps({"wall_s": float("nan"), "load_s": load_s, "peak_mib": loaded,
                          "loaded_mib": loaded, "rows": 0}))  # fmt: skip
        return
    t0 = time.perf_counter()
    cv = compute_curves(data or ctx.workload, ctx.gpu, ctx.model, Pool(ctx.pool_bytes, ctx.pool_source),
                        CurvesConfig(sample_rate=sample_rate))  # fmt: skip
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "load_s": load_s, "peak_mib": peak_mib(),
                      "loaded_mib": loaded, "rows": cv.table.height}))  # fmt: skip


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        out.append(todo.pop())
        todo += kids.get(out[-1], [])
    return out


def _pss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def run_child(*args: str) -> dict:
    """Run a figure in a fresh process; adds ``pss_mib``, the process tree's peak PSS sum."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=out,
                                stderr=err, text=True)  # fmt: skip
        peak = 0
        while proc.poll() is None:
            peak = max(peak, sum(_pss_kib(q) for q in _tree(proc.pid)))
            time.sleep(0.2)
        out.seek(0), err.seek(0)
        if proc.returncode:
            raise SystemExit(f"child {args} failed:\n{err.read()[-3000:]}")
        res = json.loads(out.read().strip().splitlines()[-1])
    res["pss_mib"] = peak / 1024 if peak else float("nan")  # nan: no /proc (not Linux)
    return res


def analyze_figures(args: argparse.Namespace, d: Path, rows: list[tuple[str, ...]]) -> None:
    """Figures 1-3: replays, and analyze at one and two workers."""
    tp = make_trace(d, args.requests, args.candidates)
    cap = "1" if args.capacity else "0"
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        one = run_child("analyze", str(tp), "1", cap, f"{tmp}/w1")
        print(f"workers 1: {json.dumps({k: v for k, v in one.items() if k != 'summary'})}",
              flush=True)  # fmt: skip
        stages = ", ".join(f"{k} {v:.1f}" for k, v in one["per_stage"].items() if v)
        rows.append((f"replays per analyze, {one['requests']:,} requests", f"{one['replays']:.1f}",
                     f"by stage: {stages}", "", "(target <= 15; before: 74)"))  # fmt: skip
        rows.append((f"analyze --workers 1, {one['requests']:,} requests x {args.candidates} "
                     "candidates", f"{one['wall_s']:.0f} s, peak {one['peak_mib']:,.0f} MiB "
                     f"(all processes: {one['pss_mib']:,.0f} MiB PSS)", "", "", ""))  # fmt: skip
        if not args.skip_workers:
            two = run_child("analyze", str(tp), "2", cap, f"{tmp}/w2")
            print(f"workers 2: {json.dumps({k: v for k, v in two.items() if k != 'summary'})}",
                  flush=True)  # fmt: skip
            same = (
                one["summary"].replace(f"{tmp}/w1", "") == two["summary"].replace(f"{tmp}/w2", "")
                and Path(one["labels"]).read_bytes() == Path(two["labels"]).read_bytes()
            )
            rows.append((f"analyze --workers 2, {two['requests']:,} requests",
                         f"{two['wall_s']:.0f} s, driver peak {two['peak_mib']:,.0f} MiB, all "
                         f"processes {two['pss_mib']:,.0f} MiB PSS",
                         f"--workers 1: {one['wall_s']:.0f} s",
                         f"{one['wall_s'] / two['wall_s']:.2f}x; outputs identical: {same}; "
                         f"replays {two['replays']:.1f} (one worker: {one['replays']:.1f})",
                         "(target >= 1.6x)"))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--candidates", type=int, default=64)
    ap.add_argument("--capacity", action="store_true", help="plan first (analyze's default)")
    ap.add_argument("--skip-workers", action="store_true", help="skip figures 2-3 at 2 workers")
    ap.add_argument("--skip-shards", action="store_true", help="skip figure 4")
    ap.add_argument("--shards-only", action="store_true", help="run figure 4 alone")
    ap.add_argument("--shards-requests", type=int, default=1_200_000)
    ap.add_argument("--shards-trace", help="figure 4 on this trace file instead of a new one")
    ap.add_argument(
        "--exact-load-only",
        action="store_true",
        help="figure 4's exact run only loads the trace (its peak is a lower bound)",
    )
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where traces are cached")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "analyze":
            child_analyze(rest[0], int(rest[1]), rest[2] == "1", rest[3])
        else:
            child_curves(rest[0], float(rest[1]), rest[2:] == ["load-only"])
        return
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()}", flush=True)
    d = Path(args.dir)
    rows: list[tuple[str, ...]] = []
    if not args.shards_only:
        analyze_figures(args, d, rows)
    if not args.skip_shards:
        if args.shards_trace:
            sp = Path(args.shards_trace)
        else:
            sp = make_trace(d, args.shards_requests, args.candidates)
        exact = run_child(
            "curves", str(sp), "1.0", *(["load-only"] if args.exact_load_only else [])
        )
        shards = run_child("curves", str(sp), "0.01")
        rows.append((f"curves pass, SHARDS 1%, {sp.name}",
                     f"{shards['peak_mib']:,.0f} MiB peak ({shards['loaded_mib']:,.0f} after "
                     f"load), load {shards['load_s']:.0f} s + pass {shards['wall_s']:.0f} s",
                     f"exact: {exact['peak_mib']:,.0f} MiB ({exact['loaded_mib']:,.0f} after "
                     f"load), load {exact['load_s']:.0f} s + pass {exact['wall_s']:.0f} s",
                     f"{shards['peak_mib'] / exact['peak_mib']:.2f}x memory"
                     + ("" if args.exact_load_only else "; beyond the loaded trace "
                        f"{(shards['peak_mib'] - shards['loaded_mib']) / max(exact['peak_mib'] - exact['loaded_mib'], 1):.2f}x"),
                     "(target <= 0.2x)"))  # fmt: skip
    print("\n| figure | value | peer (same run) | ratio | target |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
