"""`helm-plan validate`: a controller closed loop against the oracle schedule and best static.

The figures are those of :func:`helm_plan.controller.training.validate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from helm_plan_cli.options import (
    JsonOpt,
    PoolFractionOpt,
    QuietOpt,
    SeedOpt,
    SloMsOpt,
    WindowSOpt,
)
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan import regimes
from helm_plan.controller import training
from helm_plan.controller.runtime import Controller
from helm_plan.sim import NodeConfig, load_context

InputsArg = Annotated[
    list[Path],
    typer.Argument(help="Canonical traces (.parquet) or label sets (.npz from --save-labels).",
                   show_default=False),
]  # fmt: skip
TracesArg = Annotated[list[Path], typer.Argument(help="Canonical traces.", show_default=False)]
ControllerArg = Annotated[Path, typer.Argument(help="Controller .npz (from `helm-plan train`).")]
TimestepsOpt = Annotated[int, typer.Option("--timesteps", help="PPO environment steps.")]
SaveLabelsOpt = Annotated[
    Path | None, typer.Option("--save-labels", help="Also write the label set (.npz) here.")
]
AblationOpt = Annotated[
    bool, typer.Option("--ablation/--no-ablation", help="Also run base and base+adapter.")
]


def _contexts(paths: list[Path], pool_fraction: float | None, seed: int):
    for p in paths:
        yield str(p), load_context(p, pool_fraction=pool_fraction, seed=seed)


def validate(
    controller: ControllerArg,
    traces: TracesArg,
    seed: SeedOpt = 0,
    window_s: WindowSOpt = training.DEFAULT_NODE.window_s,
    slo_ms: SloMsOpt = training.DEFAULT_NODE.slo_ms,
    pool_fraction: PoolFractionOpt = None,
    ablation: AblationOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run CONTROLLER closed loop on TRACE... against the oracle schedule and best static."""
    ctrl = Controller.load(controller)
    ncfg = NodeConfig(window_s=window_s, slo_ms=slo_ms)
    figs = []
    with task("validating", quiet=quiet or as_json) as progress:
        for i, (name, ctx) in enumerate(_contexts(traces, pool_fraction, seed)):
            spans = regimes.read_spans(name)
            figs.append(training.validate(ctrl, ctx, name, ncfg, ablation=ablation,
                                          spans=spans).figures)  # fmt: skip
            progress(i + 1, len(traces))
    if as_json:
        emit_json("validate", {"controller": str(controller), "traces": figs})
        return
    t = Table(title=f"controller {controller} (|r - r*| over windows with a flat band < "
                    f"{training.NARROW_BAND:g}; elsewhere r* is arbitrary)")  # fmt: skip
    cols = ["trace", "P99 ms", "oracle", "best static", "regret", "vs static", "|r-r*|",
            "narrow w", "step µs p50/p99"]  # fmt: skip
    for c in cols:
        t.add_column(c, justify="left" if c == "trace" else "right")
    for f in figs:
        t.add_row(
            Path(f["trace"]).name, f"{f['p99_ms']:.3f}", f"{f['oracle_p99_ms']:.3f}",
            f"{f['best_static_p99_ms']:.3f}", f"{f['regret_vs_oracle']:+.1%}",
            f"{f['vs_best_static']:+.1%}",
            "n/a" if np.isnan(f["abs_dr_narrow"]) else f"{f['abs_dr_narrow']:.3f}",
            str(f["narrow_windows"]),
            f"{f['latency_median_us']:.1f}/{f['latency_p99_us']:.1f}",
        )  # fmt: skip
    emit_table(t, *[regime_rich(f) for f in figs if f.get("regimes")])


def regime_rich(f: dict) -> Table:
    """One trace's per-regime figures (P99 ms and SLO attainment per policy) as a table."""
    t = Table(title=f"{Path(f['trace']).name}: P99 ms (SLO attainment) per regime")
    pols = list(dict.fromkeys(r["policy"] for r in f["regimes"]))
    t.add_column("regime")
    for p in pols:
        t.add_column(p, justify="right")
    for reg in dict.fromkeys(r["regime"] for r in f["regimes"]):
        cell = {r["policy"]: r for r in f["regimes"] if r["regime"] == reg}
        t.add_row(
            reg, *[f"{cell[p]['p99_ms']:.3f} ({cell[p]['slo_attainment']:.1%})" for p in pols]
        )
    return t


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("validate")(validate)
