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

from helm_plan.report.controller import controller_summary
from helm_plan.report.page import flat_tol
from helm_plan.report.store import RunData
from helm_plan.report.tables import (
    ADAPTIVITY,
    CAPACITY,
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
SUMMARY_SCHEMA_VERSION = "1.0"

OVERLOAD_ATTAINMENT = 0.99
"""Below this SLO attainment under every policy, the node is overloaded (a P99 SLO needs 99%)."""

BASELINE = "best-static"
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


FITS_NOTE = "the trace's whole EMB+KV footprint"
"""How the footprint-fits note (sim.context) begins."""


def capacity_bullets(run: RunData) -> list[str]:
    """The first screen: the footprint-fits note (the CLI's words) and the capacity answer."""
    m = run.meta
    out = [n[0].upper() + n[1:] + "." for n in m.get("notes", []) if n.startswith(FITS_NOTE)]
    if m.get("footprint_fits") and m.get("oracle_time_saved_s") is not None:
        out.append(f"The oracle ran its coarse grid only (no Optuna trials): about "
                   f"{m['oracle_time_saved_s']:.1f} s saved on an answer known up front.")  # fmt: skip
    return out + list(m.get("capacity_answer", []))


def capacity_summary(run: RunData) -> dict[str, Any] | None:
    """summary.json's ``capacity`` object (None when planning was skipped)."""
    cap = run.table(CAPACITY)
    if cap.is_empty():
        return None
    m = run.meta
    return {
        "answer": list(m.get("capacity_answer", [])),
        "scaling": m.get("capacity_scaling"),
        "operating_nodes": m.get("operating_nodes"),
        "per_node_factor": m.get("per_node_factor"),
        "rows": cap.to_dicts(),
        "savings": run.table(CAPACITY_SAVINGS).to_dicts(),
        "max_qps": run.table(MAX_QPS).to_dicts(),
        "routing": run.table(ROUTING).to_dicts(),
    }


def verdict(run: RunData) -> list[str]:
    """Plain-language findings, most important first."""
    h = headline(run)
    s = sensitivity_summary(run)
    out: list[str] = capacity_bullets(run)
    bs, orc, voa = h["best_static"], h["oracle"], h["value_of_adaptivity"]
    pols = {p["name"]: p for p in h["policies"]}
    ref = bs["p99_ms"]
    atts = [p["slo_attainment"] for p in h["policies"] if p.get("slo_attainment") is not None]
    slo = run.meta.get("slo_ms")
    if atts and max(atts) < OVERLOAD_ATTAINMENT:
        out.append(
            f"No policy meets the SLO at this load: the best serves {_pct(max(atts))} of requests "
            f"within {slo} ms (a P99 SLO needs {OVERLOAD_ATTAINMENT:.0%}). The node is overloaded; "
            "the answer is more capacity, not a different split."
        )
    ext = []
    for name, cache in (("emb-max", "EMB"), ("kv-max", "KV")):
        p99 = pols.get(name, {}).get("p99_ms")
        if ref and p99 is not None:
            ext.append(f"the whole pool to {cache} gives a P99 {_pct(p99 / ref - 1.0)} above it")
    ext_txt = f" (against the best static split, {' and '.join(ext)})" if ext else ""
    if s["split_matters"] is False:
        out.append(
            "The EMB/KV split hardly matters for this workload and profile: even giving the whole "
            f"pool to one cache stays within {flat_tol(run):.0%} of the best static P99{ext_txt}. "
            "Any reasonable ratio is a valid plan; spend effort elsewhere."
        )
    elif s["split_matters"]:
        out.append(f"The EMB/KV split matters{ext_txt}.")
    if bs["ratio"] is not None and bs["p99_ms"] is not None:
        out.append(
            f"Best static split: r = {bs['ratio']:.2f} (EMB share of the pool), P99 "
            f"{bs['p99_ms']:.2f} ms, SLO attainment {_pct(bs['slo_attainment'])}."
        )
    if orc["ratio_min"] is not None:
        moved = orc["ratio_max"] - orc["ratio_min"]
        out.append(
            f"The per-window optimum r* ranges over [{orc['ratio_min']:.2f}, "
            f"{orc['ratio_max']:.2f}] (moves by {moved:.2f})"
            + (
                f"; in the median window any r within a band {s['median_flat_width']:.2f} wide "
                f"is within {flat_tol(run):.0%} of the best P99."
                if s["median_flat_width"] is not None
                else "."
            )
        )
    red, lo, hi = voa["p99_reduction"], voa["ci_low"], voa["ci_high"]
    if red is not None:
        ci = f"{_pct(lo)} to {_pct(hi)}" if lo is not None else "n/a"
        conf = f"{voa['confidence']:.0%} " if voa["confidence"] else ""
        if lo is not None and lo > 0:
            out.append(
                f"Adapting the split per window (throttled refill) cuts P99 by {_pct(red)} "
                f"against the best static split ({conf}CI {ci})."
            )
        elif hi is not None and hi < 0:
            out.append(
                f"Adapting the split per window makes P99 worse by {_pct(-red)} ({conf}CI {ci}): "
                "reallocation costs more than it gains here; keep a static split."
            )
        else:
            out.append(
                f"Adapting the split per window changes P99 by {_pct(red)}, but the {conf}CI "
                f"({ci}) includes zero: no reliable gain over the best static split."
            )
    naive, ad = pols.get("naive-adaptive"), pols.get(ADAPTIVE)
    if naive and ad and naive["p99_ms"] and ad["p99_ms"]:
        gap = naive["p99_ms"] / ad["p99_ms"] - 1.0
        how = "matters" if abs(gap) > flat_tol(run) else "hardly matters here"
        out.append(
            f"Refill mode {how}: with the oracle schedule, eager (blocking) refill gives P99 "
            f"{naive['p99_ms']:.3f} ms, throttled background refill {ad['p99_ms']:.3f} ms."
        )
    return out


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
