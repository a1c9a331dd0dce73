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
  "slo_ms": float, "window_s": float, "slots": int, "batch_max": int,
  "batch_timeout_ms": float, "batching": "static" | "continuous", "throttle_share": float,
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
Defaults come from :class:`helm_plan.sim.NodeConfig` and the model profile:
``--slo-ms`` is the model's ``default_slo_ms`` (scaled to its latency, with its
source in the profile) and ``--window-s 10`` (>= 1000 requests per
window at >= 100 QPS, so P99 rests on >= 10 tail samples; see helm_plan.sim.node).
``--refill`` (old name ``--realloc``, still accepted) picks the refill mode.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    NODE,
    BatchingOpt,
    BatchMaxOpt,
    BatchTimeoutOpt,
    GpuOpt,
    JsonOpt,
    LatencyOpt,
    ModelOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    ReallocAliasOpt,
    RefillOpt,
    SeedOpt,
    SloMsOpt,
    SlotsOpt,
    ThrottleOpt,
    TraceArg,
    WindowSOpt,
    refill_mode,
)
from helm_plan_cli.output import emit_json, emit_notes, emit_table
from helm_plan_cli.progress import task
from rich import box
from rich.table import Table

from helm_plan.oracle import OracleConfig
from helm_plan.policies import PolicyEnv, baseline_policy, parse_policy, usage
from helm_plan.profiles import DEFAULT_GPU, DEFAULT_MODEL
from helm_plan.sim import NodeConfig, load_context, simulate_node

ORACLE = OracleConfig()
"""The searching policies' defaults (best-static, oracle; their seed is --seed)."""

PolicyOpt = Annotated[
    str,
    typer.Option("--policy", help=f"Ratio policy: {usage().removeprefix('use ')}."),
]
WarmupOpt = Annotated[
    int, typer.Option("--warmup-windows", help="Leading windows left out of overall figures.")
]


def simulate(
    trace: TraceArg,
    gpu: GpuOpt = DEFAULT_GPU,
    model: ModelOpt = DEFAULT_MODEL,
    latency: LatencyOpt = None,
    slo_ms: SloMsOpt = NODE.slo_ms,
    window_s: WindowSOpt = NODE.window_s,
    policy: PolicyOpt = baseline_policy(),
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
    seed: SeedOpt = ORACLE.seed,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Simulate one GPU node serving TRACE under a ratio policy and refill mode."""
    guard(inputs=[trace, gpu, model, latency], policies=[policy])
    pol = parse_policy(policy)
    cfg = NodeConfig(  # checks the options before any work
        slo_ms=slo_ms,
        window_s=window_s,
        slots=slots,
        batch_max=batch_max,
        batch_timeout_ms=batch_timeout_ms,
        batching=batching,
        refill=refill_mode(refill, realloc),
        throttle_share=throttle_share,
        warmup_windows=warmup_windows,
    )
    ctx = load_context(trace, gpu=gpu, model=model, latency=latency, pool_bytes=pool_bytes,
                       pool_fraction=pool_fraction, seed=seed)  # fmt: skip
    cfg = cfg.for_context(ctx)  # the one SLO rule: --slo-ms, else the model's default
    with task(f"policy {pol.spec}", quiet=quiet or as_json or not pol.searches) as progress:
        env = PolicyEnv(oracle=dataclasses.replace(ORACLE, seed=seed), progress=progress)
        built = pol.build(ctx, cfg, env)
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
            "batch_max": cfg.batch_max,
            "batch_timeout_ms": cfg.batch_timeout_ms,
            "batching": cfg.batching,
            "throttle_share": cfg.throttle_share,
            "warmup_windows": cfg.warmup_windows,
            "notes": list(ctx.notes),
            "overall": overall,
            "windows": res.windows.to_dicts(),
        }
        emit_json("simulate", doc)
        return
    emit_notes(ctx.notes)
    head = Table(title=f"simulate {trace.name}: {pol.spec}, refill {cfg.refill}")
    head.add_column("figure")
    head.add_column("value", justify="right")
    for k, v in overall.items():
        head.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    emit_table(head)
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
    emit_table(t)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("simulate")(simulate)
