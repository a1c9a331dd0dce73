"""The controller's figures on traces it never saw (issue 9).

For each held-out trace (``helm_plan.controller.training.HELD_OUT``: other
seeds, loads and pools than the training set; plus the Amazon Video Games log
ingested and re-timed when the real datasets folder exists, where training saw
MovieLens only), closed loop on one node
(gr-small on the default GPU, 10 s windows, throttled refill):

- the oracle (carry labels on the coarse grid plus the edge points, the same
  labelling as the training set) and its schedule replayed at the same refill;
- best static (the oracle's grid + golden-section search);
- the controller with its layer ablation (base; base+adapter; all three);
- hill climbing, the ghost baseline.

Printed: decision latency of ``Controller.step`` (all three layers; median
and p99 over every decision, measured in a tight loop on recorded
observations so that the simulator's own work does not pollute it), mean
|r − r*| over measured windows whose flat band is narrower than 0.1 (r* is
arbitrary elsewhere; the count of such windows is printed), P99 regret
against the oracle schedule (median over traces), P99 against best static
with the bootstrap CI of the gain, training time (from the shipped card),
and the ablation. Targets are the issue's; nothing here is tuned to them.

Run: ``python benchmarks/bench_controller.py [--traces N] [--controller PATH] [--json OUT]
[--real-only | --no-real] [--duration-s S]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from helm_plan.controller import training
from helm_plan.controller.features import observation
from helm_plan.controller.policy import HillClimbPolicy
from helm_plan.controller.runtime import DEFAULT_PATH, Controller
from helm_plan.datasets import default_dir
from helm_plan.sim import simulate_node


def decision_latency(ctrl: Controller, obs: list[np.ndarray], reps: int = 200) -> np.ndarray:
    """Per-call seconds of ``Controller.step`` over recorded observations."""
    out = []
    for _ in range(reps):
        ctrl.reset()
        for x in obs:
            t0 = time.perf_counter()
            ctrl.step(x)
            out.append(time.perf_counter() - t0)
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=len(training.HELD_OUT))
    ap.add_argument("--controller", default=str(DEFAULT_PATH))
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--real-only",
        action="store_true",
        help="only the held-out public logs (needs the datasets folder)",
    )
    ap.add_argument(
        "--no-real",
        action="store_true",
        help="skip the held-out public logs even where the datasets folder exists",
    )
    ap.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="shorten the synthetic held-out traces to this length (default: theirs, 300 s)",
    )
    a = ap.parse_args()
    ctrl = Controller.load(a.controller)
    rows, obs = [], []
    specs = training.HELD_OUT[: a.traces]
    if a.duration_s is not None:
        specs = tuple(dataclasses.replace(s, duration_s=a.duration_s) for s in specs)
    cases = [] if a.real_only else [(s.name, lambda s=s: training.synth_context(s)) for s in specs]
    ds = default_dir(Path(__file__).resolve().parents[1])
    if ds.is_dir() and not a.no_real:  # held-out public logs (the training set has MovieLens only)
        for name, c in training.real_trace_contexts(ds, training.REAL_HELD_OUT):
            cases.append((name, lambda c=c: c))
    for name, make in cases:
        t0 = time.perf_counter()
        ctx = make()
        v = training.validate(ctrl, ctx, name, ablation=True)
        hc = simulate_node(ctx, HillClimbPolicy(ctx, training.DEFAULT_NODE), training.DEFAULT_NODE)
        f = dict(v.figures)
        f["p99_ms[hill-climb]"] = float(hc.p99_ms)
        f["seconds"] = time.perf_counter() - t0
        rows.append(f)
        rng = np.random.default_rng(0)
        obs += [observation({"ratio": r, "arrival_rate_rps": 100 * (1 + rng.random())})
                for r in v.ratios]  # fmt: skip
        print(f"{name}: " + ", ".join(
            f"{k}={x:.4g}" if isinstance(x, float) else f"{k}={x}" for k, x in f.items()
        ))  # fmt: skip
    lat = decision_latency(ctrl, obs) * 1e6
    dr = np.array([f["abs_dr_narrow"] for f in rows])
    nw = np.array([f["narrow_windows"] for f in rows])
    reg = np.array([f["regret_vs_oracle"] for f in rows])
    vs = np.array([f["vs_best_static"] for f in rows])
    ok = np.isfinite(dr) & (nw > 0)
    pooled_dr = float(np.sum(dr[ok] * nw[ok]) / nw[ok].sum()) if ok.any() else float("nan")
    train_s = ctrl.card.get("train_seconds", float("nan"))
    print()
    print("| figure | measured | target |")
    print("|---|---|---|")
    print(
        f"| decision latency (Controller.step, 3 layers) | median {np.median(lat):.1f} µs, "
        f"p99 {np.percentile(lat, 99):.1f} µs | median ≤ 10 µs, p99 ≤ 30 µs |"
    )
    print(
        f"| mean \\|r − r*\\|, narrow-band windows ({int(nw.sum())} windows) | {pooled_dr:.3f} "
        f"| ≤ 0.025 |"
    )
    print(
        f"| P99 regret vs oracle schedule (median over {len(rows)} traces) | "
        f"{np.median(reg):+.1%} (max {np.max(reg):+.1%}) | ≤ 3% |"
    )
    print(f"| P99 vs best static (worst trace) | {np.max(vs):+.1%} | never worse than +2% |")
    for f in rows:
        print(
            f"| gain vs best static, {f['trace']} | {f['gain_vs_static']:+.1%} "
            f"[{f['gain_ci_lo']:+.1%}, {f['gain_ci_hi']:+.1%}] | report |"
        )
    print(f"| training, default set, 2 cores | {train_s} s | ≤ 600 s |")
    print()
    print("| trace | base | base+adapter | all three | hill-climb | oracle | best static |")
    print("|---|---|---|---|---|---|---|")
    for f in rows:
        print(f"| {f['trace']} | {f['p99_ms[base]']:.4f} | {f['p99_ms[base+adapter]']:.4f} | "
              f"{f['p99_ms[all]']:.4f} | {f['p99_ms[hill-climb]']:.4f} | {f['oracle_p99_ms']:.4f} "
              f"| {f['best_static_p99_ms']:.4f} |")  # fmt: skip
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"traces": rows, "latency_us": {"median": float(np.median(lat)),
                       "p99": float(np.percentile(lat, 99))}}, fh, indent=2, default=str)  # fmt: skip


if __name__ == "__main__":
    main()
