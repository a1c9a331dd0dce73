"""summary.json: the stable, versioned machine-readable result of ``helm-plan analyze``.

The schema is documented in ``docs/summary-schema.md``. Bump
:data:`SUMMARY_SCHEMA_VERSION` on any change: the minor number for added
keys, the major number for renamed or removed keys or changed meanings.
Everything here is derived from a :class:`RunData`, so ``helm-plan report``
can rebuild it from the run store.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from helm_plan.plan.verdict import Facts, verdicts
from helm_plan.policies import FLEET_STATIC, baseline_policy
from helm_plan.report.controller import controller_summary
from helm_plan.report.page import flat_tol
from helm_plan.report.regimes import regimes_summary
from helm_plan.report.store import RunData
from helm_plan.report.tables import (
    ADAPTIVITY,
    CAPACITY,
    CAPACITY_FRONTIER,
    CAPACITY_GPUS,
    CAPACITY_HEADROOM,
    CAPACITY_SAVINGS,
    LABELS,
    MAX_QPS,
    POLICIES,
    ROUTING,
    STATS,
    TIMINGS,
    VERSIONS,
)

SUMMARY_SCHEMA = "helm-plan/summary"
SUMMARY_SCHEMA_VERSION = "1.1"


BASELINE = baseline_policy()
ADAPTIVE = "adaptive"


def _num(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def _policy_rows(run: RunData) -> list[dict[str, Any]]:
    df = run.table(POLICIES)
    if df.is_empty():
        return []
    return [
        {
            "name": r["policy"],
            "p99_ms": _num(r["p99_ms"]),
            "slo_attainment": _num(r["slo_attainment"]),
            "mean_ratio": _num(r["mean_ratio"]),
        }
        for r in df.iter_rows(named=True)
    ]


def stats_dict(run: RunData) -> dict[str, Any]:
    """Trace statistics as a flat dict (numbers as numbers, the rest as text)."""
    df = run.table(STATS)
    out: dict[str, Any] = {}
    for r in df.iter_rows(named=True):
        v = r["value"]
        if v is not None and not math.isnan(v):
            out[r["name"]] = int(v) if float(v).is_integer() and abs(v) < 2**53 else v
        else:
            out[r["name"]] = r["text"]
    return out


def headline(run: RunData) -> dict[str, Any]:
    """The comparison figures: best static, oracle, policies and value of adaptivity."""
    pols = {p["name"]: p for p in _policy_rows(run)}
    bs = pols.get(BASELINE, {})
    lab = run.table(LABELS)
    ad = run.table(ADAPTIVITY)
    adr = ad.filter(pl.col("policy") == ADAPTIVE) if not ad.is_empty() else ad
    voa: dict[str, Any] = {
        "policy": ADAPTIVE,
        "baseline": BASELINE,
        "p99_reduction": None,
        "ci_low": None,
        "ci_high": None,
        "confidence": None,
        "n_boot": None,
    }
    if not adr.is_empty():
        r = adr.row(0, named=True)
        voa.update(
            p99_reduction=_num(r["p99_reduction"]),
            ci_low=_num(r["ci_low"]),
            ci_high=_num(r["ci_high"]),
            confidence=_num(r["confidence"]),
            n_boot=int(r["n_boot"]),
        )
    return {
        "best_static": {
            "ratio": _num(run.meta.get("best_static_ratio")),
            "robust_ratio": _num(run.meta.get("best_static_robust_ratio")),
            "flat_lo": _num(run.meta.get("best_static_flat_lo")),
            "flat_hi": _num(run.meta.get("best_static_flat_hi")),
            "p99_ms": bs.get("p99_ms"),
            "slo_attainment": bs.get("slo_attainment"),
        },
        "oracle": {
            "p99_ms": _num(run.meta.get("oracle_p99_ms")),
            "slo_attainment": _num(run.meta.get("oracle_slo_attainment")),
            "schedule": run.meta.get("oracle_schedule", "labels"),
            "ratio_min": _num(lab["r_star"].min()) if not lab.is_empty() else None,
            "ratio_max": _num(lab["r_star"].max()) if not lab.is_empty() else None,
        },
        "policies": list(pols.values()),
        "value_of_adaptivity": voa,
    }


def sensitivity_summary(run: RunData) -> dict[str, Any]:
    """Flatness and the 'does the split matter' call, from the labels and policy rows."""
    lab = run.table(LABELS)
    pols = {p["name"]: p for p in _policy_rows(run)}
    width = _num(lab["flat_width"].median()) if not lab.is_empty() else None
    ref = pols.get(BASELINE, {}).get("p99_ms")
    extremes = [pols[k]["p99_ms"] for k in ("emb-max", "kv-max") if k in pols]
    spread = None
    if ref and extremes and all(e is not None for e in extremes):
        spread = max(extremes) / ref - 1.0
    matters = None
    if spread is not None:
        matters = bool(spread > flat_tol(run))
    return {
        "flat_tolerance": flat_tol(run),
        "median_flat_width": width,
        "extreme_split_penalty": spread,
        "split_matters": matters,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def capacity_bullets(run: RunData) -> list[str]:
    """The plan's answer (traffic, cheapest fleet, per-GPU facts, savings) and what the
    footprint-fits shortcut saved."""
    m = run.meta
    out = list(m.get("capacity_answer", []))
    if m.get("footprint_fits") and m.get("oracle_time_saved_s") is not None:
        out.append(f"The oracle ran its first points only (no search steps): about "
                   f"{m['oracle_time_saved_s']:.1f} s saved on an answer known up front.")  # fmt: skip
    return out


def facts(run: RunData) -> Facts:
    """What the verdicts read, from the run store (plan.verdict)."""
    m = run.meta
    h = headline(run)
    pols = {p["name"]: p for p in h["policies"]}
    op = m.get("operating") or {}
    bs = h["best_static"]
    node = pols.get(FLEET_STATIC) if op else pols.get(BASELINE)
    spread = sensitivity_summary(run)["extreme_split_penalty"]
    ref = (pols.get(BASELINE) or {}).get("p99_ms")
    ext = tuple((pols.get(k) or {}).get("p99_ms") for k in ("emb-max", "kv-max"))
    extremes = tuple(x / ref - 1.0 if x is not None else None for x in ext) if ref else None
    band = (bs["flat_lo"], bs["flat_hi"]) if bs["flat_lo"] is not None else None
    ad = h["value_of_adaptivity"]
    naive, adaptive = pols.get("naive-adaptive") or {}, pols.get(ADAPTIVE) or {}
    fp, pool = m.get("footprint_bytes"), m.get("pool_bytes")
    gpus = run.table(CAPACITY_GPUS)
    planned_fits = (not gpus.is_empty() and op.get("nodes") == 1
                    and bool(gpus.filter(pl.col("gpu") == m.get("gpu"))["fits"].any()))  # fmt: skip
    return Facts(
        slo_ms=float(m.get("slo_ms")), attainment=float(m.get("attainment", 0.99)),
        flat_tol=flat_tol(run), gpu=m.get("gpu"),
        nodes=op.get("nodes") if op.get("meets") else None,
        max_nodes=m.get("capacity_max_nodes") if op else None,
        fleet_p99_ms=op.get("fleet_p99_ms"),
        node_p99_ms=(node or {}).get("p99_ms"), node_attainment=(node or {}).get("slo_attainment"),
        fits=bool(fp is not None and pool is not None and fp <= pool),
        scope="the analysed node's traffic" if op else "the trace", fits_said=planned_fits,
        spread=spread, extremes=extremes, ratio=bs["ratio"], fleet_ratio=op.get("ratio"),
        r_star=(h["oracle"]["ratio_min"], h["oracle"]["ratio_max"])
        if h["oracle"]["ratio_min"] is not None else None,
        median_band=sensitivity_summary(run)["median_flat_width"], robust_ratio=bs["robust_ratio"], band=band,
        adapt=(ad["p99_reduction"], ad["ci_low"], ad["ci_high"], ad["confidence"])
        if ad["p99_reduction"] is not None else None,
        refill=(naive.get("p99_ms"), adaptive.get("p99_ms"))
        if naive.get("p99_ms") and adaptive.get("p99_ms") else None,
    )  # fmt: skip


def verdict(run: RunData) -> list[str]:
    """Plain-language findings, most important first: the plan's answer, then the verdicts on
    the one operating point (:func:`helm_plan.plan.verdict.verdicts`, the one place they are
    decided)."""
    return capacity_bullets(run) + verdicts(facts(run))


def capacity_summary(run: RunData) -> dict[str, Any] | None:
    """summary.json's ``capacity`` object (None when planning was skipped)."""
    cap = run.table(CAPACITY)
    if cap.is_empty():
        return None
    m = run.meta
    return {
        "answer": list(m.get("capacity_answer", [])),
        "scaling": m.get("capacity_scaling"),
        "gpus": planner_rows(run),
        "operating_nodes": m.get("operating_nodes"),
        "operating": m.get("operating"),
        "rows": cap.to_dicts(),
        "savings": run.table(CAPACITY_SAVINGS).to_dicts(),
        "max_qps": run.table(MAX_QPS).to_dicts(),
        "frontier": run.table(CAPACITY_FRONTIER).to_dicts(),
        "headroom": run.table(CAPACITY_HEADROOM).to_dicts(),
        "routing": run.table(ROUTING).to_dicts(),
    }


def planner_rows(run: RunData) -> list[dict[str, Any]]:
    """The planner's first questions, one row per GPU kind: its cheapest fleet (nodes, policy,
    router), USD per day and per million requests at the planned mean load, one node's maximum
    sustainable QPS at the SLO (best static, the load curve), and the headroom (traffic growth
    before that fleet needs one more node). ``cheapest`` marks the row the plan recommends."""
    cap, mq, room = run.table(CAPACITY), run.table(MAX_QPS), run.table(CAPACITY_HEADROOM)
    if cap.is_empty():
        return []
    out = []
    for (gpu,) in cap.select("gpu").unique(maintain_order=True).iter_rows():
        ok = cap.filter((pl.col("gpu") == gpu) & pl.col("nodes").is_not_null())
        row: dict[str, Any] = {"gpu": gpu, "nodes": None, "policy": None, "router": None,
                               "usd_per_day": None, "usd_per_million_requests": None}  # fmt: skip
        if ok.height:
            best = ok.sort(["nodes", "p99_ms"]).row(0, named=True)
            row |= {k: best[k] for k in ("nodes", "policy", "router", "p99_ms", "usd_per_day",
                                         "usd_per_million_requests")}  # fmt: skip
        q = mq.filter((pl.col("gpu") == gpu) & (pl.col("policy") == BASELINE)) if mq.height else mq
        row["max_qps_per_gpu"] = _num(q["max_qps"][0]) if q.height else None
        row["max_qps_lower_bound"] = bool(q["lower_bound"][0]) if q.height else None
        h = room.filter(pl.col("gpu") == gpu) if room.height else room
        row["headroom"] = _num(h["growth_lo"][0]) if h.height else None
        row["headroom_fails_at"] = _num(h["growth_hi"][0]) if h.height else None
        out.append(row)
    priced = [r for r in out if r["usd_per_day"] is not None]
    cheapest = min(priced, key=lambda r: (r["usd_per_day"], r["nodes"]), default=None)
    for r in out:
        r["cheapest"] = r is cheapest
    return out


def headroom_text(row: dict[str, Any]) -> str:
    """A :func:`planner_rows` row's headroom as every output shows it (the report's planner
    table, the CLI's headline table): the search's bracket, the growth that passed and the
    one that failed, since "+0%" alone reads as none where the fleet may take up to the next
    step; ``≥`` when nothing failed up to the largest growth tried."""
    if row["headroom"] is None:
        return "–"
    if row["headroom_fails_at"] is None:
        return f"≥ +{row['headroom']:.0%}"
    return f"+{row['headroom']:.0%} (fails at +{row['headroom_fails_at']:.0%})"


def build_summary(run: RunData) -> dict[str, Any]:
    """The summary.json object (key order is part of the schema)."""
    m = run.meta
    timings = run.table(TIMINGS)
    versions = run.table(VERSIONS)
    out: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "trace": {"path": m.get("trace_path"), **stats_dict(run)},
        "setup": {
            k: m.get(k)
            for k in (
                "gpu",
                "model",
                "latency",
                "slo_ms",
                "window_s",
                "windows",
                "pool_bytes",
                "pool_source",
                "footprint_bytes",
            )
        },  # fmt: skip
    }
    out["capacity"] = capacity_summary(run)
    out.update(headline(run))
    out["controller"] = controller_summary(run)
    out["sensitivity"] = sensitivity_summary(run)
    out["regimes"] = regimes_summary(run)
    out["verdict"] = verdict(run)
    out["timings_s"] = (
        {r["stage"]: r["seconds"] for r in timings.iter_rows(named=True)}
        if not timings.is_empty()
        else {}
    )
    out["stages_cached"] = (
        [r["stage"] for r in timings.iter_rows(named=True) if r["cached"]]
        if not timings.is_empty()
        else []
    )
    out["versions"] = (
        {r["package"]: r["version"] for r in versions.iter_rows(named=True)}
        if not versions.is_empty()
        else {}
    )
    out["seed"] = m.get("seed")
    out["trace_sha256"] = m.get("trace_sha256")
    return out
