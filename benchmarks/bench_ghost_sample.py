"""The controller's ghost at its SHARDS sample budget, against the exact ghost.

Above :data:`helm_plan.cache.ghost.EXACT_KEYS` EMB keys the ghost tracks a hashed sample of
them (:mod:`helm_plan.cache.ghost`). This measures, on one node serving a synthetic mixed
trace (``bench_ghost.py``'s: ``--requests`` at 360 req/s, 20,000 items, 64 candidates,
gr-small on a100-80g, the pool a tenth of the footprint, each request's computed tokens those
of a static split at r = 0.5; 10-s windows), the ghost at each budget of ``--keys`` (the
default budget first) against the exact ghost (``rate=1``, the peer) in the same run, window
by window: the ghost's seconds, their ratio, and the worst error of the EMB curve over the
grid as a share of the window's lookup bytes (worst window, and the mean of the windows'
worst).

Run: ``python benchmarks/bench_ghost_sample.py [--requests N] [--keys 16384,8192,...]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_ghost import ghost_node  # this script's folder is on sys.path

from helm_plan import arrays as A
from helm_plan.cache.ghost import EXACT_KEYS, Ghost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=40_000)
    ap.add_argument("--keys", default=f"{EXACT_KEYS},8192,12000,32768")
    a = ap.parse_args()
    ctx, n_comp = ghost_node(a.requests)  # bench_ghost's node
    wl = ctx.workload
    edges = A.window_edges(wl.arrays.ts_s, 10.0)
    print(f"{wl.arrays.n_requests:,} requests, {len(edges) - 1} windows, {wl.n_keys:,} EMB keys")
    print("| sample budget (keys) | rate | ghost s | exact ghost s (peer) | ratio | worst error "
          "| mean worst error |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for keys in (int(k) for k in a.keys.split(",")):
        rate = min(1.0, keys / wl.n_keys)
        exact = Ghost(wl, ctx.pool_bytes, ctx.model.kv_bytes_per_token, rate=1.0)
        sampled = Ghost(wl, ctx.pool_bytes, ctx.model.kv_bytes_per_token, rate=rate)
        t_exact = t_sampled = 0.0
        errs = []
        for w in range(len(edges) - 1):
            idx = np.arange(edges[w], edges[w + 1])
            t0 = time.perf_counter()
            e = exact.observe_requests(idx, n_comp[idx], per_request=True)
            t1 = time.perf_counter()
            s = sampled.observe_requests(idx, n_comp[idx], per_request=True)
            t2 = time.perf_counter()
            t_exact += t1 - t0
            t_sampled += t2 - t1
            errs.append(np.abs(s.emb_hit_bytes - e.emb_hit_bytes).max() / e.lookup_bytes)
        tag = " (default)" if keys == EXACT_KEYS else ""
        print(f"| {keys:,}{tag} | {rate:.3f} | {t_sampled:.2f} | {t_exact:.2f} | "
              f"{t_exact / t_sampled:.2f}x | {max(errs):.2%} | {np.mean(errs):.2%} |")  # fmt: skip


if __name__ == "__main__":
    main()
