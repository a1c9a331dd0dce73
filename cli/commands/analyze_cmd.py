"""`helm-plan analyze`: the end-to-end run (inspect, curves, oracle, policies, report)."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    DemoOpt,
    ExecutorOptionalOpt,
    GpuOptionalOpt,
    GpusListOpt,
    JsonOpt,
    LatencyOpt,
    ModelProfileOptionalOpt,
    NoCapacityOpt,
    PeakQpsOpt,
    PlanFileOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    RayAddressOpt,
    RunDirOpt,
    ScaleByOpt,
    ScaleOpt,
    SeedOptionalOpt,
    SloMsOpt,
    SpillDirOpt,
    WindowSOptionalOpt,
    WorkersOptionalOpt,
)
from helm_plan_cli.output import emit_json, emit_notes, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan import analyze
from helm_plan.config import load_plan
from helm_plan.errors import ConfigError
from helm_plan.report import REPORT_NAME, STORE_NAME
from helm_plan.report.html import pct_text
from helm_plan.report.summary import headroom_text
from helm_plan.rundir import RECORD

#: Files `analyze` writes into its run directory (docs/summary-schema.md).
RUN_FILES = (REPORT_NAME, "summary.json", STORE_NAME, "labels.parquet", RECORD)


def _pct(v: float | None) -> str:
    return "-" if v is None else pct_text(v)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f} ms"


def headline_table(res: analyze.AnalyzeResult) -> Table:
    """The short table of headline figures printed at the end of a run."""
    s = res.summary
    bs, orc, voa = s["best_static"], s["oracle"], s["value_of_adaptivity"]
    pols = {p["name"]: p for p in s["policies"]}
    t = Table(title=f"helm-plan analyze: {res.out_dir}", show_header=True)
    t.add_column("figure")
    t.add_column("value", justify="right")
    cap = s.get("capacity") or {}
    sc = cap.get("scaling") or {}
    if sc:
        asked = f" (asked {sc['peak_qps_target']:,.0f})" if sc.get("peak_qps_target") else ""
        t.add_row("planned traffic", f"{sc['peak_qps_after']:,.0f} req/s peak{asked}, "
                  f"{sc['qps_after']:,.0f} mean; x{sc['factor']:.3g} by {sc['method']}")  # fmt: skip
    for g in cap.get("gpus", []):
        if g["nodes"] is None:
            t.add_row(f"{g['gpu']}", "no fleet meets the SLO")
            continue
        room = "" if g["headroom"] is None else f", headroom {headroom_text(g)}"
        mark = " (cheapest)" if g["cheapest"] else ""
        nodes = f"{g['nodes']} node" + ("" if g["nodes"] == 1 else "s")
        t.add_row(f"{g['gpu']}{mark}",
                  f"{nodes} ({g['policy']}, {g['router']}): ${g['usd_per_day']:,.0f}/day, "
                  f"${g['usd_per_million_requests']:.3g}/M req{room}")  # fmt: skip
    t.add_row("best static r", f"{bs['ratio']:.2f}" if bs["ratio"] is not None else "-")
    t.add_row(
        "best static P99 / SLO attainment", f"{_ms(bs['p99_ms'])} / {_pct(bs['slo_attainment'])}"
    )
    ad = pols.get("adaptive", {})
    t.add_row("adaptive P99 / SLO attainment",
              f"{_ms(ad.get('p99_ms'))} / {_pct(ad.get('slo_attainment'))}")  # fmt: skip
    t.add_row(
        "P99 reduction vs best static",
        f"{_pct(voa['p99_reduction'])} (CI {_pct(voa['ci_low'])} .. {_pct(voa['ci_high'])})",
    )
    if orc["ratio_min"] is not None:
        t.add_row("oracle r* range", f"{orc['ratio_min']:.2f} .. {orc['ratio_max']:.2f}")
    t.add_row("oracle P99", _ms(orc["p99_ms"]))
    cached = [r.name for r in res.stages if r.cached]
    t.add_row("stages reused", ", ".join(cached) if cached else "none")
    t.add_row("total time", f"{sum(r.seconds for r in res.stages):.1f} s")
    t.add_row("report", str(res.report_path))
    return t


def analyze_command(
    trace: Path | None = typer.Argument(
        None, help="Canonical request trace (parquet); omit with --demo.", show_default=False
    ),
    out: RunDirOpt = None,
    gpu: GpuOptionalOpt = None,
    model: ModelProfileOptionalOpt = None,
    latency: LatencyOpt = None,
    slo_ms: SloMsOpt = None,
    window_s: WindowSOptionalOpt = None,
    pool_bytes: PoolBytesOpt = None,
    pool_fraction: PoolFractionOpt = None,
    config: PlanFileOpt = None,
    workers: WorkersOptionalOpt = None,
    executor: ExecutorOptionalOpt = None,
    ray_address: RayAddressOpt = None,
    seed: SeedOptionalOpt = None,
    peak_qps: PeakQpsOpt = None,
    scale: ScaleOpt = None,
    scale_by: ScaleByOpt = None,
    gpus: GpusListOpt = None,
    no_capacity: NoCapacityOpt = False,
    spill_dir: SpillDirOpt = None,
    demo: DemoOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Analyze a trace end to end and write report.html, summary.json, helm.duckdb, labels.parquet."""
    quiet = quiet or as_json
    if demo and trace is not None:
        raise ConfigError(
            "give a TRACE or --demo, not both", hint="drop TRACE to analyse the demo trace"
        )
    if not demo and trace is None:
        raise ConfigError(
            "missing TRACE", hint="pass a trace parquet, or --demo for the demo trace"
        )
    plan = load_plan(config) if config is not None else {}
    if demo:
        plan = analyze.demo_plan(plan, cold=analyze.warm.cold())
    # every option named like an [analyze] field overrides it (None: not given)
    given = dict(locals())
    overrides = {f.name: given[f.name] for f in dataclasses.fields(analyze.AnalyzeConfig)
                 if f.name in given}  # fmt: skip
    overrides |= {"capacity": False if no_capacity else None,
                  "spill_dir": None if spill_dir is None else str(spill_dir),
                  "gpus": None if gpus is None else tuple(g for g in gpus.split(",") if g)}  # fmt: skip
    if pool_bytes is not None:
        overrides["pool_fraction"] = None
        plan.get("analyze", {}).pop("pool_fraction", None)
    cfg = analyze.build_config(plan, overrides)
    out_dir = out or (Path("reports/out/demo") if demo else Path("reports/out") / trace.stem)
    # the profiles the plan file names are inputs too, and so is a controller:FILE policy
    guard(inputs=[trace, config, cfg.gpu, cfg.model, cfg.latency, *(cfg.gpus or ())],
          policies=cfg.plan_policies,
          run_dir=out_dir, run_files=RUN_FILES)  # fmt: skip
    if demo:
        with task("demo trace", quiet=quiet) as tick:
            trace = analyze.prepare_demo(out_dir, analyze.demo_synth_config(plan, seed))
            tick(1, 1)
    assert trace is not None
    res = analyze.run_analyze(
        trace, cfg, out_dir,
        progress_factory=lambda label: task(label, quiet=quiet),
        command=shlex.join(["helm-plan", *sys.argv[1:]]) if sys.argv else "",
    )  # fmt: skip
    if as_json:
        emit_json(
            "analyze",
            {
                "out_dir": str(res.out_dir),
                "report": str(res.report_path),
                "summary_path": str(res.summary_path),
                "store": str(res.store_path),
                "labels": str(res.labels_path),
                "stages": [
                    {"stage": r.name, "cached": r.cached, "seconds": r.seconds} for r in res.stages
                ],
                "notes": list(res.notes),
                "summary": res.summary,
            },
        )
        return
    emit_notes(res.notes)
    emit_table(headline_table(res))


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("analyze")(analyze_command)
