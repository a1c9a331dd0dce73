"""`helm-plan validate`: a controller closed loop against the oracle schedule and best static.

The figures are those of :func:`helm_plan.controller.validation.validate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.options import (
    JsonOpt,
    PoolFractionOpt,
    QuietOpt,
    SeedOpt,
    SloMsOptionalOpt,
    WindowSOpt,
)
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan.controller import training, validation
from helm_plan.controller.features import NARROW_BAND
from helm_plan.controller.runtime import Controller
from helm_plan.profiles import resolve_slo_ms
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


def _contexts(paths: list[Path], pool_fraction: float | None, seed: int, window_s: float,
              slo_ms: float | None):  # fmt: skip
    for p in paths:
        ctx = load_context(p, pool_fraction=pool_fraction, seed=seed)
        yield str(p), ctx, NodeConfig(window_s=window_s, slo_ms=resolve_slo_ms(ctx.model, slo_ms))


def validate(
    controller: ControllerArg,
    traces: TracesArg,
    seed: SeedOpt = 0,
    window_s: WindowSOpt = training.WINDOW_S,
    slo_ms: SloMsOptionalOpt = None,
    pool_fraction: PoolFractionOpt = None,
    ablation: AblationOpt = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run CONTROLLER closed loop on TRACE... against best static, the oracle and simple rules."""
    ctrl = Controller.load(controller)
    vals = []
    with task("validating", quiet=quiet or as_json) as progress:
        for i, (name, ctx, ncfg) in enumerate(_contexts(traces, pool_fraction, seed, window_s,
                                                        slo_ms)):  # fmt: skip
            vals.append(validation.validate(ctrl, ctx, name, ncfg, ablation=ablation, seed=seed))
            progress(i + 1, len(traces))
    card_lat = ctrl.card.get("decision_latency_us")
    if as_json:
        emit_json("validate", {"controller": str(controller), "card_latency_us": card_lat,
                               "traces": [v.figures() for v in vals]})  # fmt: skip
        return
    t = Table(title=f"controller {controller}: gains are 1 - P99/P99 of the peer over measured "
                    f"windows; |r - r*| over windows with a flat band < {NARROW_BAND:g}")  # fmt: skip
    for c in validation.COLUMNS:
        t.add_column(c, justify="left" if c == "trace" else "right")
    for row in validation.format_rows(vals):
        t.add_row(Path(row[0]).name, *row[1:])
    emit_table(t)
    for v in vals:
        emit_table(validation.verdict(v))
    card = (f"; the controller's card records {card_lat['median']:.1f} / {card_lat['p99']:.1f} "
            "µs (median / p99, the card's figure)" if card_lat else "")  # fmt: skip
    emit_table(f"decision latency above: measured in this run by the runtime's own timer{card}")


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("validate")(validate)
