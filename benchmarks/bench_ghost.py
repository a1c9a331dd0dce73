"""The controller's ghost: its EMB stack kept from window to window, against a fresh pass.

Every window a node under the ``controller`` policy measures its EMB curve over its own
lookups of the last window and this one (:mod:`helm_plan.cache.ghost`). The ghost keeps one
stack per key-size class alive (:class:`helm_plan.cache.stack.WindowedPass`: a key last looked
up before the remembered window is a first access again) and feeds it each window once. The
peer, in the same run on the same streams, is what the ghost did before: a fresh pass fed the
last window again and then this one (:func:`helm_plan.cache.stack.window_hits`). Each
window's hits at every capacity of the ghost's grid must be identical.

The trace is a synthetic mixed one (``--requests`` at 360 req/s, 20,000 items, 64
candidates), served by ``--nodes`` nodes (requests dealt at random) of gr-small on a100-80g
with the pool at a tenth of the footprint; each request's computed tokens are those of a
static split at r = 0.5 (:func:`helm_plan.cache.core.kv_pass`), so the history lookups are
what such a node makes.

Run: ``python benchmarks/bench_ghost.py [--requests N] [--nodes K] [--window-s S]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from helm_plan import arrays as A
from helm_plan.cache import core
from helm_plan.cache.ghost import share_grid
from helm_plan.cache.stack import WindowedPass, as_sizes, size_plan, stream_sizes, window_hits
from helm_plan.sim import NodeContext, load_context
from helm_plan.synth import SynthConfig, synthesize


def ghost_node(requests: int) -> tuple[NodeContext, np.ndarray]:
    """The ghost benchmarks' node: the module docstring's trace of ``requests`` requests and
    each request's computed tokens under a static split at r = 0.5."""
    qps = 360.0
    table = synthesize(SynthConfig(regime="mixed", qps=qps, duration_s=requests / qps,
                                   items=20_000, candidates=64, seed=1))  # fmt: skip
    ctx = load_context(table, gpu="a100-80g", model="gr-small", pool_fraction=0.1, seed=1)
    kv_tokens = core.capacities(0.5, ctx.pool_bytes, ctx.model)[1]
    return ctx, core.kv_pass(ctx.workload, kv_tokens).n_computed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=72_000)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--window-s", type=float, default=10.0)
    a = ap.parse_args()
    ctx, n_comp = ghost_node(a.requests)
    wl = ctx.workload
    edges = A.window_edges(wl.arrays.ts_s, a.window_s)
    node_of = np.random.default_rng(0).integers(0, a.nodes, wl.arrays.n_requests)
    kb = as_sizes(wl.keys.key_bytes, wl.n_keys)
    grid = np.unique(np.floor(share_grid() * ctx.pool_bytes).astype(np.int64))  # the ghost's
    plan = size_plan(kb, grid)
    passes = [[WindowedPass(kb, b, grid[idx], 1, census) for b, idx, census in plan]
              for _ in range(a.nodes)]  # fmt: skip
    one_size = len(np.unique(kb)) == 1
    past: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(a.nodes)]
    t_kept = t_fresh = 0.0
    lookups = 0
    for w in range(len(edges) - 1):
        for k in range(a.nodes):
            req = edges[w] + np.flatnonzero(node_of[edges[w] : edges[w + 1]] == k)
            ids, offs = core.lookup_stream(wl, n_comp[req], requests=req)
            ids = np.ascontiguousarray(ids, np.int32)
            lookups += int(offs[-1] - offs[0])
            rows = np.array([0, len(offs) - 1])
            t0 = time.perf_counter()
            kept = np.zeros(len(grid), np.int64)
            sizes = None if one_size else stream_sizes(ids, kb, kb)
            for (_, cols, _), sp in zip(plan, passes[k], strict=True):
                kept[cols] = sp.next_window(ids, sizes, offs, rows)[0]
            t1 = time.perf_counter()
            hits, _ = window_hits([*past[k], (ids, offs)], grid, key_bytes=kb, n_ids=len(kb))
            t_fresh += time.perf_counter() - t1
            t_kept += t1 - t0
            past[k] = [(ids, offs)]
            if not np.array_equal(kept, hits[-1]):
                raise SystemExit(f"window {w}, node {k}: the kept stack's hits differ")
    print(f"{wl.arrays.n_requests:,} requests, {a.nodes} nodes, {len(edges) - 1} windows, "
          f"{lookups:,} EMB lookups; hits identical in every window")  # fmt: skip
    print("| figure | ours | peer (same run) | ratio |\n|---|---|---|---|")
    print(f"| ghost EMB curves, stack kept from window to window | {t_kept:.2f} s "
          f"({t_kept / max(lookups, 1) * 1e9:.1f} ns a lookup) | fresh pass over the last window "
          f"and this one: {t_fresh:.2f} s | {t_fresh / max(t_kept, 1e-9):.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
