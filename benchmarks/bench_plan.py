"""Capacity-plan figures (issue 11), each against a peer measured in the same run.

1. **plan wall time** on a synthetic mixed-regime trace (steady, trend, burst
   thirds) scaled to ``--peak-qps``, for ``--gpus`` × ``--policies`` ×
   ``--routers``: seconds, cluster simulations, and simulated requests per
   second. The target (issue 37) is a 1M-request trace, 3 GPUs × 4 policies × 4
   routers in ≤ 30 min on 2 cores; pass ``--requests 1000000`` to run it
   (hours on this kernel: see the printed extrapolation).
2. **search against a linear scan**: for every combination the plan's
   galloping bracket + bisection evaluated some fleet sizes; the peer is the
   naive planner's scan N = 1, 2, ... up to the first passing size (plus N + 1
   to check it), counted on the same answers. The ratio is simulations saved.
3. **value of adaptivity and routing at the SLO-binding load**: the plan's
   savings rows (nodes saved with their bootstrap CI). No target: what the
   model shows.

Run: ``python benchmarks/bench_plan.py [--requests N] [--peak-qps Q] [--gpus a,b]
[--policies ...] [--routers ...] [--slo-ms MS] [--pool-fraction F] [--workers K]``.
"""

from __future__ import annotations

import argparse
import time

import polars as pl

from helm_plan import exec as executors
from helm_plan.plan import PlanConfig, plan
from helm_plan.plan import evaluate as plan_evaluate
from helm_plan.synth import SynthConfig, synthesize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=30_000)
    ap.add_argument("--peak-qps", type=float, default=3000.0)
    ap.add_argument("--gpus", default="a100-80g")
    ap.add_argument("--policies", default="best-static,emb-max,kv-max")
    ap.add_argument("--routers", default="jsq,helm")
    ap.add_argument("--slo-ms", type=float, default=1.0)
    ap.add_argument("--pool-fraction", type=float, default=0.1)
    ap.add_argument("--load-max-requests", type=int, default=60_000)
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes (1: in this process, the serial figure)",
    )
    a = ap.parse_args()
    qps = 250.0
    syn = SynthConfig(regime="mixed", qps=qps, duration_s=a.requests / qps, candidates=64,
                      burst_factor=3.0, bursts=4, seed=0)  # fmt: skip
    table = synthesize(syn)
    sims = {"n": 0, "requests": 0}
    inner = plan_evaluate.run_point

    def counted(ctx, *args, **kw):
        sims["n"] += 1
        sims["requests"] += ctx.arrays.n_requests
        return inner(ctx, *args, **kw)

    plan_evaluate.run_point = counted  # count the cluster runs of the search and the curve
    cfg = PlanConfig(gpus=tuple(a.gpus.split(",")), policies=tuple(a.policies.split(",")),
                     routers=tuple(a.routers.split(",")), peak_qps=a.peak_qps, slo_ms=a.slo_ms,
                     pool_fraction=a.pool_fraction, load_max_requests=a.load_max_requests,
                     n_boot=200)  # fmt: skip
    t0 = time.perf_counter()
    res = plan(table, cfg, executor=executors.local(a.workers))
    wall = time.perf_counter() - t0
    plan_evaluate.run_point = inner
    combos = res.capacity.height
    print(f"trace: {table.num_rows:,} requests, scaled x{res.scaling.factor:.3g} to "
          f"{res.scaling.qps_after:,.0f} req/s mean ({res.scaling.method})")  # fmt: skip
    print("\n| figure | value | peer | ratio |\n|---|---|---|---|")
    rps = sims["requests"] / wall
    print(f"| plan wall, {combos} combinations | {wall:.1f} s | — | — |")
    if a.workers == 1:  # the count wraps this process's calls: workers' are not seen
        print(f"| cluster simulations (search + load curve) | {sims['n']} | — | — |")
        print(f"| simulated requests per second | {rps:,.0f} | — | — |")
    # the configuration at this rate: 1M requests x 48 combinations
    per_combo = wall / combos
    est = per_combo * 48 * (1_000_000 / max(res.scaling.qps_after * syn.duration_s, 1))
    print(f"| extrapolated: 1M requests, 3 GPUs x 4 policies x 4 routers, {a.workers} "
          f"worker(s) | {est / 60:.0f} min "
          f"| target 30 min | {est / 1800:.1f}x |")  # fmt: skip
    ev = res.evaluated
    searched = scanned = 0
    for row in res.capacity.iter_rows(named=True):
        mine = ev.filter((ev["gpu"] == row["gpu"]) & (ev["policy"] == row["policy"])
                         & (ev["router"] == row["router"]))  # fmt: skip
        searched += mine.height
        n = row["nodes"] if row["nodes"] is not None else cfg.max_nodes
        scanned += min(n + 1, cfg.max_nodes)
    print(f"| fleet sizes evaluated by the search | {searched} | linear scan {scanned} | "
          f"{scanned / max(searched, 1):.2f}x fewer |")  # fmt: skip
    pl.Config.set_tbl_rows(-1)  # every combination
    print("\n" + res.capacity.select("gpu", "policy", "router", "nodes", "p99_ms",
                                     "p99_ms_one_less", "usd_per_million_requests").__str__())  # fmt: skip
    print(res.savings)
    print(res.max_qps)
    print("\n".join(res.answer))


if __name__ == "__main__":
    main()
