"""Shared CLI options, defined once as ``Annotated`` aliases; defaults come from the configs.

No default is typed here or in a command: each is read from the config dataclass the
option sets (``NodeConfig``, ``ExecutorConfig``, ``AnalyzeConfig``, ...), so ``--help``
and the library cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

import typer

from helm_plan.analyze import AnalyzeConfig
from helm_plan.errors import ConfigError
from helm_plan.exec import ExecutorConfig
from helm_plan.profiles import DEFAULT_GPU, DEFAULT_MODEL
from helm_plan.sim import NodeConfig, NodeContext, load_context
from helm_plan.synth import SynthConfig

NODE = NodeConfig()
"""The node simulator's defaults (window_s, slots, refill, ...), read once here."""
EXECUTOR = ExecutorConfig()
"""Where parallel tasks run by default (kind, workers), read once here."""
ANALYZE = AnalyzeConfig()
"""analyze's defaults (its options default to None: the plan file, then these)."""

TraceArg = Annotated[
    Path, typer.Argument(help="Canonical request trace (parquet).", show_default=False)
]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output file.", show_default=False)]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU profile name or TOML path.")]
ModelOpt = Annotated[str, typer.Option("--model", help="Model profile name or TOML path.")]
LatencyOpt = Annotated[
    str | None,
    typer.Option(
        "--latency",
        help="Latency profile name or TOML path (default: the shipped GPU_MODEL profile).",
    ),
]
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def parse_bytes(text: str) -> int:
    """A byte count: ``80000000000``, ``8e10``, ``80GB`` or ``64GiB`` (whole bytes only)."""
    t = text.strip().lower().replace("_", "").replace(",", "")
    num = t.rstrip("kmgtib")
    unit = t[len(num) :]
    try:
        v = float(num) * _UNITS[unit]
    except (ValueError, KeyError):
        raise typer.BadParameter(
            f"{text!r} is not a byte count; write e.g. 80000000000, 8e10, 80GB or 64GiB"
        ) from None
    if not (math.isfinite(v) and v == int(v)):
        raise typer.BadParameter(f"{text!r} is not a whole number of bytes")
    return int(v)


PoolBytesOpt = Annotated[
    int | None,
    typer.Option(
        "--pool-bytes",
        help="Cache pool size in bytes, e.g. 8e10, 80GB or 64GiB (overrides HBM sizing).",
        parser=parse_bytes,
    ),
]
PoolFractionOpt = Annotated[
    float | None,
    typer.Option("--pool-fraction", help="Cache pool as a share of the trace's EMB+KV footprint."),
]
SLO_HELP = (
    "P99 latency SLO in milliseconds (default: the model profile's default_slo_ms, "
    "as `helm-plan profiles` lists it)."
)
"""The one SLO rule, as every command's --help states it (helm_plan.profiles.resolve_slo_ms)."""
SloMsOpt = Annotated[float | None, typer.Option("--slo-ms", help=SLO_HELP, show_default=False)]
WindowSOpt = Annotated[float, typer.Option("--window-s", help="Window length in seconds.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for every random choice.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON object instead of a table.")]
WorkersOpt = Annotated[
    int, typer.Option("--workers", help="Parallel worker processes (0 = all cores).")
]
ExecutorOpt = Annotated[
    str,
    typer.Option(
        "--executor",
        help="Where parallel tasks run: local (worker processes) or ray (a local Ray instance "
        "of --workers CPUs, or the cluster at --ray-address). Never changes a result.",
    ),
]
ExecutorOptionalOpt = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help=f"Where parallel tasks run: local or ray (default: {EXECUTOR.kind}). "
        "Never changes a result.",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="Ray cluster HOST:PORT printed by `ray start --head` (with --executor ray; "
        "default: start a local Ray instance and shut it down after).",
        show_default=False,
    ),
]
SlotsOpt = Annotated[
    int, typer.Option("--slots", help="Independent streams of the node (MIG/MPS partitions).")
]
RefillOpt = Annotated[
    str | None,
    typer.Option(
        "--refill",
        help="Refill of a growing EMB cache at a ratio change: lazy, eager or throttled "
        f"(default: {NODE.refill}).",
        show_default=False,
    ),
]
ReallocAliasOpt = Annotated[
    str | None,
    typer.Option("--realloc", hidden=True, help="Deprecated alias of --refill."),
]
ThrottleOpt = Annotated[
    float, typer.Option("--throttle-share", help="H2D bandwidth share of a throttled refill (φ).")
]
TraceRatioOpt = Annotated[
    float,
    typer.Option("--ratio", help="EMB share r of the cache pool (KV gets 1 - r)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]
ModelOptionalOpt = Annotated[
    str | None,
    typer.Option("--model", help="Model profile name or TOML path (adds its footprints)."),
]
RegimeOpt = Annotated[
    str | None,
    typer.Option(
        "--regime",
        help=f"Arrival regime: steady, trend, burst or mixed (default: {SynthConfig().regime}).",
    ),
]
QpsOpt = Annotated[
    float | None, typer.Option("--qps", help="Base arrival rate, requests per second.")
]
DurationSOpt = Annotated[
    float | None, typer.Option("--duration-s", help="Trace duration in seconds.")
]
SessionGapSOpt = Annotated[
    float,
    typer.Option("--session-gap-s", help="A user's interactions within this gap form one request."),
]
CandidatesOpt = Annotated[
    int, typer.Option("--candidates", help="Candidates scored per request (n_candidates).")
]
ArrivalsOpt = Annotated[
    Path | None,
    typer.Option(
        "--arrivals",
        help="Re-time from a real arrival trace: Azure LLM CSV, ServeGen CSV or folder, Mooncake JSONL.",
    ),
]
ReplicateOpt = Annotated[
    int,
    typer.Option("--replicate", help="Clone every user K times in all (id offsets, time shifts)."),
]
ColumnMapOpt = Annotated[
    str | None, typer.Option("--map", help="csv kind: column map user=COL,item=COL[,ts=COL].")
]
BehaviorsOpt = Annotated[
    str,
    typer.Option(
        "--behaviors", help="taobao kind: comma list of behaviours kept (pv,buy,cart,fav)."
    ),
]
SampleRateOpt = Annotated[
    float,
    typer.Option(
        "--sample-rate",
        help="SHARDS sampling rate for EMB curves (1 = exact); below 1, profile loads only "
        "the tokens it can sample.",
    ),
]
SampleSizeOpt = Annotated[
    int | None,
    typer.Option("--sample-size", help="Fixed-size SHARDS: max distinct sampled items."),
]
# --- analyze / report ---
RunDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Run directory (default: reports/out/TRACE-STEM, or reports/out/demo).",
        show_default=False,
    ),
]
RunDirArg = Annotated[
    Path, typer.Argument(help="Run directory written by `helm-plan analyze`.", show_default=False)
]
PlanFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="TOML plan file with sections analyze, node, oracle, curves, demo; flags override it.",
        show_default=False,
    ),
]
DemoOpt = Annotated[
    bool, typer.Option("--demo", help="Generate and analyze the embedded mixed-regime demo trace.")
]
GpuOptionalOpt = Annotated[
    str | None,
    typer.Option("--gpu", help=f"GPU profile name or TOML path (default: {DEFAULT_GPU})."),
]
ModelProfileOptionalOpt = Annotated[
    str | None,
    typer.Option("--model", help=f"Model profile name or TOML path (default: {DEFAULT_MODEL})."),
]
WindowSOptionalOpt = Annotated[
    float | None,
    typer.Option("--window-s", help=f"Window length in seconds (default: {NODE.window_s:g})."),
]
SeedOptionalOpt = Annotated[
    int | None,
    typer.Option("--seed", help=f"Seed for every random choice (default: {ANALYZE.seed})."),
]
WorkersOptionalOpt = Annotated[
    int | None,
    typer.Option(
        "--workers", help=f"Parallel worker processes (0 = all cores) (default: {ANALYZE.workers})."
    ),
]


def refill_mode(refill: str | None, realloc: str | None) -> str:
    """The refill mode from ``--refill`` or its deprecated alias ``--realloc`` (default NODE's)."""
    if refill is not None and realloc is not None and refill != realloc:
        raise ConfigError(
            f"--refill {refill} and --realloc {realloc} disagree",
            hint="pass only --refill (--realloc is its old name)",
        )
    return refill or realloc or NODE.refill


BatchMaxOpt = Annotated[
    int,
    typer.Option("--batch-max", help=f"Most requests per batch (default: {NODE.batch_max})."),
]
BatchTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--batch-timeout-ms",
        help="static batching: longest a batch waits for more requests after its first, ms.",
    ),
]
BatchingOpt = Annotated[
    str,
    typer.Option(
        "--batching",
        help="static (close at --batch-max or the timeout) or continuous (start at once with "
        "everything waiting).",
    ),
]

# plan and analyze: the traffic being planned for
AttainmentOpt = Annotated[
    float, typer.Option("--attainment", help="Share of requests that must meet the SLO.")
]
PeakQpsOpt = Annotated[
    float | None,
    typer.Option(
        "--peak-qps", help="Plan for this rate in the busiest window (req/s).", show_default=False
    ),  # fmt: skip
]
ScaleByOpt = Annotated[
    str | None,
    typer.Option(
        "--scale-by",
        help="The traffic model of --peak-qps / --scale: users (default: the trace's users cloned "
        "on its own timeline, its bursts kept at full height), users-shifted (clones shifted in "
        "time: bursts smoothed, optimistic) or time (compressed: users return sooner).",
        show_default=False,
    ),
]
GpusListOpt = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        help="Comma list of GPU profiles (names or TOML paths) the plan compares (default: every "
        "shipped one; --gpu is always planned and is the one the later sections analyse).",
        show_default=False,
    ),
]
ScaleOpt = Annotated[
    float | None,
    typer.Option(
        "--scale", help="Plan for the trace's rate times this factor.", show_default=False
    ),  # fmt: skip
]
SpillDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--spill-dir",
        help="Keep the trace's history tokens in a file in this folder instead of memory "
        "(4 bytes a token; for traces whose tokens do not fit). Never changes a result.",
        show_default=False,
    ),
]
NoCapacityOpt = Annotated[
    bool,
    typer.Option(
        "--no-capacity",
        help="Skip planning: analyse the trace at its own load on one node.",
    ),
]


# --- train and validate: one options group (controllers and their label sets)
ControllerInputsArg = Annotated[
    list[Path],
    typer.Argument(help="Canonical traces (.parquet) or label sets (.npz from --save-labels).",
                   show_default=False),
]  # fmt: skip
ControllerTracesArg = Annotated[
    list[Path], typer.Argument(help="Canonical traces.", show_default=False)
]
ControllerArg = Annotated[
    Path,
    typer.Argument(help="Controller .npz (from `helm-plan train`).", show_default=False),
]
TimestepsOpt = Annotated[
    int | None,
    typer.Option(
        "--timesteps",
        help="PPO environment steps (default: total_timesteps of helm_plan.controller.ppo.Args).",
        show_default=False,
    ),
]
SaveLabelsOpt = Annotated[
    Path | None,
    typer.Option("--save-labels", help="Also write the label set (.npz) here.", show_default=False),
]
AblationOpt = Annotated[
    bool, typer.Option("--ablation/--no-ablation", help="Also run base and base+adapter.")
]


def controller_node(window_s: float, slo_ms: float | None) -> NodeConfig:
    """The node config of train and validate (the SLO resolves per trace's model)."""
    return NodeConfig(window_s=window_s, slo_ms=slo_ms)


def trace_contexts(
    paths: Iterable[Path], pool_fraction: float | None, seed: int
) -> Iterator[tuple[str, NodeContext]]:
    """(name, node context) of each trace train and validate read, loaded one at a time."""
    for p in paths:
        yield str(p), load_context(p, pool_fraction=pool_fraction, seed=seed)
