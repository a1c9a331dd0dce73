"""Hand-made run data for the report machinery (independent of the pipeline stages)."""

from __future__ import annotations

import numpy as np
import polars as pl

from helm_plan.report.store import RunData

POLICIES = ("best-static", "emb-max", "kv-max", "naive-adaptive", "adaptive")


def make_run(n_windows: int = 6, seed: int = 0, *, flat: bool = False) -> RunData:
    """A small, plausible RunData: every table the report reads, with known values."""
    rng = np.random.default_rng(seed)
    w = np.arange(n_windows)
    t0 = w * 10.0
    grid = np.round(np.linspace(0, 1, 11), 2)
    r_star = np.round(rng.uniform(0.2, 0.8, n_windows), 2)
    grid_rows = []
    for i in w:
        for r in grid:
            p99 = 10.0 if flat else 10.0 * (1 + 2.0 * (r - r_star[i]) ** 2)
            grid_rows.append(
                {"window": int(i), "ratio": float(r), "p99_ms": p99, "slo_attainment": 0.99}
            )
    labels = pl.DataFrame(
        {
            "window": w,
            "t_start_s": t0,
            "t_end_s": t0 + 10.0,
            "n_requests": np.full(n_windows, 500),
            "r_star": r_star,
            "p99_ms": np.full(n_windows, 10.0),
            "slo_attainment": np.full(n_windows, 0.99),
            "flat_lo": np.clip(r_star - 0.1, 0, 1),
            "flat_hi": np.clip(r_star + 0.1, 0, 1),
        }
    ).with_columns((pl.col("flat_hi") - pl.col("flat_lo")).alias("flat_width"))
    if flat:
        labels = labels.with_columns(
            flat_lo=pl.lit(0.0), flat_hi=pl.lit(1.0), flat_width=pl.lit(1.0)
        )
    base = {
        "best-static": 12.0,
        "emb-max": 30.0,
        "kv-max": 25.0,
        "naive-adaptive": 14.0,
        "adaptive": 10.5,
    }
    if flat:
        base = dict.fromkeys(base, 10.0)
    pw, pol, sens = [], [], []
    for p, b in base.items():
        ratio = {
            "best-static": np.full(n_windows, 0.5),
            "emb-max": np.ones(n_windows),
            "kv-max": np.zeros(n_windows),
        }.get(p, r_star)
        p99 = b * (1 + 0.1 * rng.standard_normal(n_windows) ** 2)
        for i in w:
            pw.append(
                {
                    "policy": p,
                    "window": int(i),
                    "t_start_s": float(t0[i]),
                    "t_end_s": float(t0[i] + 10),
                    "ratio": float(ratio[i]),
                    "p99_ms": float(p99[i]),
                    "slo_attainment": 0.98,
                    "n_requests": 500,
                    "emb_hit_rate": 0.6,
                    "kv_reuse_rate": 0.5,
                }
            )
            sens.append(
                {
                    "policy": p,
                    "window": int(i),
                    "abs_dr": float(abs(ratio[i] - r_star[i])),
                    "regret": float(p99[i] / 10.0 - 1),
                }
            )
        pol.append(
            {
                "policy": p,
                "p99_ms": b,
                "slo_attainment": 0.97,
                "mean_ratio": float(ratio.mean()),
                "mean_abs_dr": float(np.abs(ratio - r_star).mean()),
                "median_regret": b / 10 - 1,
                "emb_hit_rate": 0.6,
                "kv_reuse_rate": 0.5,
            }
        )
    cap = np.linspace(0, 2**31, 21)
    curves = pl.concat(
        [
            pl.DataFrame(
                {
                    "kind": [k] * 21,
                    "window": [-1] * 21,
                    "capacity_bytes": cap.astype(np.int64),
                    "pool_fraction": np.linspace(0, 1, 21),
                    "hit_rate": np.sqrt(np.linspace(0, 1, 21)) * f,
                }
            )
            for k, f in (("emb", 0.9), ("emb_kv0", 0.8), ("kv", 0.7))
        ]
    )
    red = 1 - base["adaptive"] / base["best-static"]
    tables = {
        "stats": pl.DataFrame(
            {
                "name": ["requests", "users", "zipf_alpha", "model"],
                "value": [3000.0, 200.0, 1.05, None],
                "text": [None, None, None, "gr-small"],
            }
        ),
        "workload_arrivals": pl.DataFrame(
            {"t_s": np.arange(60.0), "requests": np.full(60, 50), "qps": np.full(60, 50.0)}
        ),
        "workload_history": pl.DataFrame(
            {"len_lo": [0, 64, 128], "len_hi": [63, 127, 255], "requests": [1000, 1500, 500]}
        ),
        "workload_popularity": pl.DataFrame({"rank": [1, 10, 100], "count": [1000, 100, 10]}),
        "curves": curves,
        "curve_knees": pl.DataFrame(
            {
                "kind": ["emb", "kv"],
                "window": [-1, -1],
                "capacity_bytes": [2**28, 2**30],
                "pool_fraction": [0.125, 0.5],
                "hit_rate": [0.6, 0.4],
            }
        ),
        "latency_coef": pl.DataFrame(
            {"name": ["t0_s", "prefill_a_s"], "value": [1e-4, 6e-9], "unit": ["s", "s/token"]}
        ),
        "latency_terms": pl.DataFrame(
            {
                "policy": [p for p in base for _ in range(2)],
                "term": ["prefill", "h2d"] * len(base),
                "mean_ms": [0.5, 0.2] * len(base),
            }
        ),
        "labels": labels,
        "labels_grid": pl.DataFrame(grid_rows),
        "policy_windows": pl.DataFrame(pw),
        "policies": pl.DataFrame(pol),
        "sensitivity": pl.DataFrame(sens),
        "adaptivity": pl.DataFrame(
            {
                "policy": ["naive-adaptive", "adaptive"],
                "p99_reduction": [1 - base["naive-adaptive"] / 12.0, red],
                "ci_low": [-0.3, red - 0.05],
                "ci_high": [0.1, red + 0.05],
                "confidence": [0.95, 0.95],
                "n_boot": [1000, 1000],
            }
        ),
        "config": pl.DataFrame({"section": ["analyze"], "key": ["slo_ms"], "value": ["100.0"]}),
        "versions": pl.DataFrame({"package": ["python", "numpy"], "version": ["3.11", "2.4"]}),
        "timings": pl.DataFrame(
            {"stage": ["inspect", "curves"], "seconds": [0.5, 1.5], "cached": [False, True]}
        ),
    }
    meta = {
        "trace_path": "t.parquet",
        "trace_stem": "t",
        "trace_sha256": "ab" * 32,
        "seed": 7,
        "gpu": "h100-80g",
        "model": "gr-small",
        "latency": "h100-80g_gr-small",
        "slo_ms": 100.0,
        "window_s": 10.0,
        "windows": n_windows,
        "pool_bytes": 2**31,
        "pool_source": "test",
        "best_static_ratio": 0.5,
        "best_static_robust_ratio": 0.6,
        "best_static_flat_lo": 0.4,
        "best_static_flat_hi": 0.8,
        "oracle_p99_ms": 10.0,
        "oracle_slo_attainment": 0.99,
        "latency_source": "DERIVED",
        "command": "helm-plan analyze t.parquet",
    }
    return RunData(tables=tables, meta=meta)


ROUTERS = ("jsq", "affinity", "kv-overlap", "helm")


def make_fleet_run(seed: int = 0, *, spread: bool = True) -> RunData:
    """:func:`make_run` planned onto a fleet, with the shipped controller among the policies.

    Adds every table the Capacity, Routing and Controller sections read. With
    ``spread=False`` every node runs the same r in every window (a static policy).
    """
    rng = np.random.default_rng(seed + 1)
    run = make_run(seed=seed)
    t = dict(run.tables)
    n_windows = run.meta["windows"]
    ctrl_r = np.clip(t["labels"]["r_star"].to_numpy() + 0.05, 0, 1)
    t["policy_windows"] = pl.concat(
        [
            t["policy_windows"],
            t["policy_windows"]
            .filter(pl.col("policy") == "adaptive")
            .with_columns(
                pl.lit("controller").alias("policy"),
                pl.Series("ratio", ctrl_r),
                (pl.col("p99_ms") * 1.05).alias("p99_ms"),
            ),
        ]
    )
    t["policies"] = pl.concat(
        [
            t["policies"],
            pl.DataFrame(
                [
                    {
                        "policy": "controller",
                        "p99_ms": 11.0,
                        "slo_attainment": 0.975,
                        "mean_ratio": float(ctrl_r.mean()),
                        "mean_abs_dr": 0.05,
                        "median_regret": 0.1,
                        "emb_hit_rate": 0.6,
                        "kv_reuse_rate": 0.5,
                    }
                ]
            ),
        ]
    )
    t["sensitivity"] = pl.concat(
        [
            t["sensitivity"],
            pl.DataFrame(
                {
                    "policy": ["controller"] * n_windows,
                    "window": np.arange(n_windows),
                    "abs_dr": np.full(n_windows, 0.05),
                    "regret": rng.uniform(0.0, 0.2, n_windows),
                }
            ),
        ]
    )
    t["adaptivity"] = pl.concat(
        [
            t["adaptivity"],
            pl.DataFrame(
                {
                    "policy": ["controller"],
                    "p99_reduction": [1 - 11.0 / 12.0],
                    "ci_low": [0.01],
                    "ci_high": [0.15],
                    "confidence": [0.95],
                    "n_boot": [1000],
                }
            ),
        ]
    )
    terms = t["latency_terms"]
    t["latency_terms"] = pl.concat(
        [
            terms,
            pl.DataFrame(
                {
                    "policy": terms["policy"].unique(maintain_order=True),
                    "term": "queue_wait",
                    "mean_ms": 40.0,
                }
            ),
            pl.DataFrame({"policy": ["controller"] * 3, "term": ["prefill", "h2d", "queue_wait"],
                          "mean_ms": [0.5, 0.25, 35.0]}),
        ]
    )  # fmt: skip
    cap_rows = []
    for i, pol in enumerate(("best-static", "emb-max", "controller")):
        for j, router in enumerate(ROUTERS):
            nodes = None if (pol, router) == ("emb-max", "jsq") else 4 - (i + j) % 2
            cap_rows.append(
                {
                    "gpu": "h100-80g",
                    "policy": pol,
                    "router": router,
                    "baseline": (pol, router) == ("best-static", "jsq"),
                    "nodes": nodes,
                    "p99_ms": 80.0 + 3 * i + j if nodes else None,
                    "p99_ms_one_less": 140.0 + i + j,
                    "slo_attainment": 0.995 - 0.001 * (i + j),
                    "usd_per_day": 96.0 * nodes if nodes else None,
                    "usd_per_million_requests": 0.5 * nodes if nodes else None,
                    "nodes_saved": (4 - nodes) if nodes else None,
                }
            )
    t["capacity"] = pl.DataFrame(cap_rows, infer_schema_length=None)
    t["capacity_savings"] = pl.DataFrame(
        {
            "gpu": ["h100-80g"] * 2,
            "kind": ["policy", "router"],
            "scope": ["jsq", "best-static"],
            "a": ["controller", "helm"],
            "b": ["best-static", "jsq"],
            "nodes_saved": [1, 0],
            "lo": [0.0, -1.0],
            "hi": [1.0, 1.0],
            "usd_saved_per_day": [96.0, 0.0],
        }
    )
    qps = [50.0, 100.0, 150.0, 200.0]
    t["load_curve"] = pl.DataFrame(
        {
            "gpu": ["h100-80g"] * 8,
            "policy": [p for p in ("best-static", "controller") for _ in qps],
            "qps": qps * 2,
            "p99_ms": [20.0, 40.0, 90.0, 300.0, 18.0, 35.0, 85.0, 250.0],
            "passes": [True, True, True, False] * 2,
        }
    )
    t["max_qps"] = pl.DataFrame(
        {"gpu": ["h100-80g"] * 2, "policy": ["best-static", "controller"],
         "max_qps": [160.0, 170.0], "lower_bound": [False, False]}
    )  # fmt: skip
    t["capacity_gpus"] = pl.DataFrame({"gpu": ["h100-80g"], "usd_per_hour": [4.0],
                                       "pool_bytes": [2**31], "footprint_bytes": [2**33],
                                       "fits": [False]})  # fmt: skip
    t["capacity_frontier"] = pl.DataFrame(
        {"gpu": ["h100-80g"] * 4, "policy": ["controller"] * 4, "router": ["affinity"] * 4,
         "nodes": [2, 3, 4, 5], "step": [-1, 0, 1, 2], "passes": [False, True, True, True],
         "p99_ms": [140.0, 86.0, 60.0, 52.0], "slo_attainment": [0.97, 0.994, 0.998, 0.999],
         "usd_per_day": [192.0, 288.0, 384.0, 480.0],
         "usd_per_million_requests": [1.0, 1.5, 2.0, 2.5]}
    )  # fmt: skip
    t["capacity_headroom"] = pl.DataFrame(
        {"gpu": ["h100-80g"], "policy": ["controller"], "router": ["affinity"], "nodes": [3],
         "growth_lo": [0.25], "growth_hi": [0.3125], "peak_qps_lo": [312.5], "capped": [False],
         "simulations": [5]}
    )  # fmt: skip
    t["routing"] = pl.DataFrame(
        [
            {
                "router": r,
                "policy": "controller",
                "nodes": 4,
                "p50_ms": 10.0 + k,
                "p99_ms": 80.0 + k,
                "slo_attainment": 0.995,
                "throughput_rps": 200.0,
                "emb_hit_rate": 0.6,
                "kv_reuse_rate": 0.5 + 0.05 * k,
                "imbalance_max_mean": 1.1 + 0.1 * k,
                "imbalance_cv": 0.05 * k,
                "ratio_spread": 0.1 * k if spread else 0.0,
            }
            for k, r in enumerate(ROUTERS)
        ]
    )
    rw = []
    for k, r in enumerate(ROUTERS):
        for w in range(n_windows):
            lo = 0.3 + 0.01 * w
            hi = lo + (0.05 * k * (1 + w % 2) if spread else 0.0)
            rw.append(
                {
                    "router": r,
                    "window": w,
                    "start_s": 10.0 * w,
                    "p99_ms": 70.0 + k + w,
                    "ratio_min": lo,
                    "ratio_max": hi,
                    "ratio_spread": hi - lo,
                    "work_max_mean": 1.1 + 0.02 * k,
                }
            )
    t["routing_windows"] = pl.DataFrame(rw)
    meta = {
        **run.meta,
        "capacity_answer": [
            "Buy 3 × h100-80g (controller behind helm): 288 USD/day.",
            "The controller saves 1 node against best static behind jsq (95% CI +0 to +1).",
        ],
        "operating_nodes": 4,
        "operating": {
            "gpu": "h100-80g",
            "nodes": 4,
            "meets": True,
            "router": "jsq",
            "ratio": 0.5,
            "node": 2,
            "requests": 800,
            "share": 0.27,
            "mean_qps": 68.0,
            "peak_qps": 95.0,
            "p99_ms": 84.0,
            "slo_attainment": 0.993,
            "fleet_p99_ms": 80.0,
            "fleet_slo_attainment": 0.995,
        },
        "capacity_scaling": {
            "method": "users",
            "factor": 2.5,
            "qps_before": 100.0,
            "qps_after": 250.0,
            "peak_qps_before": 100.0,
            "peak_qps_after": 250.0,
            "users_before": 10,
            "users_after": 25,
            "items": 100,
            "peak_qps_target": 250.0,
            "jitter_s": 1.0,
            "assumption": "the trace's users cloned K times on the trace's own timeline",
        },
        "capacity_max_nodes": 64,
        "controller_decision_latency_us": {"median": 12.5, "p99": 40.25},
        "flat_tol": 0.05,
    }
    return RunData(tables=t, meta=meta)
