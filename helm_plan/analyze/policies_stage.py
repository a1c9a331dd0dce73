"""The policies stage of ``helm-plan analyze``: every analysed policy over the whole trace.

Best static (the search, or its result from the background), the adaptive
policies' runs, the oracle's pooled figures, per-window sensitivity and the
adaptivity bootstrap, as run-store tables (:mod:`helm_plan.report.tables`).
Its own module because it is the largest stage (:mod:`helm_plan.analyze.stages`
holds the others); like them it prints and writes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from helm_plan.analyze.stages import StageOutput, no_progress, oracle_pooled
from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.oracle import Labels, OracleConfig, adaptivity_ci, best_static, sensitivity_table
from helm_plan.oracle.static import BackgroundStatic, StaticRuns
from helm_plan.policies import (
    FLEET_STATIC,
    POLICY_FACTS,
    PolicyEnv,
    baseline_policy,
    default_policies,
    parse_policy,
)
from helm_plan.regimes import RegimeSpan
from helm_plan.report.tables import (
    ADAPTIVITY,
    LATENCY_TERMS,
    POLICIES,
    POLICY_WINDOWS,
    REGIMES,
    SENSITIVITY,
    STATIC_SWEEP,
)
from helm_plan.sim import NodeConfig, NodeContext, NodeResult, simulate_node
from helm_plan.sim.regime_figures import regime_table

POLICY_NAMES = default_policies("analyze")
"""Policies compared by analyze, in table order (the specs of :mod:`helm_plan.policies` that
name ``analyze`` among their defaults); the ``controller`` is the shipped default
(:mod:`helm_plan.controller`), deciding per window from what a server measures."""
ADAPTIVE_NAMES = tuple(n for n in POLICY_NAMES if POLICY_FACTS[n].kind == "adaptive")
"""Policies compared with best static by the window bootstrap."""
BASELINE = baseline_policy()
"""The policy every adaptive one is compared with (best static)."""
FIXED_RATIOS = {n: r for n in POLICY_NAMES
                if isinstance(r := getattr(parse_policy(n), "ratio", None), float)}  # fmt: skip
"""The analysed statics whose r is a class constant (emb-max, kv-max): read from the memo."""


def terms_ms(res: NodeResult) -> dict[str, float]:
    """Mean per-request service time by term over the measured windows, ms, and the queue wait."""
    m = res.measured_from_window
    n = max(res.requests, 1)
    out = {k: float(v[m:].sum() / n * 1e3) for k, v in res.term_s.items()}
    i0 = len(res.sojourn_s) - res.requests
    out["queue_wait"] = float(res.sojourn_s[i0:].mean() * 1e3) - sum(out.values())
    return out


def _policy_row(name: str, refill: str, res: NodeResult, st_m: pl.DataFrame,
                lab_r: np.ndarray) -> dict[str, Any]:  # fmt: skip
    m = res.measured_from_window
    ok = np.isfinite(lab_r[m:])
    ratios = res.ratios
    return {
        "policy": name,
        "refill": refill,
        "p99_ms": res.p99_ms,
        "p50_ms": res.p50_ms,
        "slo_attainment": res.slo_attainment,
        "mean_ratio": float(np.mean(ratios[m:])),
        "mean_abs_dr": float(np.mean(np.abs(ratios[m:][ok] - lab_r[m:][ok]))),
        "median_regret": float(st_m["regret"].median()),
        "emb_hit_rate": res.emb_hit_rate,
        "kv_reuse_rate": res.kv_reuse_rate,
        "h2d_gb": res.h2d_bytes / 1e9,
        "blocked_ms": res.blocked_s * 1e3,
        "throughput_rps": res.throughput_rps,
        "requests": res.requests,
    }


def policy_task(
    shared: tuple[NodeContext, NodeConfig, PolicyEnv], name: str
) -> tuple[str, NodeResult]:
    """One adaptive policy over the whole trace: (refill mode it ran with, compact result)."""
    ctx, node_cfg, env = shared
    built = parse_policy(name).build(ctx, node_cfg, env)
    refill = built.refill or node_cfg.refill
    return refill, simulate_node(
        ctx, built.policy, dataclasses.replace(node_cfg, refill=refill)
    ).compact()


def stage_policies(
    ctx: NodeContext,
    node_cfg: NodeConfig,
    oracle_cfg: OracleConfig,
    labels: Labels,
    *,
    n_boot: int,
    confidence: float,
    seed: int,
    progress: Progress = no_progress,
    executor: Executor | None = None,
    static: BackgroundStatic | None = None,
    spans: Sequence[RegimeSpan] = (),
    fleet_ratio: float | None = None,
) -> StageOutput:
    """Best static search (or ``static``, the same search already running in the background), the policies, the oracle's pooled figures and sensitivity.

    Static splits (best static, emb-max, kv-max) come from one memo of
    whole-trace runs at constant ratios, shared with the best-static search;
    the oracle's pooled figures come from the carry oracle's own run. Only the
    adaptive policies replay the trace here, mapped over the executor (they are
    independent whole-trace runs). ``spans`` (the trace's regime spans) give the
    ``regimes`` table: each policy's and the oracle schedule's figures per regime.
    """
    names = POLICY_NAMES + ((FLEET_STATIC,) if fleet_ratio is not None else ())
    total = len(names) + 2
    progress(0, total)
    # the adaptive policies need only the labels, so they run first: a best-static search
    # still finishing in the background (its golden steps are sequential) overlaps them
    env = PolicyEnv(oracle=oracle_cfg, labels=labels)
    ex = executor or SerialExecutor()
    # the rest of POLICY_NAMES: constant ratios, from the memo; the controller runs once best
    # static is known: its guard falls back to the ratio this page reports as best static
    adaptive = [n for n in ADAPTIVE_NAMES if n != "controller"]
    ran = ex.map(policy_task, adaptive, shared=(ctx, node_cfg, env), label=lambda n: f"policy {n}")
    if static is not None:
        bs, runs = static.result(executor)
    else:
        runs = StaticRuns(ctx, node_cfg, executor)
        runs.get([0.0, 1.0])  # emb-max and kv-max ride along with the grid's first batch
        bs = best_static(ctx, node_cfg, oracle_cfg, None, executor, runs, grid=False)
    if "controller" in ADAPTIVE_NAMES:
        ran += ex.map(policy_task, ["controller"], label=lambda n: f"policy {n}",
                      shared=(ctx, node_cfg, dataclasses.replace(env, best_static=bs)))  # fmt: skip
        adaptive.append("controller")
    progress(1, total)
    pw, pols, terms, sens = [], [], [], []
    results: dict[str, NodeResult] = {}
    grid_r = np.asarray(labels.coarse_grid)
    lab_r = labels.r_star
    static_r = {BASELINE: bs.ratio, **FIXED_RATIOS, FLEET_STATIC: fleet_ratio}
    by_name = dict(zip(adaptive, ran, strict=True))
    for k, name in enumerate(names, start=2):
        if name in static_r:
            res, refill = runs.get([static_r[name]])[0], node_cfg.refill
        else:
            refill, res = by_name[name]
        results[name] = res
        win = res.windows.rename(
            {"start_s": "t_start_s", "end_s": "t_end_s", "requests": "n_requests"}
        )
        pw.append(win.select(pl.lit(name).alias("policy"), pl.all()))
        st = sensitivity_table(labels.table, res.ratios, grid_r)
        st_m = st.filter(pl.col("window") >= res.measured_from_window)
        sens.append(st_m.select(pl.lit(name).alias("policy"), "window", "ratio", "r_star",
                                pl.col("ratio_distance").alias("abs_dr"), "regret"))  # fmt: skip
        terms += [{"policy": name, "term": t, "mean_ms": v} for t, v in terms_ms(res).items()]
        pols.append(_policy_row(name, refill, res, st_m, lab_r))
        progress(k, total)
    pooled = oracle_pooled(ctx, labels, node_cfg, oracle_cfg)
    o_p99, o_att = (
        (pooled.p99_ms, pooled.slo_attainment) if isinstance(pooled, NodeResult) else pooled
    )
    # Best static is a schedule the oracle could have chosen: when the per-window labels
    # pool to a worse P99 (a greedy window-by-window search can), the oracle answer is it.
    oracle_schedule = "labels"
    if np.isfinite(bs.p99_ms) and not (o_p99 <= bs.p99_ms):
        o_p99, o_att, oracle_schedule = bs.p99_ms, bs.slo_attainment, BASELINE
    base = results[BASELINE]
    i0 = len(base.sojourn_s) - base.requests
    widx = base.window_idx
    ad_rows = []
    for name in ADAPTIVE_NAMES:
        ci = adaptivity_ci(
            base.sojourn_s[i0:], results[name].sojourn_s[i0:], widx[i0:],
            n_boot=n_boot, level=confidence, seed=seed,
        )  # fmt: skip
        ad_rows.append(
            {
                "policy": name,
                "baseline": BASELINE,
                "p99_reduction": 1.0 - results[name].p99_ms / base.p99_ms,
                "ci_low": ci.lo,
                "ci_high": ci.hi,
                "confidence": confidence,
                "n_boot": n_boot,
                "n_windows": ci.n_windows,
            }
        )
    progress(total, total)
    static_eval = bs.evaluated.rename({"r": "ratio"})
    by_regime = dict(results)
    if isinstance(pooled, NodeResult):  # the carry oracle's own run of its schedule
        by_regime["oracle"] = pooled
    tables = {
        POLICY_WINDOWS: pl.concat(pw, how="vertical_relaxed"),
        POLICIES: pl.DataFrame(pols),
        LATENCY_TERMS: pl.DataFrame(terms),
        SENSITIVITY: pl.concat(sens, how="vertical_relaxed"),
        ADAPTIVITY: pl.DataFrame(ad_rows),
        STATIC_SWEEP: static_eval,
        REGIMES: regime_table(by_regime, ctx.arrays.ts_s, spans, node_cfg.slo_ms),
    }
    meta = {
        "best_static_ratio": bs.ratio,
        "best_static_robust_ratio": bs.robust_ratio,
        "best_static_flat_lo": bs.flat_lo,
        "best_static_flat_hi": bs.flat_hi,
        "best_static_method": bs.method,
        "best_static_flatness": bs.flatness,
        "oracle_p99_ms": o_p99,
        "oracle_slo_attainment": o_att,
        "oracle_schedule": oracle_schedule,
        "measured_from_window": base.measured_from_window,
        "static_replays": runs.replays,
        "controller_decision_latency_us": _measured_latency(results.get("controller")),
        "controller_card_latency_us": _card_latency(),
        "controller_guard": _guard(results.get("controller")),
        "flat_tol": oracle_cfg.flat_tol,
    }
    return StageOutput(tables=tables, meta=meta)


def _measured_latency(res: NodeResult | None) -> dict[str, float] | None:
    """The controller's decision latency in this run, by the runtime's own timer (median, p99 µs)."""
    from helm_plan.controller.validation import latency_summary

    ns = res.policy_stats.get("decision_latency_ns") if res is not None else None
    return latency_summary(ns) if ns else None


def _guard(res: NodeResult | None) -> dict[str, float] | None:
    """The controller's guard in this run: its anchor and the shares of decisions it fell back
    or overrode the proposal."""
    st = res.policy_stats if res is not None else {}
    n = st.get("decisions", 0)
    if not n:
        return None
    return {"anchor": st["anchor"], "anchor_given": st["anchor_given"],
            "fallback_share": st["guard_fallback_windows"] / n,
            "override_share": st["guard_overrides"] / n}  # fmt: skip


def _card_latency() -> dict[str, float] | None:
    """The shipped controller's decision latency as its card records it (median, p99 µs)."""
    import json

    from helm_plan.controller.runtime import DEFAULT_PATH

    card = DEFAULT_PATH.with_name("card.json")
    return json.loads(card.read_text()).get("decision_latency_us") if card.is_file() else None
