"""Node-simulator and oracle throughput.

Prints:
1. simulated requests per second for one evaluation (cold caches at one r,
   replay + service times + FIFO queue) over the first ``--requests-peer``
   requests, their drawn candidates listed: ours (numba) against a per-request
   Python loop (OrderedDict LRUs over raw ids with running totals, on
   ``tests/brute.py``'s row hashing and service formula), with the speed-up;
   both give the same per-request misses and sojourns (checked). Ours drawing
   the candidates in the kernel is timed on the same requests;
2. a whole-trace simulate_node run with a changing ratio (core path);
3. the wall time to label a 100k-request trace at 30 Optuna trials per
   window, 2 workers; the target is <= 120 s on 2 cores.

Trace: ``helm_plan.synth`` steady, 400 QPS x 250 s (~100k requests, 512
candidates each, gr-small, a100-80g), pool = 25% of the footprint, 10 s
windows (the default) -> 25 windows.

Run: ``python benchmarks/bench_sim.py [--requests-peer 20000] [--workers 2] [--trials 30]
[--duration-s 250]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa

from helm_plan import arrays as A
from helm_plan import exec as executors
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.oracle import OracleConfig, label_windows
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, evaluate_span, prepare_context, simulate_node
from helm_plan.synth import SynthConfig, synthesize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from brute import batch_time, draw_candidate, table_row  # noqa: E402  (the brute node's rules)


def peer_eval(listed, model, pool_bytes: int, coeffs: dict, r: float) -> tuple[list, list]:
    """A per-request Python loop of one node at constant ``r`` (lazy refill, one stream).

    ``tests/brute.py``'s rules (its row hashing and service formula are reused) with
    what a reasonable Python version keeps: running byte and token totals and memoised
    rows, so the ratio measures compilation, not a deliberately slow reference.
    Returns (misses per request, sojourns in s).
    """
    kv_bpt = 2 * model.layers * model.d_model * model.kv_dtype_bytes
    emb_cap, kv_cap = (
        int(math.floor(r * pool_bytes)),
        int(math.floor((1 - r) * pool_bytes / kv_bpt)),
    )
    S, C = model.max_seq_len, model.kv_slide_chunk
    hist_tabs = [(t, tab) for t, tab in enumerate(model.tables) if tab.per_history_token]
    cand_tabs = [(t, tab) for t, tab in enumerate(model.tables) if tab.per_candidate]
    rows: dict[tuple[int, int], tuple[int, int]] = {}
    emb: OrderedDict[tuple[int, int], int] = OrderedDict()
    kv: OrderedDict[int, tuple[int, int]] = OrderedDict()
    hist: dict[int, list[int]] = {}
    used = kv_used = 0
    free_at = 0.0
    misses, soj = [], []
    names = ("ts_s", "user_id", "new_items", "candidates")
    for t_s, u, new, cands in zip(*(listed.column(c).to_pylist() for c in names), strict=True):
        h = hist.setdefault(u, [])
        h.extend(new)
        H = len(h)
        s0 = 0 if H <= S else -(-(H - S) // C) * C
        L = H - s0
        c = 0
        if u in kv:
            st, ln = kv.pop(u)
            kv_used -= ln
            c = ln if st == s0 else 0
        if (H < S or s0 + S - H > 0) and 0 < L <= kv_cap:
            while kv_used + L > kv_cap:
                kv_used -= kv.popitem(last=False)[1][1]
            kv[u] = (s0, L)
            kv_used += L
        n = L - c
        look = miss_b = miss = 0
        for items, tabs in ((h[H - n :], hist_tabs), (cands, cand_tabs)):
            for it in items:
                for t, tab in tabs:
                    k = (t, it)
                    row = rows.get(k)
                    if row is None:
                        row = rows[k] = (t, table_row(tab, it))
                    b = tab.row_bytes
                    look += b
                    if row in emb:
                        emb.move_to_end(row)
                        continue
                    miss += 1
                    miss_b += b
                    if b <= emb_cap:
                        while used + b > emb_cap:
                            used -= emb.popitem(last=False)[1]
                        emb[row] = b
                        used += b
        svc = batch_time(coeffs, [(n, c, L, len(cands), look, miss_b, miss)], [1.0])
        free_at = max(free_at, t_s) + svc
        soj.append(free_at - t_s)
        misses.append(miss)
    return misses, soj


def drawn_candidates(table, a, n: int) -> list[list[int]]:
    """Raw ids of the implicit candidates of requests 0..n-1, by the brute node's draw.

    Not the kernel's draw, so the peer's trace does not lean on the code it measures.
    """
    rows = table.column("new_items").slice(0, n).to_pylist()  # the stream up to request n
    stream = np.searchsorted(a.item_ids, [v for row in rows for v in row])
    stream, tok_off, w = stream.tolist(), a.tok_off.tolist(), a.candidate_window_tokens
    out = []
    for i in range(n):
        drawn = (draw_candidate(a.candidate_seed, i, k, stream, tok_off, w)
                 for k in range(int(a.n_cand[i])))  # fmt: skip
        out.append([int(a.item_ids[c]) for c in drawn if c >= 0])
    return out


def listed_prefix(table, a, n: int):
    """The first n requests with their drawn candidates listed (the brute node's input)."""
    head = table.slice(0, n)
    drawn = drawn_candidates(table, a, n)
    count = pa.array([len(c) for c in drawn], pa.int32())
    head = head.set_column(head.schema.get_field_index("n_candidates"), "n_candidates", count)
    return head.append_column("candidates", pa.array(drawn, pa.list_(pa.int64())))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests-peer", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument(
        "--duration-s",
        type=float,
        default=250.0,
        help="trace length at 400 QPS (the default gives ~100k requests; small for a smoke run)",
    )
    args = ap.parse_args()
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()}")
    t0 = time.perf_counter()
    table = synthesize(SynthConfig(regime="steady", qps=400.0, duration_s=args.duration_s, seed=1))
    a = A.from_table(table, seed=1)
    print(f"trace: {a.n_requests} requests, {a.n_users} users, {a.n_items} items "
          f"(built in {time.perf_counter() - t0:.1f} s)")  # fmt: skip
    gpu, model = load_gpu("a100-80g"), load_model("gr-small")
    lat = build_latency_model(gpu, model, resolve_latency(gpu, model, None))
    ctx = prepare_context(a, gpu, model, lat, pool_fraction=0.25)
    cfg = NodeConfig()
    r = 0.3
    n = min(args.requests_peer, a.n_requests)
    listed = listed_prefix(table, a, n)
    ctx_l = prepare_context(A.from_table(listed), gpu, model, lat, pool_bytes=ctx.pool_bytes)
    one = dataclasses.replace(cfg, refill="lazy", window_s=1e9)  # one window, constant r
    simulate_node(ctx_l, [r], one)  # load compiled kernels
    t0 = time.perf_counter()
    ours = simulate_node(ctx_l, [r], one)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    peer_miss, peer_soj = peer_eval(listed, model, ctx.pool_bytes, dataclasses.asdict(lat), r)
    t_peer = time.perf_counter() - t0
    np.testing.assert_array_equal(ours.n_miss, peer_miss)
    np.testing.assert_allclose(ours.sojourn_s, peer_soj, rtol=1e-9, atol=1e-12)
    lk = int(listed.column("n_candidates").to_numpy().sum())
    p99 = float(np.percentile(ours.sojourn_s, 99) * 1e3)
    print(f"one evaluation, first {n} requests (candidates listed, {lk / n:.0f} candidates/request, "
          f"{len(model.tables)} EMB tables), r={r}, lazy refill:")  # fmt: skip
    print(f"  ours (numba):        {n / t_ours:12,.0f} requests/s  ({t_ours:.3f} s)")
    print(f"  peer (Python loop):  {n / t_peer:12,.0f} requests/s  ({t_peer:.3f} s)")
    print(f"  speed-up: {t_peer / t_ours:.0f}x; same per-request misses "
          f"({sum(peer_miss)} in all) and sojourns (P99 {p99:.4f} ms)")  # fmt: skip
    # the implicit-candidate kernels, outside timings (a --duration-s trace may be under 1000)
    evaluate_span(ctx, r, 0, 0, min(1000, a.n_requests), cfg)
    t0 = time.perf_counter()
    evaluate_span(ctx, r, 0, 0, n, cfg)
    t = time.perf_counter() - t0
    print(f"  ours, the same requests drawing their candidates in the kernel: {n / t:,.0f} "
          f"requests/s ({t:.3f} s)")  # fmt: skip

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


if __name__ == "__main__":
    main()
