"""`helm-plan synth`: write a synthetic canonical trace (fitted --like a real one, or a named scenario)."""

from __future__ import annotations

import dataclasses
import time
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    DurationSOpt,
    JsonOpt,
    OutOpt,
    QpsOpt,
    QuietOpt,
    RegimeOpt,
    SeedOpt,
)
from helm_plan_cli.output import emit_json, emit_line
from helm_plan_cli.progress import task

from helm_plan import synth
from helm_plan.config import from_dict
from helm_plan.errors import ConfigError
from helm_plan.mixshift import parse_shift

SYNTH = synth.SynthConfig()
"""The synth knobs' defaults, read once here."""


def _opt(flag: str, help_: str) -> Any:
    return typer.Option(flag, help=help_)


def _knob(flag: str, help_: str) -> Any:
    """An option setting the SynthConfig field of the same name; --help shows its default."""
    value = getattr(SYNTH, flag.removeprefix("--").replace("-", "_"))
    shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
    return typer.Option(flag, help=f"{help_} (default: {shown}).")


def synth_command(
    out: OutOpt,
    regime: RegimeOpt = None,
    qps: QpsOpt = None,
    duration_s: DurationSOpt = None,
    users: Annotated[
        int | None,
        _opt("--users", "Expected distinct users outside bursts (default: one per 12 requests)."),
    ] = None,
    items: Annotated[int | None, _knob("--items", "Item catalog size")] = None,
    zipf_alpha: Annotated[
        float | None, _knob("--zipf-alpha", "Item popularity skew, P(rank k) ~ k^-alpha")
    ] = None,
    candidates: Annotated[
        int | None, _knob("--candidates", "n_candidates per request, 0 allowed")
    ] = None,
    max_seq_len: Annotated[
        int | None, _knob("--max-seq-len", "Cap on each user's history, tokens")
    ] = None,
    returning_share: Annotated[
        float | None,
        _knob(
            "--returning-share",
            "Share of users (outside bursts) active before the trace; their first request "
            "carries their pre-existing history",
        ),
    ] = None,
    returning_history_mean: Annotated[
        float | None,
        _knob("--returning-history-mean", "Mean pre-existing history of a returning user, tokens"),
    ] = None,
    burst_cold_share: Annotated[
        float | None,
        _knob("--burst-cold-share", "Share of burst requests from users new to the trace"),
    ] = None,
    burst_new_item_share: Annotated[
        float | None,
        _knob(
            "--burst-new-item-share",
            "Share of burst items that are new items, never seen before the burst",
        ),
    ] = None,
    sets: Annotated[
        list[str] | None,
        _opt(
            "--set",
            "KEY=VALUE: any other synth knob (README, synth), or a --scenario option; repeatable.",
        ),
    ] = None,
    scenario: Annotated[
        str | None,
        _opt(
            "--scenario",
            "Named scenario with a known answer: detectability (the best split moves) or flat "
            "(it never does); with --qps, --duration-s, --candidates, --max-seq-len, --seed, "
            "--set.",
        ),
    ] = None,
    like: Annotated[
        Path | None,
        _opt(
            "--like",
            "Fit popularity skew, catalog, revisit gaps, item counts and cold share from this trace.",
        ),
    ] = None,
    scale: Annotated[
        float,
        _opt("--scale", "With --like: multiply the fitted users, QPS and catalog."),
    ] = synth.LIKE_SCALE,
    shift: Annotated[
        list[str] | None,
        _opt(
            "--shift",
            "With --like: mix shift in each burst, KIND=SHARE, repeatable: flash-crowd (share "
            "of burst requests from new users), new-items (share of burst items new to the "
            "catalogue), returning-wave (share of burst requests from users returning with "
            "their history). Bursts follow --regime (default burst) and --set burst_*.",
        ),
    ] = None,
    seed: SeedOpt = SYNTH.seed,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Generate a synthetic trace: Zipf items with drift, returning, revisiting and cold users, regimes."""
    guard(inputs=[like], outputs={"-o": out})
    quiet = quiet or as_json
    given: dict[str, Any] = {
        "regime": regime,
        "qps": qps,
        "duration_s": duration_s,
        "users": users,
        "items": items,
        "zipf_alpha": zipf_alpha,
        "candidates": candidates,
        "max_seq_len": max_seq_len,
        "returning_share": returning_share,
        "returning_history_mean": returning_history_mean,
        "burst_cold_share": burst_cold_share,
        "burst_new_item_share": burst_new_item_share,
        "seed": seed,
    }
    extra = _parse_sets(sets or [])
    t0 = time.perf_counter()
    if scenario is not None:
        res, what = _write_scenario(out, scenario, given, like, extra, quiet)
    else:
        clash = sorted(set(extra) & {k for k, v in given.items() if v is not None and k != "seed"})
        if clash:
            raise ConfigError(
                f"--set {clash[0]} repeats an option given as a flag", hint="give it once"
            )
        fitted = None
        shifts = tuple(parse_shift(s) for s in shift or ())
        if shifts and like is None:
            raise ConfigError("--shift needs --like",
                              hint="without --like set the bursts' mix with --burst-cold-share, "
                              "--burst-new-item-share and --set burst_returning_share=...")  # fmt: skip
        if like is not None:
            with task("fit --like", quiet=quiet) as update:
                fitted = synth.fit(like, progress=update)
            cfg = synth.like_config(fitted, scale=scale, shifts=shifts, **{**given, **extra})
        else:
            kw = {k: v for k, v in given.items() if v is not None}
            cfg = from_dict(synth.SynthConfig, {**kw, **extra})
        with task("synth", quiet=quiet) as update:
            like_doc = None
            if fitted is not None:
                like_doc = fitted.to_json()
                if shifts:
                    like_doc["mix_shifts"] = [s.text() for s in shifts]
            res = synth.write(cfg, out, like=like_doc, progress=update)
        what = f"regime {cfg.regime}, qps {cfg.qps:g}, {cfg.duration_s:g} s, seed {cfg.seed}"
    if as_json:
        emit_json(
            "synth",
            {
                "out": str(res.path),
                "requests": res.requests,
                "users": res.users,
                "history_tokens": res.history_tokens,
                "bursts": [list(b) for b in res.bursts],
                "what": what,
                "seconds": time.perf_counter() - t0,
            },
        )
        return
    emit_line(
        f"wrote {res.path}: {res.requests:,} requests, {res.users:,} users, "
        f"{res.history_tokens:,} history items, {what} ({time.perf_counter() - t0:.1f} s)"
    )


def _write_scenario(
    out: Path,
    name: str,
    given: dict[str, Any],
    like: Path | None,
    extra: dict[str, Any],
    quiet: bool,
) -> tuple[synth.SynthResult, str]:
    allowed = {"qps", "duration_s", "candidates", "max_seq_len", "seed"}
    bad = [k for k, v in given.items() if v is not None and k not in allowed]
    if like is not None or bad:
        flag = "--like" if like is not None else "--" + bad[0].replace("_", "-")
        raise ConfigError(
            f"{flag} cannot be combined with --scenario",
            hint="set scenario options with --set KEY=VALUE (README, synth scenarios)",
        )
    opts = {k: given[k] for k in allowed - {"duration_s"}}
    opts.update(extra)
    fields = {
        f.name
        for f in dataclasses.fields(synth.SCENARIOS.get(name, (synth.DetectabilityConfig,))[0])
    }
    if given["duration_s"] is not None and "duration_s" in fields:
        opts["duration_s"] = given["duration_s"]
    elif given["duration_s"] is not None:  # the whole scenario: split evenly over its phases
        if "phase_s" in extra:
            raise ConfigError(
                "--duration-s and --set phase_s both set the phase length",
                hint="give one: --duration-s is split evenly over the phases",
            )
        phases = extra.get("phases", synth.DetectabilityConfig.phases)
        if isinstance(phases, int) and phases > 0:
            opts["phase_s"] = given["duration_s"] / phases
    sc = synth.scenario(name, **opts)
    with task("synth", quiet=quiet) as update:
        res = synth.write_scenario(sc, out, progress=update)
    return res, f"scenario {name}, {len(sc.phases)} phases, {sc.duration_s:g} s"


def _parse_sets(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; VALUE is a TOML value (number, true/false, "string") or a bare word."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--set {item!r} is not KEY=VALUE", hint="e.g. --set bursts=6")
        try:
            out[key] = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw.strip()  # a bare word, e.g. --set regime=burst
    return out


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("synth")(synth_command)
