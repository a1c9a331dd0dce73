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
from helm_plan.report.controller import controller_summary
from helm_plan.report.store import RunData

SUMMARY_SCHEMA = "helm-plan/summary"
SUMMARY_SCHEMA_VERSION = "1.0"

FLAT_TOLERANCE = 0.02
"""The flatness tolerance of runs whose store predates ``meta['flat_tol']`` (the oracle's default)."""


def flat_tol(run: RunData) -> float:
    """The relative P99 tolerance the run's oracle used for its flat bands."""
    return float(run.meta.get("flat_tol", FLAT_TOLERANCE))


"""Relative P99 tolerance that defines the near-optimal (flat) band and 'hardly matters'."""

BASELINE = "best-static"
ADAPTIVE = "adaptive"


def _num(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def _policy_rows(run: RunData) -> list[dict[str, Any]]:
    df = run.table("policies")
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
    df = run.table("stats")
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
    lab = run.table("labels")
    ad = run.table("adaptivity")
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
    lab = run.table("labels")
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
        out.append(f"The oracle ran its coarse grid only (no Optuna trials): about "
                   f"{m['oracle_time_saved_s']:.1f} s saved on an answer known up front.")  # fmt: skip
    return out


def facts(run: RunData) -> Facts:
    """What the verdicts read, from the run store (plan.verdict)."""
    m = run.meta
    h = headline(run)
    pols = {p["name"]: p for p in h["policies"]}
    op = m.get("operating") or {}
    bs = h["best_static"]
    node = pols.get("fleet-static") if op else pols.get(BASELINE)
    spread = sensitivity_summary(run)["extreme_split_penalty"]
    ref = (pols.get(BASELINE) or {}).get("p99_ms")
    ext = tuple((pols.get(k) or {}).get("p99_ms") for k in ("emb-max", "kv-max"))
    extremes = tuple(x / ref - 1.0 if x is not None else None for x in ext) if ref else None
    band = (bs["flat_lo"], bs["flat_hi"]) if bs["flat_lo"] is not None else None
    ad = h["value_of_adaptivity"]
    naive, adaptive = pols.get("naive-adaptive") or {}, pols.get(ADAPTIVE) or {}
    fp, pool = m.get("footprint_bytes"), m.get("pool_bytes")
    gpus = run.table("capacity_gpus")
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
        spread=spread, extremes=extremes, ratio=bs["ratio"], robust_ratio=bs["robust_ratio"], band=band,
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
    cap = run.table("capacity")
    if cap.is_empty():
        return None
    m = run.meta
    return {
        "answer": list(m.get("capacity_answer", [])),
        "scaling": m.get("capacity_scaling"),
        "operating_nodes": m.get("operating_nodes"),
        "operating": m.get("operating"),
        "rows": cap.to_dicts(),
        "savings": run.table("capacity_savings").to_dicts(),
        "max_qps": run.table("max_qps").to_dicts(),
        "frontier": run.table("capacity_frontier").to_dicts(),
        "headroom": run.table("capacity_headroom").to_dicts(),
        "routing": run.table("routing").to_dicts(),
    }


def build_summary(run: RunData) -> dict[str, Any]:
    """The summary.json object (key order is part of the schema)."""
    m = run.meta
    timings = run.table("timings")
    versions = run.table("versions")
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
