"""The single-node load curve: P99 and SLO attainment against offered load, per policy.

The MLPerf "server scenario" figure for one GPU: the trace is scaled to each
offered load (:mod:`helm_plan.plan.scale`), one node serves it under each
policy, and the largest load that still meets "P99 ≤ SLO and attainment ≥ A"
is the node's **maximum sustainable QPS** for that policy, found by
bisection on the scale factor between a passing and a failing load. Each
point is an independent run mapped over the executor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from helm_plan.arrays import TraceArrays
from helm_plan.cluster import ClusterConfig, simulate_cluster
from helm_plan.config import require_positive, require_range
from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.latency.model import LatencyModel
from helm_plan.oracle import OracleConfig
from helm_plan.plan.dense import scale_arrays
from helm_plan.plan.evaluate import meets
from helm_plan.plan.scale import MAX_FACTOR
from helm_plan.profiles import GpuProfile, LatencyProfile, ModelProfile
from helm_plan.sim import NodeConfig, prepare_context

LOAD_CURVE_ROUTER = "round-robin"
"""The router of the load curve's one-node fleets (with one node every router sends it every
request; round-robin decides fastest)."""


@dataclass(frozen=True)
class LoadSetup:
    """One node and one trace, to be served at scaled loads."""

    trace: TraceArrays
    """The trace at its own load (dense arrays; each load point scales them)."""
    gpu: GpuProfile
    """GPU profile."""
    model: ModelProfile
    """Model profile."""
    latency: LatencyModel
    """Service-time model."""
    latency_profile: LatencyProfile | None
    """Its profile (provenance)."""
    pool_bytes: int
    """The node's cache pool, bytes (fixed across loads: the GPU does not grow)."""
    node: NodeConfig
    """How the node serves."""
    oracle: OracleConfig
    """How best static is searched at each load."""
    scale_by: str = "users"
    """users or time (see helm_plan.plan.scale)."""
    attainment: float = 0.99
    """Share of requests that must meet the SLO."""
    seed: int = 0
    """Candidate draws and the fractional clone."""
    max_requests: int = 1_000_000
    """Largest scaled trace a load point simulates (users scaling grows the trace with the
    load); a policy still passing there gets a lower bound for its maximum QPS."""


@dataclass(frozen=True)
class LoadPoint:
    """One policy at one offered load."""

    policy: str
    """Policy spec."""
    factor: float
    """Scale factor applied to the trace."""
    qps: float
    """Offered mean arrival rate, requests per second."""
    p99_ms: float
    """Whole-trace P99 (measured windows), ms."""
    slo_attainment: float
    """Share of requests within the SLO."""
    passes: bool
    """P99 ≤ SLO and attainment ≥ the target."""
    ratio: float = float("nan")
    """best-static: the static r that answered (NaN for other policies)."""


def _context(s: LoadSetup, factor: float):
    t, info = scale_arrays(s.trace, factor, by=s.scale_by, window_s=s.node.window_s, seed=s.seed)
    ctx = prepare_context(
        t, s.gpu, s.model, s.latency, pool_bytes=s.pool_bytes,
        latency_profile=s.latency_profile,
    )  # fmt: skip
    return ctx, info


def run_point(shared: LoadSetup, item: tuple[str, float] | tuple[str, float, float]) -> LoadPoint:
    """Serve the trace scaled by ``factor`` under ``policy`` on one node.

    The node is a one-node cluster, so ``best-static`` answers as at every
    size of the plan (:func:`helm_plan.plan.evaluate.meets`: is there an r
    that passes, tried nearest ``hint`` first); with one node every router
    sends everything to it.
    """
    spec, factor, *rest = item
    s = shared
    ctx, info = _context(s, factor)
    cfg = ClusterConfig(nodes=1, router=LOAD_CURVE_ROUTER, node=s.node, seed=s.seed)
    ev = meets(ctx, cfg, spec, s.oracle, s.attainment, hint=rest[0] if rest else 0.5)
    return LoadPoint(spec, factor, info.qps_after, ev.p99_ms, ev.slo_attainment, ev.passes,
                     ev.ratio)  # fmt: skip


def _top(pts: list[LoadPoint], policy: str) -> LoadPoint:
    """The policy's point at the highest load evaluated."""
    return max((x for x in pts if x.policy == policy), key=lambda x: x.factor)


def _hint(pts: list[LoadPoint], policy: str, factor: float) -> float:
    """The r that passed at ``factor`` (best-static), else an even split."""
    for x in pts:
        if x.policy == policy and x.factor == factor and x.passes and x.ratio == x.ratio:
            return x.ratio
    return 0.5


def start_factor(s: LoadSetup, target_utilisation: float = 0.8) -> float:
    """A first load factor: where one node's busiest window would be ``target_utilisation`` busy.

    Utilisation is measured once at factor 1 with an even split (work per
    request = service time / batch size, over ``slots`` streams); load scales it
    about linearly, which is all a starting point needs. The node is served as the
    load points serve it, a one-node fleet (the same figures as
    :func:`helm_plan.sim.simulate_node`, tested in ``tests/cluster``): a plan's first
    simulation then compiles the cluster kernel its load points and fleets run, not the
    node replay as well.
    """
    ctx, _ = _context(s, 1.0)
    res = simulate_cluster(ctx, 0.5, ClusterConfig(nodes=1, router=LOAD_CURVE_ROUTER,
                                                   node=s.node, seed=s.seed))  # fmt: skip
    work = res.service_s / np.maximum(res.batch_size, 1)
    per_w = np.bincount(res.window_idx, weights=work)
    ts = s.trace.ts_s
    span = min(s.node.window_s, float(ts[-1] - ts[0])) if len(ts) > 1 else s.node.window_s
    peak = float(per_w.max()) / (span * s.node.slots) if len(per_w) and span > 0 else 0.0
    return min(target_utilisation / peak, MAX_FACTOR) if peak > 0 else 1.0


@dataclass(frozen=True)
class LoadCurve:
    """P99 and attainment against offered load, and each policy's maximum sustainable QPS."""

    points: pl.DataFrame
    """policy, factor, qps, p99_ms, slo_attainment, passes (one row per load evaluated)."""
    max_qps: dict[str, float]
    """Largest offered QPS that passes, per policy (NaN when even the lowest load fails)."""
    base_qps: float
    """The trace's own mean QPS (factor 1)."""
    capped: dict[str, bool] = dataclasses.field(default_factory=dict)
    """True where max_qps is a lower bound (the policy passed at the largest load allowed)."""
    ratio_at_max: dict[str, float] = dataclasses.field(default_factory=dict)
    """best-static: the r that passed at the maximum QPS (NaN elsewhere)."""


def load_curve(
    setup: LoadSetup,
    policies: list[str],
    factors: list[float],
    *,
    refine_steps: int = 6,
    max_widen: int = 10,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> LoadCurve:
    """Evaluate ``factors`` for every policy, widen to a pass/fail edge, then bisect it.

    ``max_widen`` bounds the doublings (halvings) that look for a failing
    (passing) load beyond ``factors``; ``refine_steps`` bisections (geometric
    midpoints) then narrow each policy's edge.
    """
    return load_curves([setup], policies, [factors], refine_steps=refine_steps,
                       max_widen=max_widen, executor=executor, progress=progress)[0]  # fmt: skip


def _point_of(shared: Sequence[LoadSetup], item: tuple) -> LoadPoint:
    """:func:`run_point` on setup ``item[0]`` of ``shared`` (an executor task)."""
    return run_point(shared[item[0]], item[1:])


def load_curves(
    setups: Sequence[LoadSetup],
    policies: list[str],
    factors: Sequence[list[float]],
    *,
    refine_steps: int = 6,
    max_widen: int = 10,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> list[LoadCurve]:
    """:func:`load_curve` of every setup (``factors[i]`` for ``setups[i]``), each step of all of
    them in one map: a best-static point that fails runs its whole static search (~14
    simulations against one of another policy), so a step of one setup keeps one worker busy
    while the others wait; with every GPU's points in one map they share the workers. Each
    curve is the one :func:`load_curve` gives for its setup alone (a step's points depend on
    that setup's earlier points only)."""
    for setup in setups:
        require_range("attainment", setup.attainment, 0.0, 1.0)
    for fs in factors:
        for f in fs:
            require_positive("load factor", f)
    ex = executor or SerialExecutor()
    shared = tuple(setups)  # published element by element: each setup reaches a worker once
    caps, initial = [], []
    for setup, fs in zip(setups, factors, strict=True):
        n = setup.trace.n_requests
        f_cap = setup.max_requests / n if setup.scale_by == "users" and n else MAX_FACTOR
        f_cap = min(f_cap, MAX_FACTOR)
        clamped = sorted({min(float(f), f_cap) for f in fs})
        if len(clamped) < len(set(fs)):  # the cap swallowed points: spread them below it
            clamped = sorted({*clamped, f_cap / 2, f_cap / 4})
        caps.append(f_cap)
        initial.append(clamped)
    # the given loads lowest first: the two lowest in one map, then each next one only where
    # the policy passed the highest load so far. A load above a failing one (and no pass
    # between) is not simulated: it cannot move the edge, the lowest failing load above the
    # highest passing one, unless P99 falls as load grows; and a best-static point that fails
    # costs its whole static search (in the demo the points at twice the start factor, where
    # the start had failed, ~12x overloaded, were ~40 % of the curve's simulated requests)
    pts: list[list[LoadPoint]] = [[] for _ in setups]
    for j in range(1, max([2, *map(len, initial)])):
        items = [(k, p, f) for k, fs in enumerate(initial) for p in policies
                 for f in (fs[:2] if j == 1 else fs[j : j + 1])
                 if j == 1 or _top(pts[k], p).passes]  # fmt: skip
        if not items:
            break
        got = ex.map(_point_of, items, shared=shared, progress=progress if j == 1 else None,
                     label=lambda it: f"load point {it[1]} x{it[2]:g}")  # fmt: skip
        for it, x in zip(items, got, strict=True):
            pts[it[0]].append(x)
    # widen until every policy has a passing and a failing load (doubling up / halving down),
    # then bisect each edge, all setups' policies in one batch per step
    edges: list[dict[str, tuple[float, float]]] = [{} for _ in setups]
    capped: list[dict[str, bool]] = [{} for _ in setups]
    for _ in range(max_widen):
        grow = []
        for k, f_cap in enumerate(caps):
            for p in policies:
                mine = [x for x in pts[k] if x.policy == p]
                ok = [x.factor for x in mine if x.passes]
                bad = [x.factor for x in mine if not x.passes and (not ok or x.factor > max(ok))]
                if ok and bad:
                    edges[k][p] = (max(ok), min(bad))
                elif ok and max(ok) * 2.0 > f_cap and max(ok) < f_cap:
                    grow.append((k, p, f_cap, _hint(pts[k], p, max(ok))))  # the largest allowed
                elif ok and max(ok) >= f_cap:
                    capped[k][p] = True  # passing at the cap: max_qps is a lower bound
                elif ok:
                    grow.append((k, p, max(ok) * 2.0, _hint(pts[k], p, max(ok))))
                else:
                    grow.append((k, p, min(x.factor for x in mine) / 2.0))
        if not grow:
            break
        for it, x in zip(grow, ex.map(_point_of, grow, shared=shared), strict=True):
            pts[it[0]].append(x)
    for _ in range(refine_steps):
        batch = [(k, p, (lo * hi) ** 0.5, _hint(pts[k], p, lo))
                 for k, e in enumerate(edges) for p, (lo, hi) in e.items()]  # fmt: skip
        if not batch:
            break
        for it, x in zip(batch, ex.map(_point_of, batch, shared=shared), strict=True):
            k = it[0]
            pts[k].append(x)
            lo, hi = edges[k][x.policy]
            edges[k][x.policy] = (x.factor, hi) if x.passes else (lo, x.factor)
    return [_curve(s, policies, p, c) for s, p, c in zip(setups, pts, capped, strict=True)]


def _curve(setup: LoadSetup, policies: list[str], pts: list[LoadPoint],
           capped: dict[str, bool]) -> LoadCurve:  # fmt: skip
    """One setup's LoadCurve from its evaluated points."""
    df = pl.DataFrame([dataclasses.asdict(x) for x in pts]).sort(["policy", "factor"])
    max_qps: dict[str, float] = {}
    ratio_at: dict[str, float] = {}
    for p in policies:
        ok = df.filter((pl.col("policy") == p) & pl.col("passes")).sort("qps")
        max_qps[p] = float(ok["qps"][-1]) if ok.height else float("nan")
        ratio_at[p] = float(ok["ratio"][-1]) if ok.height else float("nan")
    ts = setup.trace.ts_s
    base = len(ts) / float(ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else np.nan
    return LoadCurve(
        points=df,
        max_qps=max_qps,
        base_qps=float(base),
        ratio_at_max=ratio_at,
        capped={p: capped.get(p, False) for p in policies},
    )
