"""`helm-plan synth`: write a synthetic canonical trace (optionally fitted --like a real one)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from helm_plan_cli.options import DurationSOpt, OutOpt, QpsOpt, QuietOpt, RegimeOpt, SeedOpt
from helm_plan_cli.progress import task

from helm_plan import synth


def synth_command(
    out: OutOpt,
    regime: RegimeOpt = None,
    qps: QpsOpt = None,
    duration_s: DurationSOpt = None,
    users: Annotated[
        int | None,
        typer.Option(
            "--users", help="Expected distinct users outside bursts (default: one per 12 requests)."
        ),
    ] = None,
    items: Annotated[
        int | None, typer.Option("--items", help="Item catalog size (default: 1000000).")
    ] = None,
    zipf_alpha: Annotated[
        float | None,
        typer.Option(
            "--zipf-alpha", help="Item popularity skew, P(rank k) ~ k^-alpha (default: 1.0)."
        ),
    ] = None,
    candidates: Annotated[
        int | None,
        typer.Option("--candidates", help="n_candidates per request, 0 allowed (default: 512)."),
    ] = None,
    max_seq_len: Annotated[
        int | None,
        typer.Option("--max-seq-len", help="Cap on each user's history, tokens (default: 2048)."),
    ] = None,
    like: Annotated[
        Path | None,
        typer.Option(
            "--like",
            help="Fit popularity skew, revisit gaps, item counts and cold share from this trace.",
        ),
    ] = None,
    scale: Annotated[
        float,
        typer.Option("--scale", help="With --like: multiply the fitted users, items and QPS."),
    ] = 10.0,
    seed: SeedOpt = 0,
    quiet: QuietOpt = False,
) -> None:
    """Generate a synthetic trace: Zipf items with drift, revisiting and cold users, regimes."""
    given: dict[str, Any] = {
        "regime": regime,
        "qps": qps,
        "duration_s": duration_s,
        "users": users,
        "items": items,
        "zipf_alpha": zipf_alpha,
        "candidates": candidates,
        "max_seq_len": max_seq_len,
        "seed": seed,
    }
    fitted = None
    if like is not None:
        with task("fit --like", quiet=quiet) as update:
            fitted = synth.fit(like, progress=update)
        cfg = synth.like_config(fitted, scale=scale, **given)
    else:
        cfg = synth.SynthConfig(**{k: v for k, v in given.items() if v is not None})
    t0 = time.perf_counter()
    with task("synth", quiet=quiet) as update:
        res = synth.write(
            cfg, out, like=None if fitted is None else fitted.to_json(), progress=update
        )
    typer.echo(
        f"wrote {res.path}: {res.requests:,} requests, {res.users:,} users, "
        f"{res.history_tokens:,} history items, regime {cfg.regime}, qps {cfg.qps:g}, "
        f"{cfg.duration_s:g} s, seed {cfg.seed} ({time.perf_counter() - t0:.1f} s)"
    )


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("synth")(synth_command)
