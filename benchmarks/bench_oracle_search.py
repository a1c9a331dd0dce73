"""The oracle search analyze runs (no grid) against the one training runs, both against the grid.

For each trace, :func:`helm_plan.oracle.audit.audit_search` walks the windows as the carry
oracle does and, at every window, runs the search and an exhaustive 0.01 grid from the same
carried node: the table gives the search's evaluations per window, how many windows' ``r*``
land in the grid's flat band (2 % of the best P99) and how much P99 the misses give away.
The peer, in the same run, is the search with the grid (coarse grid, edge points, then
Optuna trials: what analyze ran before and what ``train`` runs), audited the same way.

Traces: the shipped sample ``datasets/samples/mixed-small.parquet`` (two pools and window
lengths), the analyze tests' small table, and two synthetic ones (burst, mixed; 64
candidates, 10 s windows, pool 10 %).

Run: ``python benchmarks/bench_oracle_search.py [--trials 20] [--duration-s 200]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent


def cases(duration_s: float):  # noqa: ANN201
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import small_table

    from helm_plan.sim import NodeConfig, load_context
    from helm_plan.synth import SynthConfig, synthesize

    sample = ROOT / "datasets" / "samples" / "mixed-small.parquet"
    out = [
        ("mixed-small, pool 10 %, 10 s", load_context(sample, pool_fraction=0.1, seed=5),
         NodeConfig(slo_ms=1.0, window_s=10.0)),
        ("mixed-small, pool 30 %, 5 s", load_context(sample, pool_fraction=0.3, seed=5),
         NodeConfig(slo_ms=1.0, window_s=5.0)),
    ]  # fmt: skip
    t = small_table(2000, n_users=200, n_items=3000, max_new=8, n_candidates=16, rate_qps=50.0,
                    seed=3)  # fmt: skip
    out.append(("analyze test table, pool 30 %, 5 s", load_context(t, pool_fraction=0.3, seed=3),
                NodeConfig(slo_ms=0.5, window_s=5.0)))  # fmt: skip
    for reg, seed in (("burst", 2), ("mixed", 3)):
        tab = synthesize(SynthConfig(regime=reg, qps=60.0, duration_s=duration_s, items=20_000,
                                     candidates=64, seed=seed))  # fmt: skip
        out.append((f"synth {reg}, pool 10 %, 10 s", load_context(tab, pool_fraction=0.1,
                                                                   seed=seed),
                    NodeConfig(window_s=10.0)))  # fmt: skip
    return out


def summary(df: pl.DataFrame) -> tuple[float, int, int, float]:
    return (float(df["n_evals"].mean()), int(df["in_band"].sum()), df.height,
            float(df["regret"].max()))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--duration-s", type=float, default=200.0, help="synthetic traces' length")
    args = ap.parse_args()
    from helm_plan.oracle import OracleConfig
    from helm_plan.oracle.audit import audit_search

    ocfg = OracleConfig(trials=args.trials)
    rows = []
    tot = {"ours": [0.0, 0, 0, 0.0], "peer": [0.0, 0, 0, 0.0]}
    for name, ctx, ncfg in cases(args.duration_s):
        t0 = time.perf_counter()
        ours = summary(audit_search(ctx, ncfg, ocfg, grid=False))
        peer = summary(audit_search(ctx, ncfg, ocfg, grid=True))
        for k, s in (("ours", ours), ("peer", peer)):
            tot[k][0] += s[0] * s[2]
            tot[k][1] += s[1]
            tot[k][2] += s[2]
            tot[k][3] = max(tot[k][3], s[3])
        rows.append((name, ctx.arrays.n_requests, ours, peer))
        print(f"  {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    print("\n| trace | figure | ours (no grid) | peer: with the grid (same run) | ratio |")
    print("|---|---|---|---|---|")
    for name, n, o, p in [
        *rows,
        (
            "all",
            0,
            (tot["ours"][0] / max(tot["ours"][2], 1), *tot["ours"][1:]),
            (tot["peer"][0] / max(tot["peer"][2], 1), *tot["peer"][1:]),
        ),
    ]:
        label = f"{name} ({n:,} requests)" if n else "all traces"
        print(f"| {label} | evaluations per window | {o[0]:.2f} | {p[0]:.2f} | "
              f"{p[0] / o[0]:.1f}x fewer |")  # fmt: skip
        print(f"| {label} | r* in the 0.01 grid's flat band | {o[1]}/{o[2]} windows, worst "
              f"regret {o[3]:.1%} | {p[1]}/{p[2]}, worst {p[3]:.1%} | |")  # fmt: skip


if __name__ == "__main__":
    main()
