"""Benchmark: `synth` wall time for ~1M requests against two peers in the same run.

- ours: :func:`helm_plan.synth.write` (plan + items + validated zstd parquet);
- peer "naive loop": the same generative model written as a per-request Python
  loop (the straightforward implementation), timed on a 10k-request subset and
  extrapolated linearly;
- peer "numpy zipf floor": ``numpy.random.Generator.zipf`` drawing as many item
  ids as our trace holds, i.e. the bare cost of the item draws alone, no users,
  no arrivals, no file.

Peak RSS of the generator is measured in a child process (VmHWM from
/proc/self/status). The generator streams in time order, so its peak memory
should not grow with the request count: a second run writes ``--big-requests``
(default 10M) requests and reports its peak RSS next to a peer, polars reading
the produced file back (``pl.read_parquet``, i.e. holding the trace once), with
the ratio. Usage:
``python benchmarks/bench_synth.py [--requests 1000000] [--big-requests 10000000]``
(``--big-requests 0`` skips the big run). Writes only under /tmp.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time

CHILD = """
import json, sys, time
from helm_plan import synth
cfg = synth.SynthConfig(**json.loads(sys.argv[1]))
t0 = time.perf_counter()
res = synth.write(cfg, sys.argv[2])
wall = time.perf_counter() - t0
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print(json.dumps({"wall_s": wall, "requests": res.requests, "users": res.users,
                  "tokens": res.history_tokens, "peak_rss_mib": int(hwm) / 1024}))
"""


POLARS_READ = """
import json, sys, time
import polars as pl
t0 = time.perf_counter()
df = pl.read_parquet(sys.argv[1])
rows = df.height
wall = time.perf_counter() - t0
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print(json.dumps({"wall_s": wall, "rows": rows, "peak_rss_mib": int(hwm) / 1024}))
"""


def child(code: str, *args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, text=True
    )
    return json.loads(r.stdout)


def run_ours(cfg: dict, out: str) -> dict:
    return child(CHILD, json.dumps(cfg), out)


def big_run(requests: int, out: str) -> dict:
    """Peak RSS of writing ``requests`` requests, against polars reading the file back."""
    qps = 10_000.0
    cfg = {"qps": qps, "duration_s": requests / qps, "items": 10_000_000, "seed": 0}
    ours = run_ours(cfg, out)
    peer = child(POLARS_READ, out)
    assert peer["rows"] == ours["requests"], (peer["rows"], ours["requests"])
    return {
        "requests": ours["requests"],
        "ours_wall_s": round(ours["wall_s"], 2),
        "ours_peak_rss_mib": round(ours["peak_rss_mib"], 1),
        "polars_read_wall_s": round(peer["wall_s"], 2),
        "polars_read_peak_rss_mib": round(peer["peak_rss_mib"], 1),
        "rss_ratio_polars_read_over_ours": round(peer["peak_rss_mib"] / ours["peak_rss_mib"], 2),
    }


def naive_loop(n: int, *, qps: float, users: int, items: int, alpha: float, seed: int) -> float:
    """The same model, one request at a time in Python; returns wall seconds."""
    rnd = random.Random(seed)
    t0 = time.perf_counter()
    lo, hi, e = 0.5, items + 0.5, 1.0 - alpha
    a, b = (lo**e, hi**e) if abs(e) >= 1e-9 else (0.0, 0.0)
    p_cold = users / n
    ts = 0.0
    times: list[float] = []
    owner: list[int] = []
    first_of: list[int] = []
    hist_len: dict[int, int] = {}
    rows = []
    for _ in range(n):
        ts += rnd.expovariate(qps)
        if not owner or rnd.random() < p_cold:
            u = len(first_of)
            first_of.append(len(owner))
            k = max(1, math.ceil(rnd.lognormvariate(math.log(64.0) - 0.5, 1.0)))
        else:
            if rnd.random() < 0.5:
                lag = rnd.lognormvariate(math.log(30.0), 1.5)
                j = max(0, _bisect(times, ts - lag))
                u = owner[j]
            else:
                u = rnd.randrange(len(first_of))
            k = int(math.log(1.0 - rnd.random()) / math.log(0.8))  # geometric, mean 4
        k = max(0, min(k, 2048 - hist_len.get(u, 0)))
        hist_len[u] = hist_len.get(u, 0) + k
        new = []
        for _ in range(k):
            if abs(e) < 1e-9:
                x = lo * math.exp(rnd.random() * math.log(hi / lo))
            else:
                x = (a + rnd.random() * (b - a)) ** (1.0 / e)
            new.append(min(max(int(x + 0.5), 1), items) - 1)
        times.append(ts)
        owner.append(u)
        rows.append((ts, u, new, 512))
    return time.perf_counter() - t0


def _bisect(a: list[float], x: float) -> int:
    import bisect

    return bisect.bisect_right(a, x) - 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--big-requests", type=int, default=10_000_000)
    ap.add_argument("--out", default="/tmp/helm_bench_synth.parquet")
    ap.add_argument("--big-out", default="/tmp/helm_bench_synth_big.parquet")
    args = ap.parse_args()
    qps = 1000.0
    cfg = {"qps": qps, "duration_s": args.requests / qps, "items": 1_000_000, "seed": 0}
    ours = run_ours(cfg, args.out)
    n = ours["requests"]

    import numpy as np

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    rng.zipf(1.0001, size=ours["tokens"])  # numpy's zipf needs alpha > 1
    floor_s = time.perf_counter() - t0

    sub = 10_000
    loop_s = (
        naive_loop(sub, qps=qps, users=ours["users"] * sub // n, items=1_000_000, alpha=1.0, seed=0)
        * n
        / sub
    )
    big = big_run(args.big_requests, args.big_out) if args.big_requests > 0 else None
    print(
        json.dumps(
            {
                "requests": n,
                "history_tokens": ours["tokens"],
                "ours_wall_s": round(ours["wall_s"], 3),
                "ours_peak_rss_mib": round(ours["peak_rss_mib"], 1),
                "naive_loop_extrapolated_s": round(loop_s, 2),
                "numpy_zipf_floor_s": round(floor_s, 3),
                "speedup_vs_naive_loop": round(loop_s / ours["wall_s"], 1),
                "ours_over_zipf_floor": round(ours["wall_s"] / floor_s, 2),
                "big": big,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
