"""Cache benchmarks: our EMB LRU vs libcachesim, and exact-curve throughput.

Run: ``python benchmarks/bench_cache.py [--n 5000000] [--universe 4000000] [--alpha 1.0]``

(a) The same Zipf stream (dense int ids) through our compiled EMB LRU
    (``helm_plan.cache.lru.emb_lru_misses``, timed on the in-memory int32
    array; one-time JIT compile / cache load reported separately) and through
    libcachesim's ``LRU.process_trace`` over a ``TraceReader`` of an
    oracleGeneral binary file written first (the file write is reported, not
    counted). Miss counts must be equal; target: ours >= 10x faster.
(b) Exact hit-rate curve at every capacity (Fenwick stack distances) in
    accesses/s; target >= 5M/s. SHARDS 1% is shown for reference.
Times are the best of ``--repeat`` runs. Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table


def zipf_stream(n: int, universe: int, alpha: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, universe + 1) ** alpha
    x = rng.choice(universe, size=n, p=p / p.sum())
    x = rng.permutation(universe)[x]
    _, dense = np.unique(x, return_inverse=True)  # remap once to dense ids 0..distinct-1
    return dense.astype(np.int32)


def best(fn, repeat: int) -> tuple[float, object]:
    out, ts = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return min(ts), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--universe", type=int, default=4_000_000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    import libcachesim as lcs

    from helm_plan.cache import lru, stack

    con = Console()
    t = time.perf_counter()
    ids = zipf_stream(args.n, args.universe, args.alpha, args.seed)
    n_ids = int(ids.max()) + 1
    con.print(
        f"stream: {len(ids):,} accesses, {n_ids:,} distinct ids, Zipf alpha {args.alpha} "
        f"(built in {time.perf_counter() - t:.1f}s)"
    )
    tiny = np.array([0, 1, 0, 2], np.int32)
    jit = {}
    for name, fn in (
        ("emb_lru_misses", lambda: lru.emb_lru_misses(tiny, 2)),
        ("lru_hit_counts", lambda: stack.lru_hit_counts(tiny)),
        ("shards", lambda: stack.shards_binned_hits(tiny, np.arange(3), sample_rate=0.5)),
    ):
        t = time.perf_counter()
        fn()
        jit[name] = time.perf_counter() - t

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "zipf.oracleGeneral"
        t = time.perf_counter()
        rec = np.zeros(len(ids), [("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nxt", "<i8")])
        rec["t"] = np.arange(len(ids))
        rec["id"] = ids
        rec["sz"] = 1
        rec["nxt"] = -1
        rec.tofile(path)
        write_s = time.perf_counter() - t
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        ok = True
        tab = Table(title="(a) EMB LRU: ours vs libcachesim 0.3.5 LRU.process_trace")
        for c in ("capacity rows", "miss ratio ours", "miss ratio peer", "equal", "ours s",
                  "peer s", "ours Macc/s", "peer Macc/s", "speedup"):  # fmt: skip
            tab.add_column(c, justify="right")
        for frac in (0.001, 0.01, 0.1):
            cap = max(1, int(frac * n_ids))
            ours_s, miss = best(lambda cap=cap: lru.emb_lru_misses(ids, cap, n_ids), args.repeat)
            peer_s, (mr, _) = best(
                lambda cap=cap: lcs.LRU(cache_size=cap).process_trace(reader), args.repeat
            )
            peer_miss = int(round(mr * len(ids)))
            eq = peer_miss == miss
            speed = peer_s / ours_s
            ok &= eq and speed >= 10
            tab.add_row(
                f"{cap:,}", f"{miss / len(ids):.6f}", f"{mr:.6f}", "yes" if eq else "NO",
                f"{ours_s:.4f}", f"{peer_s:.4f}", f"{len(ids) / ours_s / 1e6:.1f}",
                f"{len(ids) / peer_s / 1e6:.1f}", f"{speed:.1f}x",
            )  # fmt: skip
        con.print(tab)
        con.print(
            f"peer input: oracleGeneral binary file written in {write_s:.2f}s (not timed), read "
            "by lcs.TraceReader(path, TraceType.ORACLE_GENERAL_TRACE); timed: "
            "LRU(cache_size).process_trace(reader), object sizes 1"
        )

    tab = Table(title="(b) hit-rate curve throughput")
    for c in ("method", "seconds", "Macc/s", "target"):
        tab.add_column(c, justify="right")
    exact_s, hc = best(lambda: stack.lru_hit_counts(ids, n_ids), args.repeat)
    rate = len(ids) / exact_s
    ok &= rate >= 5e6
    tab.add_row("exact, every capacity", f"{exact_s:.3f}", f"{rate / 1e6:.1f}", ">= 5")
    grid = np.linspace(0, n_ids, 101).astype(np.int64)
    g_s, _ = best(lambda: stack.binned_hits(ids, grid, n_ids=n_ids), args.repeat)
    tab.add_row("exact, 101-point grid", f"{g_s:.3f}", f"{len(ids) / g_s / 1e6:.1f}", "")
    s_s, _ = best(
        lambda: stack.shards_binned_hits(ids, grid, sample_rate=0.01, n_ids=n_ids), args.repeat
    )
    tab.add_row("SHARDS 1% (estimate)", f"{s_s:.3f}", f"{len(ids) / s_s / 1e6:.1f}", "")
    con.print(tab)
    mae = stack.shards_mae(ids, grid, sample_rate=0.01, seed=0)
    con.print(f"SHARDS 1% MAE vs exact on this stream: {mae:.5f}")
    cap = max(1, int(0.01 * n_ids))
    assert len(ids) - int(hc[cap]) == lru.emb_lru_misses(ids, cap, n_ids)
    con.print(
        "first call (JIT compile or numba cache load): "
        + ", ".join(f"{k} {v:.2f}s" for k, v in jit.items())
    )
    con.print("checks: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
