"""Benchmark: `inspect` on a 10M-request trace, peak memory and wall time, against polars.

- ours: :func:`helm_plan.inspect.inspect_trace` (DuckDB over the parquet file,
  ``memory_limit`` 1GB, spilling past it);
- peer: polars reading the whole file into memory and computing the same
  core figures (rows, users, distinct items, per-second bins, per-user
  cumulative history percentiles).

Each runs in its own child process; peak RSS is VmHWM from /proc/self/status.
The trace is generated once with ``helm-plan synth`` semantics under /tmp
(about 0.5 GB) and reused. Usage:
``python benchmarks/bench_inspect.py [--requests 10000000] [--trace PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HWM = "int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]) / 1024"

OURS = f"""
import json, sys, time
from helm_plan.inspect import inspect_trace
from helm_plan.profiles import load_model
t0 = time.perf_counter()
st = inspect_trace(sys.argv[1], load_model('gr-small'), memory_limit=sys.argv[2])
print(json.dumps({{"wall_s": time.perf_counter() - t0, "peak_rss_mib": {HWM},
                  "stats": st.to_json()}}))
"""

POLARS = f"""
import json, sys, time
import polars as pl
t0 = time.perf_counter()
df = pl.read_parquet(sys.argv[1])
k = df["new_items"].list.len()
df = df.with_columns(k=k)
bins = df.select((pl.col("ts_s").floor()).alias("s")).group_by("s").len()
hist = df.select(pl.col("k").cum_sum().over("user_id").alias("h"))["h"]
out = {{
    "requests": df.height,
    "users": df["user_id"].n_unique(),
    "items": df["new_items"].explode().n_unique(),
    "peak_qps": int(bins["len"].max()),
    "history_len_p95": float(hist.quantile(0.95, "linear")),
}}
print(json.dumps({{"wall_s": time.perf_counter() - t0, "peak_rss_mib": {HWM}, "stats": out}}))
"""


def child(code: str, *args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, text=True
    )
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--trace", default="/tmp/helm_bench_10m.parquet")
    ap.add_argument("--memory-limit", default="1GB")
    args = ap.parse_args()
    gen = None
    if not os.path.exists(args.trace):
        code = (
            "import sys, json, time\n"
            "from helm_plan import synth\n"
            "t0 = time.perf_counter()\n"
            f"r = synth.write(synth.SynthConfig(qps=10000.0, duration_s={args.requests}/10000,"
            " items=10_000_000, seed=0), sys.argv[1])\n"
            f"print(json.dumps({{'wall_s': time.perf_counter() - t0, 'peak_rss_mib': {HWM},"
            " 'requests': r.requests, 'tokens': r.history_tokens}))\n"
        )
        gen = child(code, args.trace)
    ours = child(OURS, args.trace, args.memory_limit)
    peer = child(POLARS, args.trace)
    s = ours["stats"]
    for key in ("requests", "users", "items", "peak_qps"):
        assert s[key] == peer["stats"][key], (key, s[key], peer["stats"][key])
    assert abs(s["history_len_p95"] - peer["stats"]["history_len_p95"]) < 1e-6
    print(
        json.dumps(
            {
                "trace_bytes": os.path.getsize(args.trace),
                "synth_10m": gen,
                "requests": s["requests"],
                "history_tokens": s["history_tokens"],
                "ours_wall_s": round(ours["wall_s"], 2),
                "ours_peak_rss_mib": round(ours["peak_rss_mib"], 1),
                "polars_wall_s": round(peer["wall_s"], 2),
                "polars_peak_rss_mib": round(peer["peak_rss_mib"], 1),
                "rss_ratio_polars_over_ours": round(peer["peak_rss_mib"] / ours["peak_rss_mib"], 2),
                "wall_ratio_ours_over_polars": round(ours["wall_s"] / peer["wall_s"], 2),
                "figures_agree": True,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
