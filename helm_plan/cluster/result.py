"""What a cluster run reports: cluster-wide and per-node figures, per window and overall.

Figures reuse :mod:`helm_plan.sim.metrics` (one definition of P50/P99,
attainment, hit and reuse rates, throughput). Cluster-specific ones:

- **work** of a node: its busy time, the sum of its batches' service times
  (each request carries ``service / batch size``);
- **load imbalance**: max / mean of the nodes' work, and its coefficient of
  variation (std / mean), over the measured windows (and per window);
- **ratio spread**: max − min of the nodes' EMB shares in a window; overall,
  its mean over measured windows.

Warm-up windows (``NodeConfig.warmup_windows``) are left out of the overall
figures, as on one node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from helm_plan.sim import metrics
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.node import NodeResult

NAN = float("nan")


@dataclass(frozen=True, eq=False)
class ClusterResult:
    """Outcome of one cluster simulation (per-request arrays are in trace order)."""

    router: str
    """Router name."""
    policy: str
    """Policy spec every node ran."""
    nodes: int
    """Node count."""
    node: np.ndarray
    """Node each request was routed to, int32."""
    sojourn_s: np.ndarray
    """Wait + service per request, seconds."""
    service_s: np.ndarray
    """Batch service time per request, seconds."""
    batch_size: np.ndarray
    """Requests in each request's batch, int32."""
    window_idx: np.ndarray
    """Window of each request, int64."""
    n_computed: np.ndarray
    """Computed (prefill) history tokens per request."""
    n_reused: np.ndarray
    """History tokens reused from KV per request."""
    ctx_len: np.ndarray
    """Context length per request."""
    lookup_bytes: np.ndarray
    """EMB bytes looked up per request."""
    miss_bytes: np.ndarray
    """EMB bytes missed per request."""
    per_node: tuple[NodeResult, ...]
    """Each node's own result (its windows, ratios, figures)."""
    ratios: np.ndarray
    """EMB share per window and node, shape (windows, nodes)."""
    windows: pl.DataFrame
    """Cluster figures per window (see :func:`build_result`)."""
    node_table: pl.DataFrame
    """Figures per node over the measured windows."""
    p50_ms: float
    p99_ms: float
    slo_attainment: float
    throughput_rps: float
    """Measured requests / (last finish − first measured window start)."""
    emb_hit_rate: float
    kv_reuse_rate: float
    h2d_bytes: int
    """Demand-miss plus landed refill bytes, all nodes, measured windows."""
    prefetch_bytes: int
    blocked_s: float
    """Eager-refill block time summed over nodes, seconds."""
    imbalance_max_mean: float
    """Max / mean of per-node work (1 = perfectly even)."""
    imbalance_cv: float
    """Std / mean of per-node work."""
    ratio_spread: float
    """Mean over measured windows of max − min of the nodes' EMB shares."""
    requests: int
    """Measured requests."""
    measured_from_window: int
    """First window in the overall figures."""

    def overall(self) -> dict[str, Any]:
        """The overall figures as a flat dict (the CLI's table and JSON)."""
        keys = ("requests", "p50_ms", "p99_ms", "slo_attainment", "throughput_rps",
                "emb_hit_rate", "kv_reuse_rate", "h2d_bytes", "prefetch_bytes", "blocked_s",
                "imbalance_max_mean", "imbalance_cv", "ratio_spread", "measured_from_window")  # fmt: skip
        return {"router": self.router, "policy": self.policy, "nodes": self.nodes} | {
            k: getattr(self, k) for k in keys
        }


def _imbalance(work: np.ndarray) -> tuple[float, float]:
    m = float(work.mean()) if len(work) else 0.0
    if m <= 0:
        return NAN, NAN
    return float(work.max()) / m, float(work.std()) / m


def build_result(
    router: str, policy: str, cfg: NodeConfig, edges: np.ndarray, node: np.ndarray,
    out: dict[str, np.ndarray], per_node: list[NodeResult],
) -> ClusterResult:  # fmt: skip
    """Gather the per-request arrays and the nodes' results into one :class:`ClusterResult`.

    ``windows`` columns: window, start_s, requests, p50_ms, p99_ms, slo_attainment,
    throughput_rps, emb_hit_rate, kv_reuse_rate, h2d_bytes, prefetch_bytes, ratio_min,
    ratio_mean, ratio_max, ratio_spread, work_max_mean, work_cv, measured. ``node_table``
    columns: node, requests, work_s, p50_ms, p99_ms, slo_attainment, throughput_rps,
    emb_hit_rate, kv_reuse_rate, h2d_bytes, ratio_mean, ratio_min, ratio_max.
    """
    n_nodes = len(per_node)
    n_w = len(edges) - 1
    ws = cfg.window_s
    warm = min(cfg.warmup_windows, max(n_w - 1, 0))
    soj, svc, bsz = out["sojourn_s"], out["service_s"], out["batch_size"]
    look, miss = out["lookup_bytes"], out["miss_bytes"]
    reused, ctx = out["n_reused"], out["ctx_len"]
    finish = out["finish_s"]
    work_req = svc / np.maximum(bsz, 1)
    widx = np.repeat(np.arange(n_w, dtype=np.int64), np.diff(edges))
    ratios = np.stack([p.ratios for p in per_node], axis=1) if n_w else np.zeros((0, n_nodes))
    h2d_w = np.sum([p.windows["h2d_bytes"].to_numpy() for p in per_node], axis=0)
    pf_w = np.sum([p.windows["prefetch_bytes"].to_numpy() for p in per_node], axis=0)
    rows: dict[str, list[Any]] = {k: [] for k in (
        "p50_ms", "p99_ms", "slo_attainment", "throughput_rps", "emb_hit_rate", "kv_reuse_rate",
        "work_max_mean", "work_cv")}  # fmt: skip
    for w in range(n_w):
        s, e = int(edges[w]), int(edges[w + 1])
        lat = metrics.latency_figures(soj[s:e], cfg.slo_ms)
        rows["p50_ms"].append(lat.p50_ms)
        rows["p99_ms"].append(lat.p99_ms)
        rows["slo_attainment"].append(lat.slo_attainment)
        last = float(finish[s:e].max()) if e > s else NAN
        rows["throughput_rps"].append(metrics.throughput_rps(e - s, w * ws, ws, last))
        rows["emb_hit_rate"].append(metrics.hit_rate(int(miss[s:e].sum()), int(look[s:e].sum())))
        rows["kv_reuse_rate"].append(
            metrics.reuse_rate(int(reused[s:e].sum()), int(ctx[s:e].sum()))
        )
        wk = np.bincount(node[s:e], weights=work_req[s:e], minlength=n_nodes)
        mm, cv = _imbalance(wk)
        rows["work_max_mean"].append(mm)
        rows["work_cv"].append(cv)
    windows = pl.DataFrame(
        {
            "window": np.arange(n_w, dtype=np.int64),
            "start_s": np.arange(n_w, dtype=np.float64) * ws,
            "requests": np.diff(edges).astype(np.int64),
            **{k: np.array(v, np.float64) for k, v in rows.items() if not k.startswith("work")},
            "h2d_bytes": np.asarray(h2d_w, np.int64).reshape(n_w),
            "prefetch_bytes": np.asarray(pf_w, np.int64).reshape(n_w),
            "ratio_min": ratios.min(axis=1) if n_w else np.zeros(0),
            "ratio_mean": ratios.mean(axis=1) if n_w else np.zeros(0),
            "ratio_max": ratios.max(axis=1) if n_w else np.zeros(0),
            "ratio_spread": (ratios.max(axis=1) - ratios.min(axis=1)) if n_w else np.zeros(0),
            "work_max_mean": np.array(rows["work_max_mean"], np.float64),
            "work_cv": np.array(rows["work_cv"], np.float64),
            "measured": np.arange(n_w) >= warm,
        }
    )
    i0 = int(edges[warm]) if n_w else 0
    m = slice(i0, len(soj))
    lat = metrics.latency_figures(soj[m], cfg.slo_ms)
    span = float(finish[m].max()) - warm * ws if len(soj) > i0 else 0.0
    work = np.bincount(node[m], weights=work_req[m], minlength=n_nodes)
    mm, cv = _imbalance(work)
    node_table = pl.DataFrame(
        {
            "node": np.arange(n_nodes, dtype=np.int64),
            "requests": np.array([p.requests for p in per_node], np.int64),
            "work_s": work,
            "p50_ms": np.array([p.p50_ms for p in per_node], np.float64),
            "p99_ms": np.array([p.p99_ms for p in per_node], np.float64),
            "slo_attainment": np.array([p.slo_attainment for p in per_node], np.float64),
            "throughput_rps": np.array([p.throughput_rps for p in per_node], np.float64),
            "emb_hit_rate": np.array([p.emb_hit_rate for p in per_node], np.float64),
            "kv_reuse_rate": np.array([p.kv_reuse_rate for p in per_node], np.float64),
            "h2d_bytes": np.array([p.h2d_bytes for p in per_node], np.int64),
            "ratio_mean": ratios[warm:].mean(axis=0) if n_w else np.zeros(n_nodes),
            "ratio_min": ratios[warm:].min(axis=0) if n_w else np.zeros(n_nodes),
            "ratio_max": ratios[warm:].max(axis=0) if n_w else np.zeros(n_nodes),
        }
    )
    measured = windows.filter(pl.col("measured"))
    return ClusterResult(
        router=router, policy=policy, nodes=n_nodes, node=node, sojourn_s=soj, service_s=svc,
        batch_size=bsz, window_idx=widx, n_computed=out["n_computed"], n_reused=reused,
        ctx_len=ctx, lookup_bytes=look, miss_bytes=miss, per_node=tuple(per_node),
        ratios=ratios, windows=windows, node_table=node_table,
        p50_ms=lat.p50_ms, p99_ms=lat.p99_ms, slo_attainment=lat.slo_attainment,
        throughput_rps=(len(soj) - i0) / span if span > 0 else NAN,
        emb_hit_rate=metrics.hit_rate(int(miss[m].sum()), int(look[m].sum())),
        kv_reuse_rate=metrics.reuse_rate(int(reused[m].sum()), int(ctx[m].sum())),
        h2d_bytes=int(measured["h2d_bytes"].sum()),
        prefetch_bytes=int(measured["prefetch_bytes"].sum()),
        blocked_s=float(sum(p.blocked_s for p in per_node)),
        imbalance_max_mean=mm, imbalance_cv=cv,
        ratio_spread=float(measured["ratio_spread"].mean()) if len(measured) else NAN,
        requests=len(soj) - i0, measured_from_window=warm,
    )  # fmt: skip
