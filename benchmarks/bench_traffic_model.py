"""The traffic model against real users (issue 35): does a scaled trace need the fleet that the
same load made of *other real users* needs?

The held-out check: two disjoint sets of real users from the Amazon Video Games log
(``../shared/datasets``), ``U`` of them and as many others as make ``K`` times their
requests, both re-timed to the Azure LLM arrival trace (bursty: peak 67 req/s against a mean of 2.6) at ``Q`` and ``K·Q`` req/s
(``helm-plan ingest amazon --arrivals``). Ours: ``plan`` on the small trace with
``--scale K`` under each traffic model (``users``: bursts kept; ``users-shifted``: the old
decorrelated clones; ``time``). The peer: the minimal fleet of the big trace itself, found by
simulating it directly at every size from one node up with best static behind jsq (the
plan's own pass rule, :func:`helm_plan.plan.evaluate.meets`), on the same pool bytes.
Printed: each model's N, the peer's N, and the difference (target: users within one node).

Run: ``python benchmarks/bench_traffic_model.py [--users 1000] [--k 2.88] [--qps 300]
[--model gr-large] [--slo-ms 10] [--pool-fraction 0.1] [--window-s 5]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from helm_plan.arrays import from_file
from helm_plan.cluster import ClusterConfig
from helm_plan.ingest import IngestConfig, ingest_to_file
from helm_plan.oracle import OracleConfig
from helm_plan.plan import PlanConfig, plan
from helm_plan.plan.evaluate import meets
from helm_plan.plan.scale import peak_qps
from helm_plan.sim import NodeConfig, load_context

DATA = Path(os.environ.get("HELM_PLAN_DATASETS", Path(__file__).resolve().parents[2] / "shared"
                           / "datasets"))  # fmt: skip


def _subsets(users: int, k: float, out: Path) -> tuple[Path, Path, int]:
    """Two disjoint user sets of the Amazon log, in its own format: the first ``users`` users,
    and the next users up to ``k`` times their interactions (so, re-timed at ``k`` times the
    rate, the big trace spans the same part of the arrival trace: the same shape, ``k`` times
    the load). Returns the big set's user count too."""
    lines: dict[str, list[str]] = {}
    for line in (DATA / "amazon-video-games.seq.txt").read_text().splitlines():
        lines.setdefault(line.split()[0], []).append(line)
    ids = list(lines)
    want = k * sum(len(lines[u]) for u in ids[:users])
    got, end = 0, users
    while got < want and end < len(ids):
        got += len(lines[ids[end]])
        end += 1
    if got < want:
        raise SystemExit(f"the log has too few users for {k} times the first {users}'s load")
    small, big = out / "small.txt", out / "big.txt"
    small.write_text("\n".join(x for u in ids[:users] for x in lines[u]) + "\n")
    big.write_text("\n".join(x for u in ids[users:end] for x in lines[u]) + "\n")
    return small, big, end - users


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--k", type=float, default=2.88)
    ap.add_argument("--qps", type=float, default=300.0)
    ap.add_argument("--model", default="gr-large")
    ap.add_argument("--slo-ms", type=float, default=10.0)
    ap.add_argument("--pool-fraction", type=float, default=0.1)
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--max-nodes", type=int, default=24)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        small_log, big_log, n_big = _subsets(a.users, a.k, d)
        arrivals = DATA / "azure-llm-2023-code.csv"
        ingest_to_file(small_log, d / "small.parquet",
                       IngestConfig("amazon", qps=a.qps, arrivals=arrivals, seed=1))  # fmt: skip
        ingest_to_file(big_log, d / "big.parquet",
                       IngestConfig("amazon", qps=a.qps * a.k, arrivals=arrivals, seed=1))  # fmt: skip
        small = load_context(d / "small.parquet", model=a.model,
                             pool_fraction=a.pool_fraction)  # fmt: skip
        big = load_context(d / "big.parquet", model=a.model, pool_bytes=small.pool_bytes)
        node = NodeConfig(window_s=a.window_s, slo_ms=a.slo_ms)
        oracle = OracleConfig(coarse_step=0.1)
        print(f"small: {small.arrays.n_requests:,} requests, peak "
              f"{peak_qps(small.arrays.ts_s, a.window_s):,.0f} req/s; big: "
              f"{big.arrays.n_requests:,} requests of {n_big} other users, peak "
              f"{peak_qps(big.arrays.ts_s, a.window_s):,.0f} req/s; pool "
              f"{small.pool_bytes / 2**20:,.1f} MiB; {a.model}, SLO {a.slo_ms} ms")  # fmt: skip
        t0 = time.perf_counter()
        peer, hint = None, 0.5
        for n in range(1, a.max_nodes + 1):  # the peer: every size from one node up
            ev = meets(big, ClusterConfig(nodes=n, router="jsq", node=node, seed=0),
                       "best-static", oracle, 0.99, hint=hint)  # fmt: skip
            print(f"  big trace, {n} nodes: P99 {ev.p99_ms:,.2f} ms, attainment "
                  f"{ev.slo_attainment:.2%}, {'passes' if ev.passes else 'fails'}")  # fmt: skip
            if ev.passes:
                peer = n
                break
        t_peer = time.perf_counter() - t0
        arrays = from_file(d / "small.parquet")
        print(
            f"\n| traffic model | planned peak req/s | N (ours) | N (peer: {n_big} "
            "real users) | ours - peer | time s |"
        )
        print("|---|---|---|---|---|---|")
        for by in ("users", "users-shifted", "time"):
            t0 = time.perf_counter()
            cfg = PlanConfig(gpus=("a100-80g",), model=a.model, slo_ms=a.slo_ms,
                             policies=("best-static",), routers=("jsq",), scale=a.k, scale_by=by,
                             pool_bytes=small.pool_bytes, max_nodes=a.max_nodes, node=node,
                             oracle=oracle, load_curve=False, frontier=False, headroom_steps=0)  # fmt: skip
            res = plan(arrays, cfg)
            n = res.capacity["nodes"][0]
            diff = "n/a" if n is None or peer is None else f"{n - peer:+d}"
            print(f"| {by} | {res.scaling.peak_qps_after:,.0f} | {n} | {peer} | {diff} | "
                  f"{time.perf_counter() - t0 + (t_peer if by == 'users' else 0):.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
