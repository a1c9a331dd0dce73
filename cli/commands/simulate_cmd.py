"""`helm-plan simulate`: one node, one ratio policy, one refill mode.

Prints a table (overall + per window) or, with ``--json``, one object:

```
{
  "schema_version": "1",
  "command": "simulate",
  "trace": str, "gpu": str, "model": str, "latency": str | null,
  "pool_bytes": int, "pool_source": str, "footprint_bytes": int,
  "policy": str,                      # canonical spec, e.g. "static:0.3"
  "refill": "lazy" | "eager" | "throttled",
  "slo_ms": float, "window_s": float, "slots": int, "throttle_share": float,
  "warmup_windows": int,              # leading windows left out of "overall"
  "notes": [str],                     # warnings, e.g. the footprint fits the pool
  "overall": {"requests": int, "p50_ms": float, "p99_ms": float,
              "slo_attainment": float, "throughput_rps": float,
              "emb_hit_rate": float, "kv_reuse_rate": float,
              "h2d_bytes": int, "prefetch_bytes": int, "blocked_s": float,
              "measured_from_window": int},
  "windows": [{"window": int, "start_s": float, "end_s": float, "ratio": float,
               "requests": int, "p50_ms": float, "p99_ms": float,
               "slo_attainment": float, "throughput_rps": float,
               "emb_hit_rate": float, "kv_reuse_rate": float,
               "h2d_bytes": int, "prefetch_bytes": int, "blocked_ms": float,
               "measured": bool}]
}
```

NaN (e.g. an empty window's P99) is written as null. Sojourn = queue wait +
service; window figures cover the requests arriving in the window.
Defaults: ``--slo-ms 100`` (an online ranking stage's budget) and
``--window-s 10`` (>= 1000 requests per window at >= 100 QPS, so P99 rests
on >= 10 tail samples; see helm_plan.sim.node).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Annotated, Any

import typer
from helm_plan_cli.options import (
    GpuOpt,
    JsonOpt,
    LatencyOpt,
    ModelOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    SeedOpt,
    TraceArg,
    WindowSOpt,
)
from helm_plan_cli.progress import err_console, out_console, task
from rich import box
from rich.table import Table

from helm_plan.oracle import OracleConfig
from helm_plan.policies import PolicyEnv, parse_policy
from helm_plan.sim import (
    DEFAULT_SLO_MS,
    DEFAULT_WINDOW_S,
    NodeConfig,
    load_context,
    simulate_node,
)

SCHEMA_VERSION = "1"

PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy", help="static:R, emb-max, kv-max, best-static or schedule:LABELS.parquet."
    ),
]
ReallocOpt = Annotated[
    str, typer.Option("--realloc", help="Refill of a growing EMB cache: lazy, eager or throttled.")
]
SlotsOpt = Annotated[int, typer.Option("--slots", help="Parallel executors of the node's FIFO.")]
ThrottleOpt = Annotated[
    float, typer.Option("--throttle-share", help="H2D bandwidth share of a throttled refill (φ).")
]
WarmupOpt = Annotated[
    int, typer.Option("--warmup-windows", help="Leading windows left out of overall figures.")
]
SloOpt = Annotated[
    float, typer.Option("--slo-ms", help="P99 latency SLO in milliseconds (online ranking budget).")
]


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def simulate(
    trace: TraceArg,
    gpu: GpuOpt = "a100-80g",
    model: ModelOpt = "gr-small",
    latency: LatencyOpt = None,
    slo_ms: SloOpt = DEFAULT_SLO_MS,
    window_s: WindowSOpt = DEFAULT_WINDOW_S,
    policy: PolicyOpt = "best-static",
    realloc: ReallocOpt = "throttled",
    slots: SlotsOpt = 1,
    throttle_share: ThrottleOpt = 0.3,
    warmup_windows: WarmupOpt = 1,
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Simulate one GPU node serving TRACE under a ratio policy and refill mode."""
    cfg = NodeConfig(
        slo_ms=slo_ms,
        window_s=window_s,
        slots=slots,
        refill=realloc,
        throttle_share=throttle_share,
        warmup_windows=warmup_windows,
    )
    pol = parse_policy(policy)
    ctx = load_context(
        trace,
        gpu=gpu,
        model=model,
        latency=latency,
        pool_bytes=pool_bytes,
        pool_fraction=pool_fraction,
        seed=seed,
    )
    with task(f"policy {pol.spec}", quiet=quiet or as_json or not pol.searches) as progress:
        built = pol.build(ctx, cfg, PolicyEnv(oracle=OracleConfig(seed=seed), progress=progress))
    if built.refill is not None:
        cfg = dataclasses.replace(cfg, refill=built.refill)
    res = simulate_node(ctx, built.policy, cfg)
    overall = {
        "requests": res.requests,
        "p50_ms": res.p50_ms,
        "p99_ms": res.p99_ms,
        "slo_attainment": res.slo_attainment,
        "throughput_rps": res.throughput_rps,
        "emb_hit_rate": res.emb_hit_rate,
        "kv_reuse_rate": res.kv_reuse_rate,
        "h2d_bytes": res.h2d_bytes,
        "prefetch_bytes": res.prefetch_bytes,
        "blocked_s": res.blocked_s,
        "measured_from_window": res.measured_from_window,
    }
    if as_json:
        doc = {
            "schema_version": SCHEMA_VERSION,
            "command": "simulate",
            "trace": str(trace),
            "gpu": ctx.gpu.name,
            "model": ctx.model.name,
            "latency": latency,
            "pool_bytes": ctx.pool_bytes,
            "pool_source": ctx.pool_source,
            "footprint_bytes": ctx.footprint_bytes,
            "policy": pol.spec,
            "refill": cfg.refill,
            "slo_ms": cfg.slo_ms,
            "window_s": cfg.window_s,
            "slots": cfg.slots,
            "throttle_share": cfg.throttle_share,
            "warmup_windows": cfg.warmup_windows,
            "notes": list(ctx.notes),
            "overall": overall,
            "windows": res.windows.to_dicts(),
        }
        typer.echo(json.dumps(_clean(doc), indent=2))
        return
    for note in ctx.notes:
        err_console.print(f"note: {note}")
    head = Table(title=f"simulate {trace.name}: {pol.spec}, refill {cfg.refill}")
    head.add_column("figure")
    head.add_column("value", justify="right")
    for k, v in overall.items():
        head.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out_console.print(head)
    # Short headers and fixed formats so the table fits an 80-column terminal.
    t = Table(
        title="per window (--json for every field)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    cols = [
        ("win", "window", "{}"), ("start s", "start_s", "{:.0f}"), ("r", "ratio", "{:.2f}"),
        ("req", "requests", "{}"), ("p50 ms", "p50_ms", "{:.3g}"), ("p99 ms", "p99_ms", "{:.3g}"),
        ("SLO", "slo_attainment", "{:.1%}"), ("EMB hit", "emb_hit_rate", "{:.1%}"),
        ("KV reuse", "kv_reuse_rate", "{:.1%}"), ("H2D MB", "h2d_bytes", "{:.0f}"),
        ("blk ms", "blocked_ms", "{:.3g}"),
    ]  # fmt: skip
    for head_txt, _, _ in cols:
        t.add_column(head_txt, justify="right")
    for row in res.windows.iter_rows(named=True):
        cells = []
        for _, key, fmt in cols:
            v = row[key] / 1e6 if key == "h2d_bytes" else row[key]
            cells.append("-" if v is None or v != v else fmt.format(v))
        t.add_row(*cells)
    out_console.print(t)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("simulate")(simulate)
