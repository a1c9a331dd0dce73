"""`helm-plan validate`: a controller closed loop against the oracle schedule and best static.

The figures are those of :func:`helm_plan.controller.training.validate`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from helm_plan_cli.options import (
    AblationOpt,
    ControllerArg,
    ControllerTracesArg,
    JsonOpt,
    PoolFractionOpt,
    QuietOpt,
    SeedOpt,
    SloMsOpt,
    WindowSOpt,
    controller_node,
    trace_contexts,
)
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan.controller import training
from helm_plan.controller.runtime import Controller


def validate(
    controller: ControllerArg,
    traces: ControllerTracesArg,
    seed: SeedOpt = training.DEFAULT_ORACLE.seed,
    window_s: WindowSOpt = training.DEFAULT_NODE.window_s,
    slo_ms: SloMsOpt = training.DEFAULT_NODE.slo_ms,
    pool_fraction: PoolFractionOpt = None,
    ablation: AblationOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run CONTROLLER closed loop on TRACE... against the oracle schedule and best static."""
    ctrl = Controller.load(controller)
    ncfg = controller_node(window_s, slo_ms)
    figs = []
    with task("validating", quiet=quiet or as_json) as progress:
        for i, (name, ctx) in enumerate(trace_contexts(traces, pool_fraction, seed)):
            v = training.validate(ctrl, ctx, name, ncfg, ablation=ablation)
            figs.append({**v.figures, "slo_ms": ncfg.for_context(ctx).slo_ms})
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
    emit_table(t)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("validate")(validate)
