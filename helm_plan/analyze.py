"""``helm-plan analyze``: the end-to-end pipeline with a resumable stage cache.

Stages run in order: ``inspect`` → ``curves`` → ``oracle`` → ``policies`` →
``report`` (see :mod:`helm_plan.analyze_stages`). Each finished stage is
stored atomically in ``DIR/.stages/<stage>-<key>.{json,parquet}``, where
``key`` is a SHA-256 over the trace's SHA-256, the resolved profile contents,
the stage's config and the keys of the upstream stages it reads. A rerun with
the same inputs loads finished stages instead of recomputing them, so an
interrupted run (SIGINT mid-stage) resumes where it stopped and leaves no
half-written file: every output goes through :mod:`helm_plan.io`.

Outputs in DIR: ``report.html``, ``summary.json``, ``helm.duckdb`` and
``labels.parquet`` (see docs/summary-schema.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from helm_plan import io, trace
from helm_plan.analyze_stages import (
    StageOutput,
    labels_tables,
    latency_table,
    stage_curves,
    stage_inspect,
    stage_oracle,
    stage_policies,
)
from helm_plan.cache.curves import CurvesConfig
from helm_plan.config import from_dict, require_positive, require_range
from helm_plan.errors import ConfigError
from helm_plan.oracle import OracleConfig
from helm_plan.oracle_labels import read_labels, write_labels
from helm_plan.report import html as report_html
from helm_plan.report.store import RunData, write_store
from helm_plan.report.summary import build_summary
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import DEFAULT_SLO_MS, DEFAULT_WINDOW_S, NodeConfig
from helm_plan.stage_cache import StageCache, stable_hash, versions
from helm_plan.synth import SynthConfig

Progress = Callable[[int, int], None]
ProgressFactory = Callable[[str], AbstractContextManager[Progress]]
STAGES = ("inspect", "curves", "oracle", "policies", "report")
"""Pipeline stages in run order."""
STAGE_VERSION = "1"
"""Bump to invalidate every cached stage (a change in what a stage computes)."""

DEMO_SYNTH = SynthConfig(
    regime="mixed", qps=100.0, duration_s=120.0, items=2_000_000, zipf_alpha=0.7,
    candidates=64, max_seq_len=2048, cold_history_mean=150.0, session_share=0.9,
    revisit_gap_s=5.0, drift_ranks=20_000, burst_factor=3.0, burst_len_frac=0.06, bursts=4,
    burst_hot_items=2_000, seed=0,
)  # fmt: skip
"""The embedded demo workload: steady, trend and burst thirds (seeded)."""
DEMO_POOL_FRACTION = 0.1
"""Demo pool as a share of the demo trace's EMB+KV footprint, so the caches compete."""
DEMO_TRIALS = 6
"""Optuna trials per window for the demo (on top of the 11-point coarse grid)."""
DEMO_SLO_MS = 1.0
"""Demo P99 SLO: the demo node serves in well under a millisecond, so a 1 ms SLO is tight."""


@dataclass(frozen=True)
class AnalyzeConfig:
    """Top-level options of ``helm-plan analyze`` (plan file section ``[analyze]``)."""

    gpu: str = "a100-80g"
    """GPU profile name or TOML path."""
    model: str = "gr-small"
    """Model profile name or TOML path."""
    latency: str | None = None
    """Latency profile name or TOML path (None = the shipped GPU_MODEL profile or a roofline)."""
    slo_ms: float = DEFAULT_SLO_MS
    """P99 latency SLO, milliseconds."""
    window_s: float = DEFAULT_WINDOW_S
    """Window length, seconds (curves, oracle and policies)."""
    pool_bytes: int | None = None
    """Cache pool in bytes (None = HBM minus weights and reserve)."""
    pool_fraction: float | None = None
    """Cache pool as a share of the trace's EMB+KV footprint (overrides HBM sizing)."""
    seed: int = 0
    """Seed for candidate draws, Optuna studies and the bootstrap."""
    workers: int = 1
    """Worker processes for oracle windows and static sweeps (0 = all cores)."""
    n_boot: int = 1000
    """Bootstrap resamples (over windows) of the value-of-adaptivity CI."""
    confidence: float = 0.95
    """Confidence level of the bootstrap CI."""
    node: NodeConfig = field(default_factory=NodeConfig)
    """Node simulator settings (plan section ``[node]``; slo_ms/window_s come from here)."""
    oracle: OracleConfig = field(default_factory=lambda: OracleConfig(**ORACLE_DEFAULTS))
    """Oracle settings (plan section ``[oracle]``; seed/workers come from here)."""
    curves: CurvesConfig = field(default_factory=CurvesConfig)
    """Curve settings (plan section ``[curves]``; window_s comes from here)."""

    def __post_init__(self) -> None:
        require_positive("slo_ms", self.slo_ms)
        require_positive("window_s", self.window_s)
        require_range("confidence", self.confidence, 0.5, 0.999)
        if self.n_boot < 10:
            raise ConfigError(f"n_boot must be >= 10, got {self.n_boot}")
        if self.seed < 0 or self.workers < 0:
            raise ConfigError("seed and workers must be >= 0")
        # One source of truth for shared settings: propagate into the stage configs.
        node = dataclasses.replace(self.node, slo_ms=self.slo_ms, window_s=self.window_s)
        oracle = dataclasses.replace(self.oracle, seed=self.seed, workers=self.workers)
        curves = dataclasses.replace(self.curves, window_s=self.window_s)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "oracle", oracle)
        object.__setattr__(self, "curves", curves)


_SECTIONS = {"node": NodeConfig, "oracle": OracleConfig, "curves": CurvesConfig}
ORACLE_DEFAULTS: dict[str, Any] = {"warmup": "carry"}
"""analyze labels windows from the carried state by default: its adaptive policies replay the
oracle schedule on a running node, and labels from cold caches and an idle queue misjudge that
node badly near saturation (a 1.2M-request mixed trace at rho~0.9: the oracle schedule came out
48% worse than the best static split with ``window`` labels, 0.7% worse with ``carry``)."""
_OWNED = {"node": ("slo_ms", "window_s"), "oracle": ("seed", "workers"), "curves": ("window_s",)}


def build_config(
    plan: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None
) -> AnalyzeConfig:
    """AnalyzeConfig from plan sections (``[analyze]``, ``[node]``, ``[oracle]``, ``[curves]``)
    with ``overrides`` (CLI flags; None values ignored) applied on top of ``[analyze]``."""
    plan = dict(plan or {})
    unknown = sorted(set(plan) - {"analyze", "demo", *_SECTIONS})
    if unknown:
        raise ConfigError(
            f"unknown plan section [{unknown[0]}]",
            hint="valid sections: [analyze], [node], [oracle], [curves], [demo]",
        )
    top = dict(plan.get("analyze", {}))
    top.update({k: v for k, v in (overrides or {}).items() if v is not None})
    subs: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        sec = dict(plan.get(name, {}))
        for k in _OWNED[name]:
            if k in sec:
                raise ConfigError(
                    f"[{name}] {k} is set in [analyze]", hint=f"move {k} to [analyze]"
                )
        if name == "oracle":
            sec = {**ORACLE_DEFAULTS, **sec}
        subs[name] = from_dict(cls, sec, section=name)
    if any(k in top for k in _SECTIONS):
        raise ConfigError("nested options belong in their own plan sections")
    cfg = from_dict(AnalyzeConfig, top, section="analyze")
    return dataclasses.replace(cfg, **subs)


def demo_plan(plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """``plan`` with the demo defaults (pool fraction, oracle trials) where it sets none."""
    out = {k: dict(v) for k, v in (plan or {}).items()}
    out.setdefault("analyze", {}).setdefault("pool_fraction", DEMO_POOL_FRACTION)
    out["analyze"].setdefault("slo_ms", DEMO_SLO_MS)
    out.setdefault("oracle", {}).setdefault("trials", DEMO_TRIALS)
    return out


def prepare_demo(out_dir: str | Path, synth_cfg: SynthConfig) -> Path:
    """Write the demo trace into ``out_dir`` (reused when an identical one is there)."""
    from helm_plan import synth_like

    path = Path(out_dir) / f"demo-{stable_hash(asdict(synth_cfg))[:8]}.parquet"
    if path.is_file():
        with contextlib.suppress(Exception):
            if trace.provenance(path).get("arguments") == json.loads(
                json.dumps(asdict(synth_cfg), default=str)
            ):
                return path
    synth_like.write(synth_cfg, path)
    return path


def demo_synth_config(plan: dict[str, Any] | None = None, seed: int | None = None) -> SynthConfig:
    """The demo trace's SynthConfig: DEMO_SYNTH with plan ``[demo]`` keys and ``seed`` applied."""
    sec = dict((plan or {}).get("demo", {}))
    if seed is not None:
        sec["seed"] = seed
    return from_dict(SynthConfig, {**asdict(DEMO_SYNTH), **sec}, section="demo")


@dataclass(frozen=True)
class StageRun:
    """How one stage went in this run."""

    name: str
    """Stage name."""
    key: str
    """Content hash of the stage's inputs (first 16 hex digits)."""
    cached: bool
    """True when the stage output was reused from DIR/.stages."""
    seconds: float
    """Wall time this run spent on the stage, seconds."""


@dataclass(frozen=True)
class AnalyzeResult:
    """What ``run_analyze`` produced."""

    out_dir: Path
    """The run directory."""
    report_path: Path
    """report.html."""
    summary_path: Path
    """summary.json."""
    store_path: Path
    """helm.duckdb."""
    labels_path: Path
    """labels.parquet."""
    summary: dict[str, Any]
    """The summary.json object."""
    stages: tuple[StageRun, ...]
    """Per-stage timing and cache use."""
    notes: tuple[str, ...] = ()
    """Warnings for the user (e.g. the whole footprint fits in the pool)."""


def _null_factory(label: str) -> AbstractContextManager[Progress]:
    return contextlib.nullcontext(lambda done, total: None)


def run_analyze(
    trace_path: str | Path,
    cfg: AnalyzeConfig,
    out_dir: str | Path,
    progress_factory: ProgressFactory | None = None,
    *,
    command: str = "",
) -> AnalyzeResult:
    """Run every stage on ``trace_path`` into ``out_dir`` (reusing finished stages)."""
    from helm_plan import arrays as arr
    from helm_plan.latency.model import build_latency_model, resolve_latency
    from helm_plan.profiles import load_gpu, load_model
    from helm_plan.sim.context import prepare_context

    pf = progress_factory or _null_factory
    out = Path(out_dir)
    tpath = Path(trace_path)
    table = trace.read(tpath)  # validates: a bad trace fails before any work
    sha = trace.sha256(tpath)
    gpu, model = load_gpu(cfg.gpu), load_model(cfg.model)
    lat_prof = resolve_latency(gpu, model, cfg.latency)
    lat = build_latency_model(gpu, model, lat_prof)
    ctx: NodeContext = prepare_context(
        arr.from_table(table, seed=cfg.seed), gpu, model, lat,
        pool_bytes=cfg.pool_bytes, pool_fraction=cfg.pool_fraction,
    )  # fmt: skip
    base = {"v": STAGE_VERSION, "trace": sha, "gpu": asdict(gpu), "model": asdict(model),
            "latency": asdict(lat_prof), "pool": ctx.pool_bytes, "seed": cfg.seed}  # fmt: skip
    keys = {"inspect": stable_hash({**base, "stage": "inspect"})}
    keys["curves"] = stable_hash({**base, "stage": "curves", "cfg": asdict(cfg.curves)})
    ocfg = dataclasses.replace(cfg.oracle, workers=0)  # workers never change results
    keys["oracle"] = stable_hash(
        {**base, "stage": "oracle", "node": asdict(cfg.node), "cfg": asdict(ocfg)}
    )
    keys["policies"] = stable_hash({**base, "stage": "policies", "up": keys["oracle"],
                              "node": asdict(cfg.node), "cfg": asdict(ocfg),
                              "boot": [cfg.n_boot, cfg.confidence]})  # fmt: skip
    cache = StageCache(out)
    runs: list[StageRun] = []
    outputs: dict[str, StageOutput] = {}

    @contextlib.contextmanager
    def stage(name: str, cached: bool) -> Iterator[Progress]:
        t0 = time.perf_counter()
        with pf(f"{name} (cached)" if cached else name) as tick:
            yield tick
        runs.append(StageRun(name, keys.get(name, ""), cached, time.perf_counter() - t0))

    def cached_or(name: str, compute: Callable[[Progress], StageOutput]) -> StageOutput:
        hit = cache.load(name, keys[name])
        with stage(name, hit is not None) as tick:
            if hit is None:
                hit = compute(tick)
                cache.save(name, keys[name], hit)
            else:
                tick(1, 1)
        outputs[name] = hit
        return hit

    cached_or("inspect", lambda tick: stage_inspect(tpath, ctx, tick))
    cached_or("curves", lambda tick: stage_curves(ctx, cfg.curves, tick))
    lab_path = cache.path("oracle", keys["oracle"], "parquet")
    labels = None
    if lab_path.is_file():
        with contextlib.suppress(Exception):
            labels = read_labels(lab_path)
    with stage("oracle", labels is not None) as tick:
        if labels is None:
            labels = stage_oracle(ctx, cfg.node, cfg.oracle, tick)
            write_labels(labels, lab_path)
        else:
            tick(1, 1)
    cached_or("policies", lambda tick: stage_policies(
        ctx, cfg.node, cfg.oracle, labels, n_boot=cfg.n_boot, confidence=cfg.confidence,
        seed=cfg.seed, progress=tick))  # fmt: skip

    t_rep = time.perf_counter()
    with pf("report") as tick:
        tick(0, 4)
        run = _run_data(tpath, sha, cfg, ctx, lat_prof, labels, outputs, runs, command)
        store_path = write_store(out / "helm.duckdb", run)
        tick(1, 4)
        labels_path = write_labels(labels, out / "labels.parquet")
        report_path = report_html.write_report(out / "report.html", run)
        tick(3, 4)
        runs.append(StageRun("report", "", False, time.perf_counter() - t_rep))
        summary = build_summary(run)
        summary["timings_s"] = {r.name: round(r.seconds, 3) for r in runs}
        summary_path = io.write_json(out / "summary.json", summary)
        tick(4, 4)
    return AnalyzeResult(out, report_path, summary_path, store_path, labels_path, summary,
                         tuple(runs), ctx.notes)  # fmt: skip


def _config_table(cfg: AnalyzeConfig) -> pl.DataFrame:
    rows = []
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v):
            rows += [(f.name, k, json.dumps(x, default=str)) for k, x in asdict(v).items()]
        else:
            rows.append(("analyze", f.name, json.dumps(v, default=str)))
    return pl.DataFrame(rows, schema=["section", "key", "value"], orient="row")


def _run_data(
    tpath: Path, sha: str, cfg: AnalyzeConfig, ctx: NodeContext, lat_prof: Any, labels: Any,
    outputs: dict[str, StageOutput], runs: list[StageRun], command: str,
) -> RunData:  # fmt: skip
    tables: dict[str, pl.DataFrame] = {}
    meta: dict[str, Any] = {}
    for o in outputs.values():
        tables.update(o.tables)
        meta.update(o.meta)
    tables.update(labels_tables(labels))
    tables["latency_coef"] = latency_table(ctx.latency, lat_prof.source)
    tables["config"] = _config_table(cfg)
    v = versions()
    tables["versions"] = pl.DataFrame({"package": list(v), "version": list(v.values())})
    tables["timings"] = pl.DataFrame(
        {"stage": [r.name for r in runs], "seconds": [r.seconds for r in runs],
         "cached": [r.cached for r in runs], "key": [r.key for r in runs]}
    )  # fmt: skip
    meta.update(
        trace_path=str(tpath), trace_stem=tpath.stem, trace_sha256=sha, seed=cfg.seed,
        gpu=ctx.gpu.name, model=ctx.model.name, latency=lat_prof.name,
        latency_source=lat_prof.source, slo_ms=cfg.slo_ms, window_s=cfg.window_s,
        windows=ctx.n_windows(cfg.window_s), pool_bytes=ctx.pool_bytes,
        pool_source=ctx.pool_source, footprint_bytes=ctx.footprint_bytes,
        notes=list(ctx.notes), command=command or f"helm-plan analyze {tpath}",
        python=sys.version.split()[0], trace_provenance=trace.provenance(tpath),
        n_requests=int(ctx.arrays.n_requests), oracle_warmup=cfg.oracle.warmup,
        oracle_warmup_windows=cfg.oracle.warmup_windows,
    )  # fmt: skip
    return RunData(tables=tables, meta=meta)
