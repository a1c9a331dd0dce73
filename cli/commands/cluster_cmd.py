"""`helm-plan cluster`: N nodes behind a router, each with its own caches, queue and policy.

One run (``--router R --policy P``) prints the overall figures, a per-node
table and a per-window table; a grid (``--routers a,b --policies x,y``, every
router × policy, mapped over ``--workers`` processes) prints one row per
point. ``--json`` prints one object for either:

```
{
  "schema_version": "1", "command": "cluster",
  "trace": str, "gpu": str, "model": str, "latency": str | null,
  "pool_bytes": int, "footprint_bytes": int, "nodes": int,
  "slo_ms": float, "window_s": float, "slots": int, "batch_max": int,
  "batching": str, "batch_timeout_ms": float, "throttle_share": float,
  "warmup_windows": int, "seed": int, "notes": [str],
  "points": [{"router": str, "policy": str, "refill": str,
              "best_static_r": float,          # only for best-static
              "overall": {"requests", "p50_ms", "p99_ms", "slo_attainment",
                          "throughput_rps", "emb_hit_rate", "kv_reuse_rate",
                          "h2d_bytes", "prefetch_bytes", "blocked_s",
                          "imbalance_max_mean", "imbalance_cv", "ratio_spread",
                          "measured_from_window"},
              "nodes": [{"node", "requests", "work_s", "p50_ms", "p99_ms",
                         "slo_attainment", "throughput_rps", "emb_hit_rate",
                         "kv_reuse_rate", "h2d_bytes", "ratio_mean", "ratio_min",
                         "ratio_max"}],
              "windows": [{"window", "start_s", "requests", "p50_ms", "p99_ms",
                           "slo_attainment", "throughput_rps", "emb_hit_rate",
                           "kv_reuse_rate", "h2d_bytes", "prefetch_bytes",
                           "ratio_min", "ratio_mean", "ratio_max", "ratio_spread",
                           "work_max_mean", "work_cv", "measured"}]}]
}
```

NaN is written as null. Defaults come from :class:`helm_plan.sim.NodeConfig`
and the model profile (``--slo-ms`` is the model's ``default_slo_ms``), as for
``simulate``. ``imbalance_max_mean`` is max / mean of the nodes'
busy time (1 = even), ``ratio_spread`` the mean over measured windows of max −
min of the nodes' EMB shares.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    EXECUTOR,
    NODE,
    BatchingOpt,
    BatchMaxOpt,
    BatchTimeoutOpt,
    ExecutorOpt,
    GpuOpt,
    JsonOpt,
    LatencyOpt,
    ModelOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    RayAddressOpt,
    ReallocAliasOpt,
    RefillOpt,
    SeedOpt,
    SloMsOpt,
    SlotsOpt,
    ThrottleOpt,
    TraceArg,
    WindowSOpt,
    WorkersOpt,
    refill_mode,
)
from helm_plan_cli.output import emit_json, emit_notes, emit_table
from helm_plan_cli.progress import task
from rich import box
from rich.table import Table

from helm_plan import exec as executors
from helm_plan.cluster import ROUTERS, ClusterConfig
from helm_plan.cluster.compare import GridPoint, compare, run_point
from helm_plan.errors import ConfigError
from helm_plan.oracle import OracleConfig
from helm_plan.policies import baseline_policy, canonical, usage
from helm_plan.profiles import DEFAULT_GPU, DEFAULT_MODEL
from helm_plan.sim import NodeConfig, load_context

CLUSTER = ClusterConfig()
"""The cluster's defaults (nodes, router, seed), read once here."""
ORACLE = OracleConfig()
"""The best-static search's defaults (its seed is --seed)."""

NodesOpt = Annotated[int, typer.Option("--nodes", help="GPU nodes in the fleet.")]
RouterOpt = Annotated[str, typer.Option("--router", help=f"Router: {', '.join(ROUTERS)}.")]
RoutersOpt = Annotated[
    str | None, typer.Option("--routers", help="Comma list of routers to compare (a grid).")
]
PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy",
        help=f"Policy every node runs: {usage(cluster=True).removeprefix('use ')}.",
    ),
]
PoliciesOpt = Annotated[
    str | None, typer.Option("--policies", help="Comma list of policies to compare (a grid).")
]
WarmupOpt = Annotated[
    int, typer.Option("--warmup-windows", help="Leading windows left out of overall figures.")
]


def _split(text: str | None, one: str, what: str) -> list[str]:
    if text is None:
        return [one]
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ConfigError(f"--{what} is empty", hint=f"pass a comma list, e.g. --{what} a,b")
    return list(dict.fromkeys(items))


def cluster(
    trace: TraceArg,
    nodes: NodesOpt = CLUSTER.nodes,
    router: RouterOpt = CLUSTER.router,
    policy: PolicyOpt = baseline_policy(),
    routers: RoutersOpt = None,
    policies: PoliciesOpt = None,
    gpu: GpuOpt = DEFAULT_GPU,
    model: ModelOpt = DEFAULT_MODEL,
    latency: LatencyOpt = None,
    slo_ms: SloMsOpt = NODE.slo_ms,
    window_s: WindowSOpt = NODE.window_s,
    refill: RefillOpt = None,
    realloc: ReallocAliasOpt = None,
    slots: SlotsOpt = NODE.slots,
    batch_max: BatchMaxOpt = NODE.batch_max,
    batch_timeout_ms: BatchTimeoutOpt = NODE.batch_timeout_ms,
    batching: BatchingOpt = NODE.batching,
    throttle_share: ThrottleOpt = NODE.throttle_share,
    warmup_windows: WarmupOpt = NODE.warmup_windows,
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    seed: SeedOpt = CLUSTER.seed,
    workers: WorkersOpt = EXECUTOR.workers,
    executor: ExecutorOpt = EXECUTOR.kind,
    ray_address: RayAddressOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Simulate TRACE on a fleet of NODES GPUs behind a router (or compare a grid of them)."""
    rs = _split(routers, router, "routers")
    ps = list(dict.fromkeys(canonical(p) for p in _split(policies, policy, "policies")))
    guard(inputs=[trace, gpu, model, latency], policies=ps)
    for r in rs:
        ClusterConfig(nodes=nodes, router=r)  # a precise error before any work
    ex = executors.get_executor(executor, workers, ray_address)  # checks its options first
    ncfg = NodeConfig(
        slo_ms=slo_ms, window_s=window_s,
        slots=slots, batch_max=batch_max, batch_timeout_ms=batch_timeout_ms, batching=batching,
        refill=refill_mode(refill, realloc), throttle_share=throttle_share,
        warmup_windows=warmup_windows,
    )  # fmt: skip
    ctx = load_context(trace, gpu=gpu, model=model, latency=latency, pool_bytes=pool_bytes,
                       pool_fraction=pool_fraction, seed=seed)  # fmt: skip
    ncfg = ncfg.for_context(ctx)  # the one SLO rule: --slo-ms, else the model's default
    cfg = ClusterConfig(nodes=nodes, router=rs[0], node=ncfg, seed=seed)
    ocfg = dataclasses.replace(ORACLE, seed=seed)
    quiet = quiet or as_json
    if len(rs) * len(ps) == 1:
        with task(f"cluster {nodes} nodes, {rs[0]}, {ps[0]}", quiet=quiet) as prog:
            points = [run_point(ctx, cfg, ps[0], ocfg, ex, prog)]
    else:
        with task(f"cluster grid {len(rs)} routers × {len(ps)} policies", quiet=quiet) as prog:
            points = compare(ctx, rs, ps, cfg, oracle=ocfg, executor=ex, progress=prog)
    if as_json:
        doc = {
            "trace": str(trace), "gpu": ctx.gpu.name, "model": ctx.model.name,
            "latency": latency, "pool_bytes": ctx.pool_bytes,
            "footprint_bytes": ctx.footprint_bytes, "nodes": nodes, "slo_ms": ncfg.slo_ms,
            "window_s": window_s, "slots": slots, "batch_max": batch_max, "batching": batching,
            "batch_timeout_ms": batch_timeout_ms, "throttle_share": throttle_share,
            "warmup_windows": warmup_windows, "seed": seed, "notes": list(ctx.notes),
            "points": [_point_doc(p) for p in points],
        }  # fmt: skip
        emit_json("cluster", doc)
        return
    emit_notes(ctx.notes)
    if len(points) == 1:
        _print_one(points[0], trace.name, nodes)
    else:
        _print_grid(points, trace.name, nodes)


def _point_doc(p: GridPoint) -> dict[str, Any]:
    ov = dict(p.overall)
    head = {"router": ov.pop("router"), "policy": ov.pop("policy"), "refill": ov.pop("refill")}
    ov.pop("nodes", None)
    if "best_static_r" in ov:
        head["best_static_r"] = ov.pop("best_static_r")
    return head | {"overall": ov, "nodes": p.node_table.to_dicts(),
                   "windows": p.windows.to_dicts()}  # fmt: skip


def _fmt(v: Any, fmt: str) -> str:
    return "-" if v is None or v != v else fmt.format(v)


_GRID_COLS = [
    ("router", "router", "{}"), ("policy", "policy", "{}"), ("p99 ms", "p99_ms", "{:.3g}"),
    ("SLO", "slo_attainment", "{:.1%}"), ("req/s", "throughput_rps", "{:.0f}"),
    ("imb", "imbalance_max_mean", "{:.2f}"), ("hit", "emb_hit_rate", "{:.0%}"),
    ("reuse", "kv_reuse_rate", "{:.0%}"), ("H2D GB", "h2d_bytes", "{:.2g}"),
    ("r rng", "ratio_spread", "{:.2f}"),
]  # fmt: skip


def _print_grid(points: list[GridPoint], name: str, nodes: int) -> None:
    t = Table(title=f"cluster {name}: {nodes} nodes (--json: P50, per node, per window)",
              box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)  # fmt: skip
    for head, _, _ in _GRID_COLS:
        if head in ("router", "policy"):
            t.add_column(head, no_wrap=True)
        else:
            t.add_column(head, justify="right")
    for p in points:
        ov = p.overall | {"h2d_bytes": p.overall["h2d_bytes"] / 1e9}
        t.add_row(*[_fmt(ov[k], f) for _, k, f in _GRID_COLS])
    emit_table(t)


def _print_one(p: GridPoint, name: str, nodes: int) -> None:
    ov = p.overall
    head = Table(title=f"cluster {name}: {nodes} nodes, router {p.router}, policy {p.policy}, "
                       f"refill {ov['refill']}")  # fmt: skip
    head.add_column("figure")
    head.add_column("value", justify="right")
    for k, v in ov.items():
        if k not in ("router", "policy", "nodes", "refill"):
            head.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    emit_table(head)
    cols = [("node", "node", "{}"), ("req", "requests", "{}"), ("work s", "work_s", "{:.3g}"),
            ("p99 ms", "p99_ms", "{:.3g}"), ("SLO", "slo_attainment", "{:.1%}"),
            ("EMB hit", "emb_hit_rate", "{:.1%}"), ("KV reuse", "kv_reuse_rate", "{:.1%}"),
            ("r mean", "ratio_mean", "{:.2f}"), ("r min", "ratio_min", "{:.2f}"),
            ("r max", "ratio_max", "{:.2f}")]  # fmt: skip
    t = Table(title="per node (measured windows)", box=box.SIMPLE_HEAD, pad_edge=False,
              collapse_padding=True)  # fmt: skip
    for h, _, _ in cols:
        t.add_column(h, justify="right")
    for row in p.node_table.iter_rows(named=True):
        t.add_row(*[_fmt(row[k], f) for _, k, f in cols])
    emit_table(t)
    wcols = [("win", "window", "{}"), ("req", "requests", "{}"), ("p99 ms", "p99_ms", "{:.3g}"),
             ("SLO", "slo_attainment", "{:.1%}"), ("EMB hit", "emb_hit_rate", "{:.1%}"),
             ("KV reuse", "kv_reuse_rate", "{:.1%}"), ("r min", "ratio_min", "{:.2f}"),
             ("r max", "ratio_max", "{:.2f}"), ("imb", "work_max_mean", "{:.2f}")]  # fmt: skip
    w = Table(title="per window", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for h, _, _ in wcols:
        w.add_column(h, justify="right")
    for row in p.windows.iter_rows(named=True):
        w.add_row(*[_fmt(row[k], f) for _, k, f in wcols])
    emit_table(w)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("cluster")(cluster)
