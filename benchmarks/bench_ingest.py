"""Ingest speed on amazon-video-games (287k interactions) against peers measured in the same run.

    python benchmarks/bench_ingest.py [--repeat 5]

Rows, best of ``--repeat`` wall times:
- ours/read: helm_plan's amazon reader only (file -> interactions arrays);
- ours/full: the whole `ingest` (read, interleave, re-time, arrow table);
- ours/full+write: `ingest_to_file` (plus validation and an atomic zstd parquet write);
- csv module: a plain-Python baseline producing the same per-user item lists;
- duckdb read_csv: DuckDB's CSV reader into an arrow table (parsing only; the
  peer for ours/read).
Ratios are peer time / ours/read (>1: ours is faster).
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import duckdb

from helm_plan.datasets import default_dir
from helm_plan.ingest import IngestConfig, amazon, ingest, ingest_to_file

DATA = default_dir(Path(__file__).resolve().parents[1]) / "amazon-video-games.seq.txt"


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def csv_module(path: Path) -> dict[int, list[int]]:
    per_user: dict[int, list[int]] = defaultdict(list)
    with open(path, newline="") as fh:
        for u, i in csv.reader(fh, delimiter=" "):
            per_user[int(u)].append(int(i))
    return per_user


def duckdb_read(path: Path) -> object:
    con = duckdb.connect()
    try:
        q = "select * from read_csv('{}', delim=' ', header=false, columns={{'u': 'BIGINT', 'i': 'BIGINT'}})"
        return con.sql(q.format(str(path).replace("'", "''"))).to_arrow_table()
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--path", type=Path, default=DATA)
    args = ap.parse_args()
    cfg = IngestConfig("amazon")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.parquet"
        rows = [
            ("ours/read", best_of(lambda: amazon.load(args.path), args.repeat)),
            ("ours/full", best_of(lambda: ingest(args.path, cfg), args.repeat)),
            ("ours/full+write", best_of(lambda: ingest_to_file(args.path, out, cfg), args.repeat)),
            ("csv module", best_of(lambda: csv_module(args.path), args.repeat)),
            ("duckdb read_csv", best_of(lambda: duckdb_read(args.path), args.repeat)),
        ]
    with open(args.path) as fh:
        n = sum(1 for _ in fh)
    ref = rows[0][1]
    print(f"ingest amazon: {args.path.name}, {n:,} interactions, best of {args.repeat}")
    print(f"{'what':<18}{'seconds':>10}{'rows/s':>14}{'vs ours/read':>14}")
    for name, s in rows:
        print(f"{name:<18}{s:>10.4f}{n / s:>14,.0f}{s / ref:>13.2f}x")


if __name__ == "__main__":
    main()
