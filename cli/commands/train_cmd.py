"""`helm-plan train`: train the three-layer controller (helm_plan.controller).

Labels every trace (the full carry oracle: grid, edge points, Optuna trials) or reads label sets
(``.npz`` from ``--save-labels``), trains layer 1 with PPO and writes the
controller ``.npz`` with its card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.options import (
    JsonOpt,
    OutOpt,
    PoolFractionOpt,
    QuietOpt,
    SeedOpt,
    SloMsOptionalOpt,
    WindowSOpt,
)
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task

from helm_plan.controller import dataset, training
from helm_plan.controller.runtime import save
from helm_plan.errors import ConfigError
from helm_plan.io import check_output
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


def train(
    inputs: InputsArg,
    out: OutOpt,
    seed: SeedOpt = 0,
    timesteps: TimestepsOpt = 300_000,
    window_s: WindowSOpt = training.WINDOW_S,
    slo_ms: SloMsOptionalOpt = None,
    pool_fraction: PoolFractionOpt = None,
    save_labels: SaveLabelsOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train a controller on TRACE_OR_LABELS... and write it to -o (a .npz with its card)."""
    from helm_plan.controller.ppo import Args

    check_output(out, *inputs)
    args = Args(seed=seed, total_timesteps=timesteps)  # checks the options first
    traces: list[dataset.LabelTrace] = []
    to_label = [p for p in inputs if p.suffix != ".npz"]
    for p in inputs:
        if p.suffix == ".npz":
            traces += dataset.load(p)
    if to_label:
        with task("labelling traces", quiet=quiet or as_json) as progress:
            named = list(_contexts(to_label, pool_fraction, seed, window_s, slo_ms))
            traces += training.label_traces(named, progress=progress)
    if save_labels is not None:
        dataset.save(traces, save_labels)
    if not traces:
        raise ConfigError("no traces to train on", hint="pass traces or label sets")
    with task("training (PPO)", quiet=quiet or as_json) as progress:
        ctrl, res = training.fit(traces, args, progress)
    path = save(ctrl, out)
    doc = {
        "out": str(path),
        "seed": seed,
        "timesteps": timesteps,
        "traces": [t.name for t in traces],
        "windows": int(sum(t.n_windows for t in traces)),
        "train_seconds": res.seconds,
        "mean_episode_return": res.mean_episode_return,
    }
    if as_json:
        emit_json("train", doc)
        return
    emit_table(
        f"wrote {path}: trained on {len(traces)} traces ({doc['windows']} windows) "
        f"in {res.seconds:.1f} s, seed {seed}"
    )


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("train")(train)
