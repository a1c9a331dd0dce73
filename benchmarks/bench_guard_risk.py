"""The guard's risk rule on the contested case's tuning seeds: what each setting wins or loses.

The contested case (``bench_controller.contested_case``: the detectability scenario in a
2.5 GiB pool, two regimes that want r ~ 0 and r ~ 0.2, four phases, 0.5-s windows) with
``--seeds`` 100 and up and ``--phases`` of 2, 5 and 20 s: the seeds the risk rule's settings
(``risk_margin``, ``risk_cap``, ``regime_windows``; guard.py) were chosen on.
bench_controller.py validates on seeds 0-2, never read here.

Each case: best static (the oracle's search), then the shipped controller anchored at it with
each guard setting of ``--settings`` (``margin:cap:windows``; the first is the peer, by default
the rule before ``regime_windows``: every risky move refused). Printed: the controller's gain
over best static (1 - P99 / P99 of best static, 95% bootstrap CI over windows) per case and
setting, and per setting the worst and mean gain over the cases, against the peer's.

Run: ``nice -n 10 python benchmarks/bench_guard_risk.py [--seeds 100,101,102,103]
[--phases 2,5,20] [--settings 0.1:1:1000000,0.1:1:6] [--duration-s S] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
from bench_controller import contested_case

from helm_plan.controller.policy import ControllerPolicy
from helm_plan.controller.runtime import DEFAULT_PATH, Controller
from helm_plan.controller.validation import gain
from helm_plan.oracle import OracleConfig, best_static
from helm_plan.sim import simulate_node

NEVER = 1_000_000
"""A ``regime_windows`` no run reaches: every risky move refused."""


def setting(text: str) -> tuple[float, float, int]:
    m, cap, n = text.split(":")
    return float(m), float(cap), int(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="100,101,102,103")
    ap.add_argument("--phases", default="2,5,20", help="phase lengths, seconds")
    ap.add_argument("--settings", default=f"0.1:1:{NEVER},0.1:1:6",
                    help="guard settings margin:cap:regime_windows, the first the peer")  # fmt: skip
    ap.add_argument("--controller", default=str(DEFAULT_PATH))
    ap.add_argument("--trials", type=int, default=4, help="Optuna trials of best static's search")
    ap.add_argument("--duration-s", type=float, default=None, help="shorten every case (tiny)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    ctrl = Controller.load(a.controller)
    sets = [setting(s) for s in a.settings.split(",")]
    rows = []
    for phase in (float(p) for p in a.phases.split(",")):
        for seed in (int(s) for s in a.seeds.split(",")):
            t0 = time.perf_counter()
            name, ctx, ncfg, _ = contested_case(seed, a.duration_s, phase)
            bs = best_static(ctx, ncfg, OracleConfig(trials=a.trials))
            base = simulate_node(ctx, np.array([bs.ratio]), ncfg)
            gains = []
            for m, cap, n in sets:
                cfg = dataclasses.replace(ctrl.cfg, risk_margin=m, risk_cap=cap, regime_windows=n)
                pol = ControllerPolicy(ctx, ncfg, ctrl.with_config(cfg), "controller",
                                       anchor=bs.ratio)  # fmt: skip
                gains.append(gain(base, simulate_node(ctx, pol, ncfg), 0))
            rows.append((name, bs.ratio, base.p99_ms, gains))
            print(f"{name}: {ctx.arrays.n_requests} requests, {time.perf_counter() - t0:.0f} s",
                  flush=True)  # fmt: skip
    names = [f"{m:g}:{cap:g}:{n}" for m, cap, n in sets]
    print()
    print("| case | best static r (P99 ms) | " + " | ".join(names) + " |")
    print("|---" * (len(sets) + 2) + "|")
    for name, r, p99, gains in rows:
        print(f"| {name} | {r:.2f} ({p99:.3f}) | " + " | ".join(g.text() for g in gains) + " |")
    print()
    print("| setting | worst gain over best static | mean gain | peer (first setting) worst / "
          "mean | mean - peer's |")  # fmt: skip
    print("|---|---|---|---|---|")
    val = np.array([[g.value for g in gains] for *_, gains in rows])
    for i, n in enumerate(names):
        print(f"| {n} | {val[:, i].min():+.1%} | {val[:, i].mean():+.1%} | "
              f"{val[:, 0].min():+.1%} / {val[:, 0].mean():+.1%} | "
              f"{val[:, i].mean() - val[:, 0].mean():+.1%} |")  # fmt: skip
    if a.json:
        out = [{"case": name, "best_static_r": r, "best_static_p99_ms": p99,
                "gains": {n: dataclasses.asdict(g) for n, g in zip(names, gains, strict=True)}}
               for name, r, p99, gains in rows]  # fmt: skip
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
