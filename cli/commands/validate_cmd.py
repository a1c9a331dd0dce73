"""`helm-plan validate`: a controller closed loop against the oracle schedule and best static.

The figures are those of :func:`helm_plan.controller.validation.validate`.
"""

from __future__ import annotations

from pathlib import Path

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
from helm_plan_cli.output import emit_json, emit_line, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan import regimes
from helm_plan.controller import training, validation
from helm_plan.controller.features import NARROW_BAND
from helm_plan.controller.runtime import Controller


def validate(
    controller: ControllerArg,
    traces: ControllerTracesArg,
    seed: SeedOpt = training.LABEL_ORACLE.seed,
    window_s: WindowSOpt = training.DEFAULT_NODE.window_s,
    slo_ms: SloMsOpt = training.DEFAULT_NODE.slo_ms,
    pool_fraction: PoolFractionOpt = None,
    ablation: AblationOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run CONTROLLER closed loop on TRACE... against best static, the oracle and simple rules."""
    ctrl = Controller.load(controller)
    ncfg = controller_node(window_s, slo_ms)
    vals = []
    with task("validating", quiet=quiet or as_json) as progress:
        for i, (name, ctx) in enumerate(trace_contexts(traces, pool_fraction, seed)):
            vals.append(validation.validate(ctrl, ctx, name, ncfg.for_context(ctx),
                                            ablation=ablation, seed=seed,
                                            spans=regimes.read_spans(name)))  # fmt: skip
            progress(i + 1, len(traces))
    card_lat = ctrl.card.get("decision_latency_us")
    if as_json:
        emit_json("validate", {"controller": str(controller), "card_latency_us": card_lat,
                               "traces": [v.figures() for v in vals]})  # fmt: skip
        return
    t = Table(title=f"controller {controller}: gains are 1 - P99/P99 of the peer over measured "
                    f"windows; |r - r*| over windows with a flat band < {NARROW_BAND:g}; "
                    f"|r - band|: to the nearest r of that band resolved on the lattice, over "
                    f"the windows it leaves < {NARROW_BAND:g}")  # fmt: skip
    for c in validation.COLUMNS:
        t.add_column(c, justify="left" if c == "trace" else "right")
    for row in validation.format_rows(vals):
        t.add_row(Path(row[0]).name, *row[1:])
    emit_table(t, *[regime_rich(v.figures()) for v in vals if v.regimes])
    for v in vals:
        emit_table(validation.verdict(v))
    card = (f"; the controller's card records {card_lat['median']:.1f} / {card_lat['p99']:.1f} "
            "µs (median / p99, the card's figure)" if card_lat else "")  # fmt: skip
    emit_line(f"decision latency above: measured in this run by the runtime's own timer{card}")


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
