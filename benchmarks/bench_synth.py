"""Benchmark: `synth` wall time for ~1M requests against two peers in the same run.

- ours: :func:`helm_plan.synth.write` (plan + items + validated zstd parquet),
  with the default knobs (returning users carry their pre-existing history,
  mean ~1.5k items, so ~100 history items per request) and, for continuity
  with earlier figures, with ``returning_share=0`` (new users only, ~10 items
  per request);
- peer "naive loop": the same generative model written as a per-request Python
  loop (the straightforward implementation), timed on a 10k-request subset and
  extrapolated linearly;
- peer "numpy zipf floor": ``numpy.random.Generator.zipf`` drawing as many item
  ids as our trace holds, i.e. the bare cost of the item draws alone, no users,
  no arrivals, no file.

**Catalog scale.** ``--catalog-items`` (default 10^8): wall time and peak RSS
of planning and writing a ``--catalog-requests`` (default 100k) mixed-regime
trace (trend drift, churn, bursts with hot sets and new items) over that
catalog, next to the same trace over a 10^4-item catalog (the catalog must not
cost memory), against a peer that draws the same number of Zipf ids the
textbook way, ``Generator.choice(items, p=pmf)``, which holds O(items) floats.

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
def rss(key):
    return int([l for l in open('/proc/self/status') if l.startswith(key)][0].split()[1]) / 1024
base = rss('VmRSS')
t0 = time.perf_counter()
res = synth.write(cfg, sys.argv[2])
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "requests": res.requests, "users": res.users,
                  "tokens": res.history_tokens, "peak_rss_mib": rss('VmHWM'),
                  "import_rss_mib": base}))
"""

CHOICE_PEER = """
import json, sys, time
import numpy as np
n, draws = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
p = np.arange(1, n + 1, dtype=np.float64)
np.power(p, -1.0, out=p)
p /= p.sum()
ids = np.random.default_rng(0).choice(n, size=draws, p=p)
wall = time.perf_counter() - t0
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print(json.dumps({"wall_s": wall, "peak_rss_mib": int(hwm) / 1024}))
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


def catalog_run(items: int, requests: int, out: str) -> dict:
    """Plan and write a mixed trace over ``items`` items, next to 10^4 items and the peer."""
    qps = 1000.0
    cfg = {"regime": "mixed", "qps": qps, "duration_s": requests / qps, "seed": 0}
    cfg |= {"drift_ranks_per_s": 100.0, "burst_new_item_share": 0.1}
    huge = run_ours({**cfg, "items": items}, out)
    small = run_ours({**cfg, "items": 10_000}, out)
    peer = child(CHOICE_PEER, str(items), str(huge["tokens"]))
    return {
        "items": items,
        "requests": huge["requests"],
        "history_tokens": huge["tokens"],
        "ours_wall_s": round(huge["wall_s"], 2),
        "ours_peak_rss_mib": round(huge["peak_rss_mib"], 1),
        "ours_peak_over_import_mib": round(huge["peak_rss_mib"] - huge["import_rss_mib"], 1),
        "same_trace_1e4_items_peak_rss_mib": round(small["peak_rss_mib"], 1),
        "peer_choice_p_wall_s": round(peer["wall_s"], 2),
        "peer_choice_p_peak_rss_mib": round(peer["peak_rss_mib"], 1),
        "rss_ratio_peer_over_ours": round(peer["peak_rss_mib"] / huge["peak_rss_mib"], 2),
    }


def big_run(requests: int, out: str) -> dict:
    """Peak RSS of writing ``requests`` requests, against polars reading the file back.

    New users only (``returning_share=0``, ~10 items per request) so that 10M requests
    stay a few hundred MB on disk; the default knobs hold ~10x the items per request.
    """
    qps = 10_000.0
    cfg = {"qps": qps, "duration_s": requests / qps, "items": 10_000_000, "seed": 0}
    cfg |= {"returning_share": 0.0}
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


def naive_loop(
    n: int, *, qps: float, users: int, items: int, alpha: float, seed: int, returning: float
) -> float:
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
            if rnd.random() < returning:  # pre-existing history, mean 1536
                k = 1 + round(rnd.lognormvariate(math.log(1535.0) - 0.5, 1.0))
            else:
                k = 1 + round(rnd.lognormvariate(math.log(63.0) - 0.5, 1.0))
        else:
            if rnd.random() < 0.5:
                lag = rnd.lognormvariate(math.log(30.0), 1.5)
                j = max(0, _bisect(times, ts - lag))
                u = owner[j]
            else:
                u = rnd.randrange(len(first_of))
            k = int(math.log(1.0 - rnd.random()) / math.log(0.8))  # geometric, mean 4
        k = max(0, min(k, 8192 - hist_len.get(u, 0)))
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


def one_million(requests: int, out: str, returning: float | None) -> dict:
    """Our write of ``requests`` requests against the naive loop and the zipf floor."""
    import numpy as np

    qps = 1000.0
    cfg = {"qps": qps, "duration_s": requests / qps, "items": 1_000_000, "seed": 0}
    if returning is not None:
        cfg["returning_share"] = returning
    ours = run_ours(cfg, out)
    n = ours["requests"]
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    rng.zipf(1.0001, size=ours["tokens"])  # numpy's zipf needs alpha > 1
    floor_s = time.perf_counter() - t0
    sub = 10_000
    loop_s = naive_loop(
        sub,
        qps=qps,
        users=ours["users"] * sub // n,
        items=1_000_000,
        alpha=1.0,
        seed=0,
        returning=0.8 if returning is None else returning,
    )
    loop_s *= n / sub
    return {
        "returning_share": 0.8 if returning is None else returning,
        "requests": n,
        "history_tokens": ours["tokens"],
        "ours_wall_s": round(ours["wall_s"], 3),
        "ours_peak_rss_mib": round(ours["peak_rss_mib"], 1),
        "naive_loop_extrapolated_s": round(loop_s, 2),
        "numpy_zipf_floor_s": round(floor_s, 3),
        "speedup_vs_naive_loop": round(loop_s / ours["wall_s"], 1),
        "ours_over_zipf_floor": round(ours["wall_s"] / floor_s, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--big-requests", type=int, default=10_000_000)
    ap.add_argument("--catalog-items", type=int, default=100_000_000)
    ap.add_argument("--catalog-requests", type=int, default=100_000)
    ap.add_argument("--out", default="/tmp/helm_bench_synth.parquet")
    ap.add_argument("--big-out", default="/tmp/helm_bench_synth_big.parquet")
    args = ap.parse_args()
    report = {
        "default_knobs": one_million(args.requests, args.out, None),
        "new_users_only": one_million(args.requests, args.out, 0.0),
        "catalog": (
            catalog_run(args.catalog_items, args.catalog_requests, args.out)
            if args.catalog_items > 0
            else None
        ),
        "big": big_run(args.big_requests, args.big_out) if args.big_requests > 0 else None,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
