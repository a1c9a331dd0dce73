"""Executor backends: Ray overhead against local processes, and 1 -> 2 worker scaling.

Prints one table (figure, ours, peer measured in the same run, ratio):

1. oracle labelling of a ~100k-request trace on the Ray executor (local Ray
   instance, 2 CPUs) against the local process pool with the same 2 workers;
   the Ray start-up is timed separately and excluded (target: overhead <= 15 %);
2. the local executor's scaling from 1 to 2 workers (target >= 1.7x on 2 cores);
3. the Ray start-up (``ray.init`` of a local instance) and shutdown.

All three runs must give byte-identical labels (checked). Trace as in
``bench_sim.py``: ``helm_plan.synth`` steady, 400 QPS x 250 s (~100k requests,
gr-small on a100-80g), pool = 25 % of the footprint, 10 s windows -> 25
windows, ``--trials`` Optuna trials per window, ``warmup = "window"`` (the
parallel mode).

Run: ``python benchmarks/bench_exec.py [--trials 30] [--workers 2] [--repeats 2]
[--duration-s 250]``
(repeats are interleaved and the best of each is kept: the machine is shared).

Not here: issue 13's 10M-request ``helm-plan plan`` through Ray (3 GPUs x 3 policies x 3
routers). ``plan`` exists (``bench_plan.py``), but every fleet size of every combination
replays the whole scaled trace: ``bench_plan.py`` extrapolates 1M requests x 48
combinations to several hours on 2 cores, so 10M x 27 is more than a day on this machine.
"""

from __future__ import annotations

import argparse
import os
import time

from helm_plan import arrays as A
from helm_plan import exec as executors
from helm_plan.exec.ray import RayExecutor
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.oracle import OracleConfig, label_windows
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, evaluate_span, prepare_context
from helm_plan.synth import SynthConfig, synthesize


def _timed(ctx, ncfg, ocfg, ex):
    t0 = time.perf_counter()
    lab = label_windows(ctx, ncfg, ocfg, executor=ex)
    return time.perf_counter() - t0, lab.table.write_ipc(None).getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--duration-s",
        type=float,
        default=250.0,
        help="trace length at 400 QPS (the default gives ~100k requests; small for a smoke run)",
    )
    args = ap.parse_args()
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()}")
    t0 = time.perf_counter()
    table = synthesize(SynthConfig(regime="steady", qps=400.0, duration_s=args.duration_s, seed=1))
    a = A.from_table(table, seed=1)
    gpu, model = load_gpu("a100-80g"), load_model("gr-small")
    lat = build_latency_model(gpu, model, resolve_latency(gpu, model, None))
    ctx = prepare_context(a, gpu, model, lat, pool_fraction=0.25)
    ncfg = NodeConfig()
    ocfg = OracleConfig(trials=args.trials, seed=0, warmup="window")
    n_w = ctx.n_windows(ncfg.window_s)
    print(f"trace: {a.n_requests} requests, {n_w} windows, {args.trials} trials/window "
          f"(built in {time.perf_counter() - t0:.1f} s)")  # fmt: skip

    w = args.workers
    # compile/load the kernels outside the timings (a --duration-s trace may be under 1000)
    evaluate_span(ctx, 0.5, 0, 0, min(1000, a.n_requests), ncfg)
    ex = RayExecutor(num_cpus=w)
    t0 = time.perf_counter()
    assert ex.workers == w  # starts the local instance
    t_start = time.perf_counter() - t0
    # interleaved repeats, best of each: the machine is shared, so load drifts during a run
    times: dict[str, list[float]] = {"l1": [], "lw": [], "rw": []}
    labs = set()
    runs = {"l1": executors.local(1), "lw": executors.local(w), "rw": ex}
    for rep in range(args.repeats):
        for k, e in runs.items():
            t, lab = _timed(ctx, ncfg, ocfg, e)
            times[k].append(t)
            labs.add(lab)
            print(f"repeat {rep}: {k}: {t:6.1f} s, load average {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    ex.close()
    t_stop = time.perf_counter() - t0
    assert len(labs) == 1, "labels differ between executors"
    t_l1, t_lw, t_rw = (min(times[k]) for k in ("l1", "lw", "rw"))

    rows = [
        (f"oracle labels, ray {w} workers (excl. start-up)", f"{t_rw:.1f} s",
         f"local {w} workers: {t_lw:.1f} s", f"{t_rw / t_lw:.3f} ({100 * (t_rw / t_lw - 1):+.1f} %)"),
        (f"local scaling 1 -> {w} workers", f"{t_lw:.1f} s", f"1 worker: {t_l1:.1f} s",
         f"{t_l1 / t_lw:.2f}x"),
        ("ray start-up / shutdown (local instance)", f"{t_start:.1f} s / {t_stop:.1f} s",
         f"local {w} workers: {t_lw:.1f} s", f"{t_start / t_lw:.2f} of a run"),
    ]  # fmt: skip
    print(
        f"\nlabels byte-identical across local 1, local {w}, ray {w}: yes (best of {args.repeats})"
    )
    print("| figure | ours | peer (same run) | ratio |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
