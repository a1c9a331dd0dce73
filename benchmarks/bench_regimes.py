"""Regime experiment: where r* sits, how far it moves, and what adaptivity buys.

For gr-small and gr-large on a100-80g and the steady, trend and burst regimes
(``helm_plan.synth``, 300 s, 10 s windows -> 30 windows, the model's
max_seq_len and candidate count, seed 7), with the pool at 25% of the trace
footprint and the shipped (roofline) latency profiles, untouched:

- labels every window (Optuna TPE, 30 trials, seed 0);
- best static r (whole-trace P99, same machinery);
- replays the oracle schedule (r* per window) under throttled, eager and lazy
  refill, plus emb-max and kv-max;
- reports r* statistics, flatness, P99 of best static vs the adaptive
  schedule (with a 95% bootstrap CI over windows of the relative cut), and
  eager vs throttled per-window P99 spikes.

Load: gr-small at 400 QPS, gr-large at 200 QPS (base rate; trend ramps
0.5x-1.5x, bursts 4x); the measured utilisation is printed.
Overall figures skip window 0 (cold caches).

Run: ``python benchmarks/bench_regimes.py [--workers 2] [--json out.json] [--models ...]
[--regimes ...] [--duration-s 300] [--trials 30] [--qps-scale 1]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from helm_plan import arrays as A
from helm_plan import exec as executors
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.oracle import OracleConfig, adaptivity_ci, best_static, label_windows
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, fill_forward, prepare_context, simulate_node
from helm_plan.synth import SynthConfig, synthesize

QPS = {"gr-small": 400.0, "gr-large": 200.0}


def run_one(
    model_name: str,
    regime: str,
    workers: int,
    warmup: str = "window",
    duration_s: float = 300.0,
    trials: int = 30,
    qps_scale: float = 1.0,
) -> dict:
    gpu = load_gpu("a100-80g")
    model = load_model(model_name)
    lat = build_latency_model(gpu, model, resolve_latency(gpu, model, None))
    table = synthesize(
        SynthConfig(
            regime=regime,
            qps=QPS[model_name] * qps_scale,
            duration_s=duration_s,
            candidates=model.n_candidates,
            max_seq_len=model.max_seq_len,
            seed=7,
        )
    )
    ctx = prepare_context(A.from_table(table, seed=7), gpu, model, lat, pool_fraction=0.25)
    ncfg = NodeConfig(refill="throttled")
    ocfg = OracleConfig(trials=trials, seed=0, warmup=warmup)
    ex = executors.local(workers)
    t0 = time.perf_counter()
    lab = label_windows(ctx, ncfg, ocfg, executor=ex)
    t_lab = time.perf_counter() - t0
    bs = best_static(ctx, ncfg, ocfg, executor=ex)
    sched = fill_forward(lab.r_star)
    res = {
        m: simulate_node(ctx, sched, NodeConfig(refill=m)) for m in ("throttled", "eager", "lazy")
    }
    static = simulate_node(ctx, np.array([bs.ratio]), ncfg)
    emb_max = simulate_node(ctx, np.array([1.0]), ncfg)
    kv_max = simulate_node(ctx, np.array([0.0]), ncfg)
    meas = static.window_idx >= static.measured_from_window
    ci = adaptivity_ci(
        static.sojourn_s[meas], res["throttled"].sojourn_s[meas], static.window_idx[meas], seed=0
    )
    w = slice(1, None)
    r = lab.r_star[w]
    r = r[np.isfinite(r)]
    p_thr = res["throttled"].windows["p99_ms"].to_numpy()[w]
    p_eag = res["eager"].windows["p99_ms"].to_numpy()[w]
    spike = p_eag / p_thr
    arrival = ctx.arrays.n_requests / (ctx.arrays.ts_s[-1] - ctx.arrays.ts_s[0])
    return {
        "model": model_name,
        "regime": regime,
        "requests": ctx.arrays.n_requests,
        "windows": lab.table.height,
        "utilisation": float(static.service_s.mean() * arrival),
        "label_wall_s": t_lab,
        "r_star_mean": float(r.mean()),
        "r_star_std": float(r.std()),
        "r_star_min": float(r.min()),
        "r_star_max": float(r.max()),
        "r_star_mean_step": float(np.mean(np.abs(np.diff(r)))) if len(r) > 1 else 0.0,
        "flatness_median": float(np.nanmedian(lab.table["flatness"].to_numpy()[w])),
        "share_windows_flat_ge_0.5": float(np.mean(lab.table["flatness"].to_numpy()[w] >= 0.5)),
        "best_static_r": bs.ratio,
        "best_static_flatness": bs.flatness,
        "p99_best_static_ms": static.p99_ms,
        "p99_adaptive_throttled_ms": res["throttled"].p99_ms,
        "p99_adaptive_eager_ms": res["eager"].p99_ms,
        "p99_adaptive_lazy_ms": res["lazy"].p99_ms,
        "p99_emb_max_ms": emb_max.p99_ms,
        "p99_kv_max_ms": kv_max.p99_ms,
        "adaptivity_value": ci.value,
        "adaptivity_ci95": [ci.lo, ci.hi],
        "slo_att_static": static.slo_attainment,
        "slo_att_adaptive_throttled": res["throttled"].slo_attainment,
        "eager_blocked_ms_total": float(res["eager"].blocked_s * 1e3),
        "eager_over_throttled_window_p99_max": float(np.nanmax(spike)),
        "windows_eager_p99_gt_1.2x_throttled": int(np.nansum(spike > 1.2)),
        "throttled_blocked_ms_total": float(res["throttled"].blocked_s * 1e3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", default=None, help="also print every figure as JSON to this path")
    ap.add_argument("--models", default="gr-small,gr-large")
    ap.add_argument("--regimes", default="steady,trend,burst")
    ap.add_argument(
        "--warmup",
        default="window",
        choices=["window", "carry"],
        help="oracle warm-up: independent windows (DESIGN.md) or the carried state",
    )
    ap.add_argument(
        "--duration-s", type=float, default=300.0, help="trace length (small for a smoke run)"
    )
    ap.add_argument("--trials", type=int, default=30, help="Optuna trials per window")
    ap.add_argument(
        "--qps-scale",
        type=float,
        default=1.0,
        help="multiply the base loads (small for a smoke run)",
    )
    args = ap.parse_args()
    rows = []
    for m in args.models.split(","):
        for reg in args.regimes.split(","):
            t0 = time.perf_counter()
            row = run_one(
                m, reg, args.workers, args.warmup, args.duration_s, args.trials, args.qps_scale
            )
            rows.append(row)
            print(
                f"{m:9s} {reg:7s} n={row['requests']:6d} rho={row['utilisation']:.2f} "
                f"r*={row['r_star_mean']:.2f}±{row['r_star_std']:.2f} "
                f"[{row['r_star_min']:.2f},{row['r_star_max']:.2f}] flat={row['flatness_median']:.2f} | "
                f"static r={row['best_static_r']:.2f} P99={row['p99_best_static_ms']:.3f} ms; "
                f"adaptive thr {row['p99_adaptive_throttled_ms']:.3f} eager {row['p99_adaptive_eager_ms']:.3f} "
                f"lazy {row['p99_adaptive_lazy_ms']:.3f}; cut {row['adaptivity_value']:+.1%} "
                f"CI [{row['adaptivity_ci95'][0]:+.1%},{row['adaptivity_ci95'][1]:+.1%}]; "
                f"emb-max {row['p99_emb_max_ms']:.3f} kv-max {row['p99_kv_max_ms']:.3f}; "
                f"eager/thr max {row['eager_over_throttled_window_p99_max']:.2f}x "
                f"({row['windows_eager_p99_gt_1.2x_throttled']} win >1.2x, "
                f"blocked {row['eager_blocked_ms_total']:.1f} ms) [{time.perf_counter() - t0:.0f} s]",
                flush=True,
            )
    for m in args.models.split(","):
        means = {r["regime"]: r["r_star_mean"] for r in rows if r["model"] == m}
        print(
            f"{m}: mean r* by regime {means}; moves by {max(means.values()) - min(means.values()):.2f}"
        )
    if args.json:
        with open(args.json, "w") as fh:  # benchmark output, not a library write
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
