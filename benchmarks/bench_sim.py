"""Node-simulator and oracle throughput.

Prints:
1. simulated requests per second for one evaluation (cold caches at one r,
   replay + service times + FIFO queue + P99) over the first 20k requests:
   ours (numba) vs a straightforward per-request Python loop (OrderedDict
   LRUs) written from DESIGN.md, with the speed-up; both give the same
   misses and P99 (checked);
2. a whole-trace simulate_node run with a changing ratio (core path);
3. the wall time to label a 100k-request trace at 30 Optuna trials per
   window, 2 workers; the target is <= 120 s on 2 cores.

Trace: ``helm_plan.synth`` steady, 400 QPS x 250 s (~100k requests, 512
candidates each, gr-small, a100-80g), pool = 25% of the footprint, 10 s
windows (the default) -> 25 windows.

Run: ``python benchmarks/bench_sim.py [--requests-peer 20000] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import OrderedDict

import numpy as np

from helm_plan import arrays as A
from helm_plan import exec as executors
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.oracle import OracleConfig, label_windows
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, evaluate_span, prepare_context, simulate_node
from helm_plan.synth import SynthConfig, synthesize


def peer_eval(a, model, lat, emb_rows, kv_tokens, n):
    """Per-request Python loop: KV prefix LRU, EMB LRU, service formula, FIFO; returns (misses, P99 ms)."""
    kv: OrderedDict[int, tuple[int, int]] = OrderedDict()
    kv_used = 0
    emb: OrderedDict[int, None] = OrderedDict()
    free_at = 0.0
    soj = []
    misses = 0
    for i in range(n):
        u = int(a.user[i])
        full = int(a.hist_end[i])
        L = min(full, model.max_seq_len)
        s0 = full - L
        c = 0
        if u in kv:
            st, ln = kv.pop(u)
            kv_used -= ln
            if st == s0:
                c = ln
        nc = L - c
        if 0 < L <= kv_tokens:
            while kv_used + L > kv_tokens:
                _, (_, ln) = kv.popitem(last=False)
                kv_used -= ln
            kv[u] = (s0, L)
            kv_used += L
        base = int(a.user_hist_offsets[u]) + full
        looks = list(a.hist_values[base - nc : base]) + list(
            a.cand_values[a.cand_offsets[i] : a.cand_offsets[i + 1]]
        )
        miss = 0
        for it in looks:
            if it in emb:
                emb.move_to_end(it)
            else:
                miss += 1
                if emb_rows > 0:
                    if len(emb) >= emb_rows:
                        emb.popitem(last=False)
                    emb[it] = None
        misses += miss
        m = len(looks) - nc
        s = (
            lat.t0_s
            + len(looks) * lat.row_bytes / lat.hbm_bw_Bps
            + (lat.h2d_latency_s if miss else 0.0)
            + miss * (lat.host_gather_s + lat.row_bytes / lat.h2d_bw_Bps)
            + lat.prefill_a_s * nc
            + lat.prefill_b_s * nc * L
            + lat.score_c_s * m
            + lat.score_d_s * m * L
        )
        t = float(a.ts_s[i])
        free_at = max(free_at, t) + s
        soj.append(free_at - t)
    return misses, float(np.percentile(soj, 99) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests-peer", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trials", type=int, default=30)
    args = ap.parse_args()
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()}")
    t0 = time.perf_counter()
    table = synthesize(SynthConfig(regime="steady", qps=400.0, duration_s=250.0, seed=1))
    a = A.from_table(table, seed=1)
    print(f"trace: {a.n_requests} requests, {a.n_users} users, {a.n_items} items "
          f"(built in {time.perf_counter() - t0:.1f} s)")  # fmt: skip
    gpu, model = load_gpu("a100-80g"), load_model("gr-small")
    lat = build_latency_model(gpu, model, resolve_latency(gpu, model, None))
    ctx = prepare_context(a, gpu, model, lat, pool_fraction=0.25)
    cfg = NodeConfig()
    r = 0.3
    from helm_plan.cache import core

    emb_rows, kv_tok = core.capacities(r, ctx.pool_bytes, model)
    n = min(args.requests_peer, a.n_requests)
    evaluate_span(ctx, r, 0, 0, 1000, cfg)  # load compiled kernels
    t0 = time.perf_counter()
    ours = evaluate_span(ctx, r, 0, 0, n, cfg)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    peer_miss, peer_p99 = peer_eval(a, model, lat, emb_rows, kv_tok, n)
    t_peer = time.perf_counter() - t0
    ours_miss = round((1 - ours.emb_hit_rate) * _lookups(a, ctx, n, r))
    assert ours_miss == peer_miss, (ours_miss, peer_miss)
    assert abs(ours.p99_ms - peer_p99) < 1e-6 * peer_p99
    lk = _lookups(a, ctx, n, r)
    print(f"one evaluation, first {n} requests ({lk / n:.0f} EMB lookups/request), r={r}:")
    print(f"  ours (numba):        {n / t_ours:12,.0f} requests/s  ({t_ours:.3f} s)")
    print(f"  peer (Python loop):  {n / t_peer:12,.0f} requests/s  ({t_peer:.3f} s)")
    print(
        f"  speed-up: {t_peer / t_ours:.0f}x; same misses ({peer_miss}) and P99 ({peer_p99:.4f} ms)"
    )

    n_w = ctx.n_windows(cfg.window_s)
    ratios = np.where(np.arange(n_w) % 4 < 2, 0.2, 0.6)
    simulate_node(ctx, ratios[:1], NodeConfig(window_s=1e6))
    t0 = time.perf_counter()
    simulate_node(ctx, ratios, cfg)
    t = time.perf_counter() - t0
    print(f"whole trace, ratio changing every 2 windows, throttled refill: "
          f"{a.n_requests / t:,.0f} requests/s ({t:.2f} s)")  # fmt: skip

    ocfg = OracleConfig(trials=args.trials, seed=0)
    t0 = time.perf_counter()
    lab = label_windows(ctx, cfg, ocfg, executor=executors.local(args.workers))
    t = time.perf_counter() - t0
    ev = int(lab.table["n_evals"].sum())
    print(f"oracle: {a.n_requests} requests, {n_w} windows of {cfg.window_s:g} s, "
          f"{args.trials} trials/window, {args.workers} workers: {t:.1f} s wall "
          f"({ev} span evaluations, target <= 120 s)")  # fmt: skip
    r_star = lab.r_star
    print(f"  r* mean {np.nanmean(r_star):.3f}, range [{np.nanmin(r_star):.2f}, "
          f"{np.nanmax(r_star):.2f}], median flatness {np.nanmedian(lab.table['flatness']):.2f}")  # fmt: skip


def _lookups(a, ctx, n, r):
    """EMB lookups of the first n requests at ratio r (they depend on the KV capacity)."""
    from helm_plan.cache import core

    e, k = core.capacities(r, ctx.pool_bytes, ctx.model)
    state = core.CacheState.empty(a.n_items, a.n_users, e, k)
    return int(core.replay(a, state, 0, n, max_seq_len=ctx.model.max_seq_len).n_lookup.sum())


if __name__ == "__main__":
    main()
