"""A plan's answer: the capacity table, savings with intervals, load curves, and plan.json.

**Savings.** Each row's saving is measured against the baseline (best static
behind ``jsq``) on the same GPU: nodes, and USD per day at the row's price.
Two comparisons are reported per GPU with a confidence interval:

- *adaptive*: per router, the best adaptive policy (every planned policy
  but the static ones) against best static;
- *routing*: per policy, ``helm`` against the best other router.

The interval is a paired window bootstrap (whole windows resampled, both
sides alike). A replicate re-decides pass/fail at every fleet size the
search evaluated from the per-window counts, reading "P99 ≤ T and attainment
≥ A" as "a share ≥ max(A, 0.99) of requests within T" (the two differ by at
most one order statistic), and takes the smallest evaluated size above which
every evaluated size passes (one past the largest when none does: a bound).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from helm_plan.plan.config import BASELINE_POLICY, PlanConfig
from helm_plan.plan.frontier import Headroom, cheapest, frontier_table, headroom_table
from helm_plan.plan.gpus import GpuSetup
from helm_plan.plan.loadcurve import LoadCurve
from helm_plan.plan.scale import Scaling
from helm_plan.plan.search import Search, cost
from helm_plan.plan.verdict import Facts, fleet_split_sentence, split_sentence
from helm_plan.policies import is_static
from helm_plan.sim import NodeConfig
from helm_plan.sim.context import NodeContext

SCHEMA_VERSION = 1
"""plan.json schema version (docs/plan-json.md)."""


@dataclass(frozen=True, eq=False)
class Combo:
    """One GPU × policy × router: its search and each evaluated size's window counts."""

    gpu: int
    policy: str
    router: str
    search: Search
    counts: dict[int, tuple[np.ndarray, np.ndarray, float]]
    """nodes -> (requests per window, within-SLO per window, fleet best-static r or NaN)."""


@dataclass(frozen=True, eq=False)
class PlanResult:
    """What a plan found (see the module docstring; plan_doc for the JSON)."""

    config: PlanConfig
    slo_ms: float
    """The SLO planned for, ms."""
    scaling: Scaling
    """How the trace was scaled to the planned traffic."""
    gpus: pl.DataFrame
    """gpu, usd_per_hour, pool_bytes, footprint_bytes, fits (footprint within one pool)."""
    capacity: pl.DataFrame
    """One row per GPU × policy × router (columns in docs/plan-json.md)."""
    evaluated: pl.DataFrame
    """gpu, policy, router, nodes, passes, p99_ms, slo_attainment: every size simulated."""
    savings: pl.DataFrame
    """gpu, kind, scope, a, b, nodes_a, nodes_b, nodes_saved, lo, hi, usd_saved_per_day."""
    load_curve: pl.DataFrame
    """gpu, policy, factor, qps, p99_ms, slo_attainment, passes: one node."""
    max_qps: pl.DataFrame
    """gpu, policy, max_qps, lower_bound: one node's maximum QPS at the SLO (lower_bound: the
    curve stopped at load_max_requests while still passing)."""
    frontier: pl.DataFrame
    """Each GPU's cheapest combination at N − 1 .. N + 2 nodes (:mod:`.frontier`)."""
    headroom: pl.DataFrame
    """Each GPU's cheapest fleet: traffic growth until it needs N + 1 (:mod:`.frontier`)."""
    answer: tuple[str, ...]
    """Plain sentences: the cheapest fleet, what adaptivity and routing save, caveats."""


def _replicate_nodes(combo: Combo, mult: np.ndarray, need: float) -> np.ndarray:
    """Minimal passing size per bootstrap replicate (rows of ``mult``)."""
    ns = sorted(combo.counts)
    size = np.stack([combo.counts[n][0] for n in ns]).astype(float)  # sizes × windows
    met = np.stack([combo.counts[n][1] for n in ns]).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (mult @ met.T) >= need * (mult @ size.T) - 1e-9  # replicates × sizes
    # smallest size from which every larger evaluated size passes
    tail_ok = np.flip(np.cumprod(np.flip(ok, axis=1), axis=1), axis=1).astype(bool)
    arr = np.asarray(ns)
    first = np.where(tail_ok.any(axis=1), np.argmax(tail_ok, axis=1), len(ns))
    return np.where(first < len(ns), arr[np.minimum(first, len(ns) - 1)], arr[-1] + 1)


def nodes_saved_ci(
    a: Combo, b: Combo, cfg: PlanConfig, n_windows: int
) -> tuple[float, float]:  # fmt: skip
    """Interval of N_b − N_a (``a`` saves nodes when positive), paired window bootstrap."""
    mask = sum(c.counts[n][0] for c in (a, b) for n in c.counts) > 0
    w = np.flatnonzero(mask)
    if len(w) == 0 or not a.counts or not b.counts:
        return math.nan, math.nan
    rng = np.random.default_rng(cfg.seed)
    picks = rng.integers(0, len(w), (cfg.n_boot, len(w)))
    mult = np.zeros((cfg.n_boot, n_windows))
    np.add.at(mult, (np.arange(cfg.n_boot)[:, None], w[picks]), 1.0)
    need = max(cfg.attainment, 0.99)
    diff = _replicate_nodes(b, mult, need) - _replicate_nodes(a, mult, need)
    alpha = (1 - cfg.ci_level) / 2
    lo, hi = np.quantile(diff, [alpha, 1 - alpha])
    return float(lo), float(hi)


def build_result(
    cfg: PlanConfig, ncfg: NodeConfig, scaling: Scaling, setups: list[GpuSetup],
    ctxs: list[NodeContext], curves: list[LoadCurve], combos: list[Combo],
    policies: tuple[str, ...], routers: tuple[str, ...], room: Sequence[Headroom] = (),
) -> PlanResult:  # fmt: skip
    """Tables, savings and sentences from the searches."""
    qps = scaling.qps_after
    names = [s.gpu.name for s in setups]
    by = {(c.gpu, c.policy, c.router): c for c in combos}
    n_w = ctxs[0].n_windows(ncfg.window_s)
    rows, evald = [], []
    for c in combos:
        s, price = c.search, setups[c.gpu].price_per_hour
        n = s.nodes
        at, below = (s.at.get(n), s.at.get(n - 1)) if n is not None else (None, None)
        base = by[(c.gpu, BASELINE_POLICY, cfg.baseline_router)].search.nodes
        cs = cost(n, price, qps) if n is not None else None
        saved = base - n if (n is not None and base is not None) else None
        rows.append({
            "gpu": names[c.gpu], "policy": c.policy, "router": c.router,
            "baseline": (c.policy, c.router) == (BASELINE_POLICY, cfg.baseline_router),
            "nodes": n, "p99_ms": at.p99_ms if at else None,
            "slo_attainment": at.slo_attainment if at else None,
            "p99_ms_one_less": below.p99_ms if below else None,
            "best_static_r": c.counts[n][2] if n is not None and c.counts[n][2] == c.counts[n][2]
            else None,
            "non_monotone": s.non_monotone, "sizes_evaluated": len(s.evaluated),
            "usd_per_gpu_hour": price,
            "gpu_hours_per_day": cs.gpu_hours_per_day if cs else None,
            "usd_per_day": cs.usd_per_hour * 24 if cs else None,
            "usd_per_million_requests": cs.usd_per_million_requests if cs else None,
            "nodes_saved": saved,
            "usd_saved_per_day": saved * price * 24 if saved is not None else None,
        })  # fmt: skip
        evald += [{"gpu": names[c.gpu], "policy": c.policy, "router": c.router} | asdict(p)
                  for p in s.evaluated]  # fmt: skip
    cap = pl.DataFrame(rows, infer_schema_length=None)
    savings = _savings(cfg, names, by, setups, policies, routers, n_w)
    gpus = pl.DataFrame([{"gpu": names[i], "usd_per_hour": s.price_per_hour,
                          "pool_bytes": ctxs[i].pool_bytes,
                          "footprint_bytes": ctxs[i].footprint_bytes,
                          "fits": ctxs[i].footprint_bytes <= ctxs[i].pool_bytes}
                         for i, s in enumerate(setups)])  # fmt: skip
    lc = pl.concat([c.points.with_columns(pl.lit(names[i]).alias("gpu")) for i, c in
                    enumerate(curves)]).select("gpu", pl.exclude("gpu"))  # fmt: skip
    mq = pl.DataFrame([{"gpu": names[i], "policy": p, "max_qps": q,
                        "lower_bound": c.capped.get(p, False)}
                       for i, c in enumerate(curves) for p, q in c.max_qps.items()])  # fmt: skip
    ev = pl.DataFrame(evald, infer_schema_length=None)
    chosen = {}
    for name in names:
        best = cheapest([r for r in rows if r["gpu"] == name])
        if best is not None:
            chosen[name] = (best["policy"], best["router"], best["nodes"])
    points = {(names[c.gpu], c.policy, c.router): c.search.at for c in combos}
    prices = {names[i]: s.price_per_hour for i, s in enumerate(setups)}
    front = frontier_table(points, chosen, prices, qps)
    room_t = headroom_table(room, scaling.peak_qps_after)
    res = PlanResult(cfg, ncfg.slo_ms, scaling, gpus, cap, ev, savings, lc, mq, front, room_t, ())
    return PlanResult(**{**res.__dict__, "answer": tuple(answer_sentences(res))})


def _savings(cfg, names, by, setups, policies, routers, n_w) -> pl.DataFrame:
    out = []

    def add(gi, kind, scope, a, b, ca, cb):
        na, nb = ca.search.nodes, cb.search.nodes
        saved = nb - na if na is not None and nb is not None else None
        lo, hi = nodes_saved_ci(ca, cb, cfg, n_w)
        price = setups[gi].price_per_hour
        out.append({"gpu": names[gi], "kind": kind, "scope": scope, "a": a, "b": b,
                    "nodes_a": na, "nodes_b": nb, "nodes_saved": saved, "lo": lo, "hi": hi,
                    "usd_saved_per_day": saved * price * 24 if saved is not None else None})  # fmt: skip

    def best(cands):
        ok = [c for c in cands if c.search.nodes is not None]
        if not ok:
            return None
        return min(ok, key=lambda c: (c.search.nodes, c.search.at[c.search.nodes].p99_ms))

    for gi in range(len(names)):
        adaptive = [p for p in policies if not is_static(p)]
        if BASELINE_POLICY in policies and adaptive:
            for r in routers:
                a = best([by[(gi, p, r)] for p in adaptive])
                if a is not None:
                    add(gi, "adaptive", r, a.policy, BASELINE_POLICY, a,
                        by[(gi, BASELINE_POLICY, r)])  # fmt: skip
        others = [r for r in routers if r != "helm"]
        if "helm" in routers and others:
            for p in policies:
                b = best([by[(gi, p, r)] for r in others])
                if b is not None:
                    add(gi, "routing", p, "helm", b.router, by[(gi, p, "helm")], b)
    cols = {"gpu": pl.String, "kind": pl.String, "scope": pl.String, "a": pl.String,
            "b": pl.String, "nodes_a": pl.Int64, "nodes_b": pl.Int64, "nodes_saved": pl.Int64,
            "lo": pl.Float64, "hi": pl.Float64, "usd_saved_per_day": pl.Float64}  # fmt: skip
    return pl.DataFrame(out, schema=cols)


def traffic_sentence(s: Scaling, window_s: float) -> str:
    """The traffic model, as the first screen states it."""
    asked = ""
    if s.peak_qps_target is not None:
        asked = (f" (asked {s.peak_qps_target:,.0f}: "
                 f"{s.peak_qps_after / s.peak_qps_target - 1:+.1%})")  # fmt: skip
    head = (f"Planned traffic: {s.peak_qps_after:,.0f} req/s in the busiest {window_s:g} s "
            f"window{asked}, {s.qps_after:,.0f} req/s mean; ")  # fmt: skip
    if s.factor == 1.0 and s.peak_qps_target is None:
        # nothing was scaled; the model still says how the headroom's growth is planned
        return (f"{head}the trace as given (x1); the headroom grows it by {s.method}: "
                f"{s.assumption}.")  # fmt: skip
    return f"{head}the trace scaled x{s.factor:.3g} by {s.method}: {s.assumption}."


def _headroom_text(res: PlanResult, gpu: str) -> str:
    h = res.headroom.filter(pl.col("gpu") == gpu)
    if h.is_empty():
        return ""
    r = h.row(0, named=True)
    head = "; headroom"
    if r["policy"] == BASELINE_POLICY:  # held at the split it was planned with (plan.frontier)
        c = res.capacity.filter((pl.col("gpu") == gpu) & (pl.col("policy") == r["policy"])
                                & (pl.col("router") == r["router"]))  # fmt: skip
        ratio = c["best_static_r"][0] if c.height else None
        if ratio is not None and ratio == ratio:
            head += f" at r = {ratio:g}"
    if r["capped"]:
        return f"{head}: still holds at +{r['growth_lo']:.0%} traffic"
    return (f"{head}: +{r['growth_lo']:.0%} traffic before it needs one more node "
            f"(fails at +{r['growth_hi']:.0%})")  # fmt: skip


def answer_sentences(res: PlanResult) -> list[str]:
    """The plan in plain words (the CLI prints them; the report's first screen shows them).

    Judgements go through :func:`helm_plan.plan.verdict.verdicts` (the one place they are
    made); this adds the traffic, the prices and the savings.
    """
    cfg, s = res.config, res.scaling
    window_s = cfg.node.window_s
    slo = (f"P99 <= {res.slo_ms:g} ms for {cfg.attainment:.1%} of requests"
           + (" (the model's default SLO)" if cfg.slo_ms is None else ""))  # fmt: skip
    out = [traffic_sentence(s, window_s) + f" Target: {slo}."]
    ok = res.capacity.filter(pl.col("nodes").is_not_null())
    if ok.height == 0:
        out.append(f"No combination meets the SLO within {cfg.max_nodes} nodes per GPU kind: "
                   "the traffic overloads every fleet considered; raise --max-nodes or relax "
                   "--slo-ms.")  # fmt: skip
        return out
    cheap = ok.sort(["usd_per_day", "nodes", "p99_ms"]).row(0, named=True)
    out.append(f"Cheapest: {cheap['nodes']} x {cheap['gpu']} with {cheap['policy']} behind "
               f"{cheap['router']}: ${cheap['usd_per_day']:,.0f}/day, "
               f"${cheap['usd_per_million_requests']:.3g} per million requests at the planned "
               f"mean of {s.qps_after:,.0f} req/s (the fleet is sized for the busiest window, "
               f"{s.peak_qps_after:,.0f} req/s){_headroom_text(res, cheap['gpu'])}.")  # fmt: skip
    for g in res.gpus.iter_rows(named=True):
        mine = res.capacity.filter(pl.col("gpu") == g["gpu"])
        base = mine.filter(pl.col("router") == cfg.baseline_router)
        split_nodes = {r["policy"]: r["nodes"] for r in base.iter_rows(named=True)
                       if r["policy"] in ("best-static", "emb-max", "kv-max")}  # fmt: skip
        facts = Facts(slo_ms=res.slo_ms, attainment=cfg.attainment, gpu=g["gpu"],
                      fits=bool(g["fits"]), split_nodes=split_nodes,
                      split_router=cfg.baseline_router)  # fmt: skip
        said = [x for x in (fleet_split_sentence(facts), split_sentence(facts)) if x]
        if said:
            first = said[0][0].lower() + said[0][1:]
            out.append(f"On {g['gpu']}: " + " ".join([first, *said[1:]]))
    out += _savings_sentences(res)
    if ok.filter(pl.col("non_monotone")).height:
        out.append("Some rows are non-monotone in fleet size (a larger fleet failed): see "
                   "'non_monotone' and the evaluated sizes.")  # fmt: skip
    return out


def _savings_sentences(res: PlanResult) -> list[str]:
    """One sentence per saving with an effect; every null saving (0 nodes, CI 0 to 0) in one."""
    out, nulls = [], []
    for r in res.savings.iter_rows(named=True):
        if r["nodes_saved"] is None:
            continue
        what = (f"{r['a']} over {r['b']} behind {r['scope']}" if r["kind"] == "adaptive"
                else f"helm routing over {r['b']} with {r['scope']}")  # fmt: skip
        if r["nodes_saved"] == 0 and r["lo"] == 0 and r["hi"] == 0:
            nulls.append(r)
            continue
        ci = (f" ({res.config.ci_level:.0%} CI {r['lo']:+.0f} to {r['hi']:+.0f})"
              if r["lo"] == r["lo"] else "")  # fmt: skip
        n = r["nodes_saved"]
        out.append(f"{r['gpu']}: {what} saves {n:+d} node{'' if abs(n) == 1 else 's'}{ci}.")
    if nulls:
        kinds = sorted({"adaptivity" if r["kind"] == "adaptive" else "helm routing"
                        for r in nulls})  # fmt: skip
        gpus = ", ".join(dict.fromkeys(r["gpu"] for r in nulls))
        which = "the other" if out else "all"
        out.append(f"No saving from {' or '.join(kinds)} in {which} {len(nulls)} comparisons "
                   f"on {gpus}: each saves 0 nodes ({res.config.ci_level:.0%} CI 0 to 0).")  # fmt: skip
    return out


def plan_doc(res: PlanResult) -> dict[str, Any]:
    """plan.json (docs/plan-json.md): the config, scaling, tables and sentences."""
    cfg = asdict(res.config)
    return {
        "schema_version": SCHEMA_VERSION,
        "config": cfg,
        "slo_ms": res.slo_ms,
        "scaling": asdict(res.scaling) | {"assumption": res.scaling.assumption},
        "gpus": res.gpus.to_dicts(),
        "capacity": res.capacity.to_dicts(),
        "savings": res.savings.to_dicts(),
        "load_curve": res.load_curve.to_dicts(),
        "max_qps": res.max_qps.to_dicts(),
        "frontier": res.frontier.to_dicts(),
        "headroom": res.headroom.to_dicts(),
        "evaluated": res.evaluated.to_dicts(),
        "answer": list(res.answer),
    }
