"""`helm-plan plan`: minimal nodes per GPU × policy × router for a P99 SLO, and what they cost.

A thin adapter over :func:`helm_plan.plan.plan`. ``-o FILE`` writes plan.json
(schema: docs/plan-json.md) atomically; ``--json`` prints the same document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.files import comma_items, guard
from helm_plan_cli.options import (
    EXECUTOR,
    NODE,
    AttainmentOpt,
    BatchingOpt,
    BatchMaxOpt,
    BatchTimeoutOpt,
    ExecutorOpt,
    JsonOpt,
    LatencyOpt,
    ModelOpt,
    PeakQpsOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    RayAddressOpt,
    ScaleByOpt,
    ScaleOpt,
    SeedOpt,
    SloMsOpt,
    SlotsOpt,
    SpillDirOpt,
    TraceArg,
    WindowSOpt,
    WorkersOpt,
)
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task
from rich import box
from rich.table import Table

from helm_plan import exec as executors
from helm_plan.arrays import from_file
from helm_plan.errors import ConfigError
from helm_plan.io import write_json
from helm_plan.plan import PlanConfig, plan, plan_doc
from helm_plan.plan.config import DEFAULT_POLICIES
from helm_plan.sim import NodeConfig

PLAN = PlanConfig()
"""The plan's defaults, read once here."""

GpusOpt = Annotated[str, typer.Option("--gpus", help="Comma list of GPU profiles to compare.")]
PoliciesOpt = Annotated[
    str | None,
    typer.Option(
        "--policies",
        help=f"Comma list of split policies (default: {', '.join(DEFAULT_POLICIES)}, those this "
        "build has).",
        show_default=False,
    ),
]
RoutersOpt = Annotated[str, typer.Option("--routers", help="Comma list of routers.")]
MaxNodesOpt = Annotated[int, typer.Option("--max-nodes", help="Largest fleet per GPU kind.")]
CostOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--cost-per-hour",
        help="GPU=USD per GPU-hour (repeatable; default: profile).",
        show_default=False,
    ),  # fmt: skip
]
NoCurveOpt = Annotated[
    bool,
    typer.Option("--no-load-curve", help="Skip refining the single-node load curve (faster)."),
]
PlanOutOpt = Annotated[
    Path | None, typer.Option("--out", "-o", help="Write plan.json here.", show_default=False)
]


def _items(text: str, what: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not items:
        raise ConfigError(f"--{what} is empty", hint=f"pass a comma list, e.g. --{what} a,b")
    return items


def _prices(pairs: list[str] | None) -> tuple[tuple[str, float], ...]:
    out = []
    for p in pairs or []:
        gpu, sep, usd = p.partition("=")
        try:
            out.append((gpu.strip(), float(usd)))
        except ValueError:
            sep = ""
        if not sep or not gpu.strip():
            raise ConfigError(f"--cost-per-hour {p!r} is not GPU=USD",
                              hint="e.g. --cost-per-hour h100-80g=3.5")  # fmt: skip
    return tuple(out)


def plan_command(
    trace: TraceArg,
    out: PlanOutOpt = None,
    gpus: GpusOpt = ",".join(PLAN.gpus),
    model: ModelOpt = PLAN.model,
    latency: LatencyOpt = None,
    slo_ms: SloMsOpt = PLAN.slo_ms,
    attainment: AttainmentOpt = PLAN.attainment,
    policies: PoliciesOpt = None,
    routers: RoutersOpt = ",".join(PLAN.routers),
    peak_qps: PeakQpsOpt = None,
    scale: ScaleOpt = None,
    scale_by: ScaleByOpt = PLAN.scale_by,
    max_nodes: MaxNodesOpt = PLAN.max_nodes,
    cost_per_hour: CostOpt = None,
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    window_s: WindowSOpt = NODE.window_s,
    slots: SlotsOpt = NODE.slots,
    batch_max: BatchMaxOpt = NODE.batch_max,
    batch_timeout_ms: BatchTimeoutOpt = NODE.batch_timeout_ms,
    batching: BatchingOpt = NODE.batching,
    no_load_curve: NoCurveOpt = False,
    seed: SeedOpt = PLAN.seed,
    spill_dir: SpillDirOpt = None,
    workers: WorkersOpt = EXECUTOR.workers,
    executor: ExecutorOpt = EXECUTOR.kind,
    ray_address: RayAddressOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Find the fewest GPUs per GPU × policy × router that hold P99 within --slo-ms for TRACE."""
    guard(inputs=[trace, model, latency, *comma_items(gpus)], policies=comma_items(policies),
          outputs={"-o": out})  # fmt: skip
    node = NodeConfig(window_s=window_s, slots=slots, batch_max=batch_max,
                          batch_timeout_ms=batch_timeout_ms, batching=batching)  # fmt: skip
    cfg = PlanConfig(
        gpus=_items(gpus, "gpus"), model=model, latency=latency, slo_ms=slo_ms,
        attainment=attainment, policies=_items(policies, "policies") if policies else None,
        routers=_items(routers, "routers"), peak_qps=peak_qps, scale=scale, scale_by=scale_by,
        max_nodes=max_nodes, cost_per_hour=_prices(cost_per_hour), pool_bytes=pool_bytes,
        pool_fraction=pool_fraction, node=node, load_curve=not no_load_curve, seed=seed,
        spill_dir=None if spill_dir is None else str(spill_dir),
    )  # fmt: skip
    ex = executors.get_executor(executor, workers, ray_address)
    # streamed in batches: no table of the trace
    arrays = from_file(trace, seed=cfg.seed, spill_dir=cfg.spill_dir)
    with ex, task("planning", quiet=quiet or as_json) as prog:
        # with workers the driver reads the workers' copy, and the plan's contexts and load
        # points reference its arrays instead of copying them
        arrays = ex.share(arrays)
        res = plan(arrays, cfg, executor=ex, progress=prog)
    doc = plan_doc(res) | {"trace": str(trace)}
    if out is not None:
        write_json(out, doc, strict=True)
    if as_json:
        emit_json("plan", doc)
        return
    _print(res)
    if out is not None:
        emit_table(f"wrote {out}")


def _fmt(v, f: str) -> str:
    return "-" if v is None or v != v else f.format(v)


def _print(res) -> None:
    t = Table(title=f"capacity at P99 <= {res.slo_ms:g} ms for {res.config.attainment:.1%} "
                    "of requests", box=box.MARKDOWN, pad_edge=False)  # fmt: skip
    cols = [("gpu", "gpu", "{}"), ("policy", "policy", "{}"), ("router", "router", "{}"),
            ("nodes", "nodes", "{}"), ("P99 ms", "p99_ms", "{:.3g}"),
            ("P99@N-1", "p99_ms_one_less", "{:.3g}"), ("$/day", "usd_per_day", "{:,.0f}"),
            ("$/M req", "usd_per_million_requests", "{:.3g}"),
            ("saved", "nodes_saved", "{:+d}")]  # fmt: skip
    for h, _, _ in cols:
        text = h in ("gpu", "policy", "router")
        t.add_column(h, justify="left" if text else "right", no_wrap=text)
    for row in res.capacity.sort(["gpu", "nodes", "p99_ms"], nulls_last=True).iter_rows(named=True):
        cells = [_fmt(row[k], f) for _, k, f in cols]
        if row["baseline"]:
            cells[-1] = "base"  # savings are measured from this row
        if row["non_monotone"]:
            cells[3] += " *"
        t.add_row(*cells)
    emit_table(t, *res.answer)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("plan")(plan_command)
