"""Cluster simulator figures (issue 10), each against a peer measured in the same run.

1. **throughput**: 32 nodes x 1M requests, ``helm`` router, gr-small, static r = 0.3
   on every node, against one node simulating the same trace (``simulate_node``,
   same r): requests per CPU-second of this (single-threaded) process. Target:
   cluster >= 70% of the node.
2. **cost growth**: CPU µs per request of the same cluster at 100k, 1M (and 10M
   with ``--ten-million``) requests, beside the single node's; linear means a flat
   µs/request.
3. **peak memory** of a fresh process that loads the 1M trace and runs the 32-node
   cluster (``VmHWM``), beside one that runs the single node. Target <= 2 GiB.
4. **helm against the best baseline router** on a bursty mixed-regime trace
   (steady, trend, burst thirds; 4x bursts) at the load where the SLO binds: the
   SLO is set to the best baseline's P99 at this load, so the baseline sits at
   it. Reports both P99s, attainment at that SLO, and a paired bootstrap CI over
   windows of helm's P99 cut and attainment gain. No target: what the model shows.

Traces: ``helm_plan.synth`` (steady 2000 QPS for 1-3, mixed for 4), pool = a
share of the trace's EMB+KV footprint (0.25 for 1-3, 0.05 for 4), 10 s windows,
throttled refill, one stream per node, requests served one by one.

Also printed: the same 1M trace through the cluster kernel with one node (the
routing and bookkeeping machinery at equal cache work) and with 32 nodes behind
round-robin (32 caches without helm's probes).

Run: ``python benchmarks/bench_cluster.py [--repeat K] [--refill MODE] [--ten-million]
[--sizes 100000,10000000] [--node-max N] [--pool-fraction F] [--skip-memory]
[--skip-routing] [--base-size N] [--headline-size N] [--routing-duration-s S]
[--routing-qps Q]``.
Timing is CPU time of this process, best of ``--repeat`` interleaved runs: on a shared
machine other tenants' cache traffic moves both sides.
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

import numpy as np

from helm_plan import trace
from helm_plan.cluster import ClusterConfig, simulate_cluster
from helm_plan.cluster.compare import router_ci
from helm_plan.errors import ProfileError
from helm_plan.sim import NodeConfig, load_context, simulate_node
from helm_plan.synth import SynthConfig, synthesize

R = 0.3
NODES = 32
# A static r never resizes the caches, so no refill ever runs: lazy refill on both sides keeps
# either from gathering hotness counts it never reads (the default, throttled, counts every
# lookup; see --refill).
REFILL = "lazy"
BASELINES = ("round-robin", "random", "jsq", "p2c", "affinity", "kv-overlap")


def make_trace(path: Path, n: int, regime: str = "steady", qps: float = 2000.0) -> None:
    if not path.exists():
        tab = synthesize(SynthConfig(regime=regime, qps=qps, duration_s=n / qps, seed=1))
        trace.write(tab, path, {"source": "bench_cluster", "regime": regime})


def timed(fn):  # noqa: ANN001, ANN201
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def child(path: str, what: str, refill: str) -> None:
    """Run one simulation in this fresh process; print its peak RSS after loading and after."""

    def peak() -> float:
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report
        # its parent's peak
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    ctx = load_context(path, pool_fraction=0.25)
    loaded = peak()
    ncfg = NodeConfig(refill=refill)
    if what == "cluster":
        simulate_cluster(ctx, R, ClusterConfig(nodes=NODES, router="helm", node=ncfg))
    else:
        simulate_node(ctx, R, ncfg)
    print(json.dumps({"loaded_mib": loaded, "peak_mib": peak()}))


def load_capped(path, pool_fraction: float = 0.25):  # noqa: ANN001, ANN201
    """Pool = ``pool_fraction`` of the footprint, capped at what the GPU leaves for caches: the
    10M trace's quarter (687 GiB) exceeds an A100, so it runs with the largest pool the GPU has
    (``--pool-fraction 0.025`` fits every size, for a like-for-like cost growth). ``path`` may
    be a workload already loaded (a SHARDS load's columns)."""
    from helm_plan.arrays import from_file
    from helm_plan.latency.model import build_latency_model, resolve_latency
    from helm_plan.profiles import DEFAULT_GPU, DEFAULT_MODEL, load_gpu, load_model
    from helm_plan.sim.context import prepare_context

    g, m = load_gpu(DEFAULT_GPU), load_model(DEFAULT_MODEL)
    lp = resolve_latency(g, m, None)
    lat = build_latency_model(g, m, lp)
    arrays = from_file(path) if isinstance(path, Path) else path
    try:
        return prepare_context(arrays, g, m, lat, pool_fraction=pool_fraction, latency_profile=lp)
    except ProfileError:
        ctx = prepare_context(arrays, g, m, lat, latency_profile=lp)
        print(
            f"  pool capped at the GPU's {ctx.pool_bytes / 2**30:.2f} GiB "
            f"({ctx.pool_bytes / ctx.footprint_bytes:.3f} of the footprint)",
            flush=True,
        )
        return ctx


def peak_mib(path: Path, what: str, refill: str) -> tuple[float, float]:
    """(peak RSS after loading the trace, peak RSS of the whole run) of a fresh process."""
    out = subprocess.run([sys.executable, __file__, "--child", str(path), what, refill],
                         capture_output=True, text=True, check=True)  # fmt: skip
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return d["loaded_mib"], d["peak_mib"]


def short(n: int) -> str:
    """100k, 1M, 10M: the sizes as the figures' labels name them."""
    for unit, suffix in ((10**6, "M"), (10**3, "k")):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return f"{n:,}"


def row(rows: list, figure: str, value: str, peer: str, ratio: str, target: str = "") -> None:
    rows.append((figure, value, peer, ratio, target))
    print(f"  {figure}: {value} | peer {peer} | {ratio} {target}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ten-million", action="store_true", help="also run 10M requests (slow)")
    ap.add_argument("--sizes", default="", help="comma list of trace sizes (overrides the default)")
    ap.add_argument(
        "--node-max",
        type=int,
        default=10**9,
        help="run the single-node peer only up to this size (a 10M node run is ~1 h)",
    )
    ap.add_argument("--skip-memory", action="store_true", help="skip figure 3")
    ap.add_argument("--skip-routing", action="store_true", help="skip figure 4")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where traces are cached")
    ap.add_argument("--refill", default=REFILL, help="refill mode of both sides (figures 1-3)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per size; the fastest counts")
    ap.add_argument(
        "--pool-fraction",
        type=float,
        default=0.25,
        help="pool as a share of each trace's footprint, figures 1-2 (capped at the GPU)",
    )
    ap.add_argument(
        "--base-size",
        type=int,
        default=100_000,
        help="smallest trace size: the warm-up and the reference of the cost growth (figure 2)",
    )
    ap.add_argument(
        "--headline-size",
        type=int,
        default=1_000_000,
        help="trace size of figures 1 and 3 (with --sizes, figure 1 runs only if it is among them)",
    )
    ap.add_argument(
        "--routing-duration-s",
        type=float,
        default=40.0,
        help="length of figure 4's mixed trace (small for a smoke run)",
    )
    ap.add_argument(
        "--routing-qps",
        type=float,
        default=6000.0,
        help="base arrival rate of figure 4's mixed trace (small for a smoke run)",
    )
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()}")
    d = Path(args.dir)
    base_n, head_n = args.base_size, args.headline_size
    sizes = [base_n, head_n] + ([10_000_000] if args.ten_million else [])
    if args.sizes:
        sizes = sorted({base_n, *(int(float(x)) for x in args.sizes.split(","))})
    paths = {n: d / f"bench_cluster_steady_{n}.parquet" for n in sizes}
    for n, p in paths.items():
        make_trace(p, n)
    rows: list = []
    ncfg = NodeConfig(refill=args.refill)
    cfg = ClusterConfig(nodes=NODES, router="helm", node=ncfg)
    print(f"refill {args.refill}, static r = {R}, pool {args.pool_fraction:g} of the footprint, "
          f"best of {args.repeat} run(s) per size")  # fmt: skip
    # compile every kernel once on a small span
    warm = load_context(paths[base_n], pool_fraction=0.25)
    simulate_cluster(warm, R, ClusterConfig(nodes=2, router="helm", node=NodeConfig(window_s=1e6)))
    simulate_node(warm, R, NodeConfig(window_s=1e6))
    per_req: dict[int, tuple[float, float]] = {}
    for n, p in paths.items():
        ctx = load_capped(p, args.pool_fraction)
        c_node = c_clu = np.inf
        with_node = n <= args.node_max
        for _ in range(args.repeat):  # interleaved, so both see the same machine load
            if with_node:
                node, c, w_node = timed(lambda ctx=ctx: simulate_node(ctx, R, ncfg))
                c_node = min(c_node, c)
            clu, c, w_clu = timed(lambda ctx=ctx: simulate_cluster(ctx, R, cfg))
            c_clu = min(c_clu, c)
        m = ctx.arrays.n_requests
        per_req[n] = (c_clu / m * 1e6, c_node / m * 1e6)
        print(f"{m} requests: cluster {c_clu:.1f} CPU-s ({w_clu:.1f} s wall), EMB misses "
              f"{clu.miss_bytes.sum() / clu.lookup_bytes.sum():.3f} of bytes, KV reuse "
              f"{clu.kv_reuse_rate:.3f}", flush=True)  # fmt: skip
        if with_node:
            print(f"  node {c_node:.1f} CPU-s ({w_node:.1f} s wall), EMB misses "
                  f"{node.miss_bytes.sum() / node.lookup_bytes.sum():.3f}, KV reuse "
                  f"{node.kv_reuse_rate:.3f}", flush=True)  # fmt: skip
        if n == head_n and with_node:
            row(rows, f"throughput, 32 nodes x {short(n)}, helm", f"{m / c_clu:,.0f} req/CPU-s",
                f"1 node {m / c_node:,.0f} req/CPU-s", f"{c_node / c_clu:.0%}", "(target >= 70%)")  # fmt: skip
            # where the time goes: the machinery at equal cache work (one node), and 32 caches
            # without helm's probes (round-robin)
            one = ClusterConfig(nodes=1, router="helm", node=ncfg)
            _, c_one, _ = timed(lambda ctx=ctx, one=one: simulate_cluster(ctx, R, one))
            rr = ClusterConfig(nodes=NODES, router="round-robin", node=ncfg)
            _, c_rr, _ = timed(lambda ctx=ctx, rr=rr: simulate_cluster(ctx, R, rr))
            row(rows, f"throughput, 1 node x {short(n)} through the cluster kernel, helm",
                f"{m / c_one:,.0f} req/CPU-s", f"simulate {m / c_node:,.0f} req/CPU-s",
                f"{c_node / c_one:.0%}")  # fmt: skip
            row(rows, f"throughput, 32 nodes x {short(n)}, round-robin",
                f"{m / c_rr:,.0f} req/CPU-s", f"1 node {m / c_node:,.0f} req/CPU-s", f"{c_node / c_rr:.0%}")  # fmt: skip
    base = per_req[base_n][0]
    for n, (uc, un) in per_req.items():
        peer = f"1 node {un:.1f} µs/req" if np.isfinite(un) else "1 node not run"
        ratio = f"{uc / un:.2f}x node" if np.isfinite(un) else ""
        row(rows, f"cost, {n:,} requests",
            f"{uc:.1f} µs/req ({uc / base:.2f}x of {short(base_n)})", peer, ratio)  # fmt: skip
    if not args.skip_memory:
        p1m = d / f"bench_cluster_steady_{head_n}.parquet"
        make_trace(p1m, head_n)
        (load_c, mem_c) = peak_mib(p1m, "cluster", args.refill)
        (_, mem_n) = peak_mib(p1m, "node", args.refill)
        row(rows, f"peak memory, 32 x {short(head_n)}, helm",
            f"{mem_c:,.0f} MiB ({load_c:,.0f} MiB after load)", f"1 node {mem_n:,.0f} MiB", f"{mem_c / 1024:.2f} GiB", "(target <= 2 GiB)")  # fmt: skip
    if not args.skip_routing:
        routing(d, rows, args.routing_duration_s, args.routing_qps)
    print("\n| figure | value | peer (same run) | ratio | target |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def routing(d: Path, rows: list, dur: float = 40.0, qps: float = 6000.0) -> None:
    """Figure 4: helm against the best baseline on a bursty mixed trace where the SLO binds."""
    nodes = 4
    # the default name is the file earlier runs cached; another size gets its own file
    default = (dur, qps) == (40.0, 6000.0)
    name = "mixed" if default else f"mixed_{dur:g}s_{qps:g}qps"
    p = d / f"bench_cluster_{name}.parquet"
    if not p.exists():
        tab = synthesize(SynthConfig(regime="mixed", qps=qps, duration_s=dur, seed=3))
        trace.write(tab, p, {"source": "bench_cluster", "regime": "mixed"})
    ctx = load_context(p, pool_fraction=0.05)
    ncfg = NodeConfig(window_s=2.0)
    res = {}
    for r in (*BASELINES, "helm"):
        res[r] = simulate_cluster(ctx, R, ClusterConfig(nodes=nodes, router=r, node=ncfg))
        x = res[r]
        print(f"  {r:12s} P99 {x.p99_ms:.3f} ms, EMB hit {x.emb_hit_rate:.3f}, KV reuse "
              f"{x.kv_reuse_rate:.3f}, imbalance {x.imbalance_max_mean:.2f}", flush=True)  # fmt: skip
    best = min(BASELINES, key=lambda r: res[r].p99_ms)
    slo = float(np.ceil(res[best].p99_ms * 100) / 100)  # the SLO binds for the best baseline
    h, b = res["helm"], res[best]
    m = h.window_idx >= h.measured_from_window
    ci = router_ci(h.sojourn_s[m], b.sojourn_s[m], h.window_idx[m], slo, n_boot=1000)
    att = [float(np.mean(x.sojourn_s[m] <= slo / 1e3)) for x in (h, b)]
    row(rows, f"helm vs best baseline ({best}), mixed {ctx.arrays.n_requests:,} req, {nodes} "
        f"nodes, SLO {slo:g} ms", f"helm P99 {h.p99_ms:.3f} ms, attainment {att[0]:.4f}",
        f"{best} P99 {b.p99_ms:.3f} ms, attainment {att[1]:.4f}",
        f"P99 cut {ci.p99_cut:+.1%} [{ci.p99_lo:+.1%}, {ci.p99_hi:+.1%}]; attainment "
        f"{ci.attainment_gain:+.4f} [{ci.att_lo:+.4f}, {ci.att_hi:+.4f}] (95% CI)",
        "(no target)")  # fmt: skip


if __name__ == "__main__":
    main()
