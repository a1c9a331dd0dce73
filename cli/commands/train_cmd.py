"""`helm-plan train`: train the three-layer controller (helm_plan.controller).

Labels every trace (the full carry oracle: grid, edge points, Optuna trials) or reads label sets
(``.npz`` from ``--save-labels``), trains layer 1 with PPO and writes the
controller ``.npz`` with its card.
"""

from __future__ import annotations

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    ControllerInputsArg,
    JsonOpt,
    OutOpt,
    PoolFractionOpt,
    QuietOpt,
    SaveLabelsOpt,
    SeedOpt,
    SloMsOpt,
    TimestepsOpt,
    WindowSOpt,
    controller_node,
    trace_contexts,
)
from helm_plan_cli.output import emit_json, emit_line
from helm_plan_cli.progress import task

from helm_plan.controller import dataset, training
from helm_plan.controller.runtime import save
from helm_plan.errors import ConfigError


def train(
    inputs: ControllerInputsArg,
    out: OutOpt,
    seed: SeedOpt = training.LABEL_ORACLE.seed,
    timesteps: TimestepsOpt = None,
    window_s: WindowSOpt = training.DEFAULT_NODE.window_s,
    slo_ms: SloMsOpt = training.DEFAULT_NODE.slo_ms,
    pool_fraction: PoolFractionOpt = None,
    save_labels: SaveLabelsOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train a controller on TRACE_OR_LABELS... and write it to -o (a .npz with its card)."""
    guard(inputs=inputs, outputs={"-o": out, "--save-labels": save_labels})
    from helm_plan.controller.ppo import Args

    steps = {} if timesteps is None else {"total_timesteps": timesteps}
    args = Args(seed=seed, **steps)  # checks the options first
    ncfg = controller_node(window_s, slo_ms)
    traces: list[dataset.LabelTrace] = []
    to_label = [p for p in inputs if p.suffix != ".npz"]  # traces; .npz are label sets
    for p in inputs:
        if p.suffix == ".npz":
            traces += dataset.load(p)
    named = list(trace_contexts(to_label, pool_fraction, seed))
    windows = [(t.name, t.n_windows) for t in traces]
    windows += [(name, ctx.n_windows(ncfg.window_s)) for name, ctx in named]
    for name, n in windows:  # before any labelling: PPO steps from one window to the next
        if n < 2:
            raise ConfigError(
                f"{name} spans {n} window of {ncfg.window_s:g} s; training needs 2 or more",
                hint="pass a longer trace, or a shorter --window-s",
            )
    if named:
        with task("labelling traces", quiet=quiet or as_json) as progress:
            named = [(n, c, ncfg.for_context(c)) for n, c in named]
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
        "timesteps": args.total_timesteps,
        "traces": [t.name for t in traces],
        "windows": int(sum(t.n_windows for t in traces)),
        "slo_ms": sorted({t.slo_ms for t in traces}),
        "train_seconds": res.seconds,
        "mean_episode_return": res.mean_episode_return,
    }
    if as_json:
        emit_json("train", doc)
        return
    emit_line(
        f"wrote {path}: trained on {len(traces)} traces ({doc['windows']} windows) "
        f"in {res.seconds:.1f} s, seed {seed}"
    )


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("train")(train)
