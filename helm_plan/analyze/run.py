"""``helm-plan analyze``: the end-to-end pipeline with a resumable stage cache.

Stages run in order: ``inspect`` → ``curves`` → ``capacity`` → ``oracle`` →
``policies`` → ``report`` (see :mod:`helm_plan.analyze.stages`); with workers,
``curves`` and the best-static search run in the background of the oracle, on
a worker the oracle's threads leave idle (:mod:`helm_plan.exec.background`). Each finished stage is
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from helm_plan import exec as executors
from helm_plan import io, rundir, synth, trace
from helm_plan._densify import release_memory
from helm_plan.analyze.capacity import oracle_shortcut
from helm_plan.analyze.config import AnalyzeConfig
from helm_plan.analyze.operating import (
    capacity_inputs,
    operating_context,
    shortcut_note,
    stage_capacity,
)
from helm_plan.analyze.stage_cache import StageCache, stable_hash, versions
from helm_plan.analyze.stages import (
    StageOutput,
    curves_task,
    labels_tables,
    latency_table,
    stage_curves,
    stage_inspect,
    stage_oracle,
    stage_policies,
)
from helm_plan.exec import Progress
from helm_plan.oracle import read_labels, write_labels
from helm_plan.oracle.static import BackgroundStatic
from helm_plan.plan.run import require_rate
from helm_plan.profiles import resolve_slo_ms
from helm_plan.report import html as report_html
from helm_plan.report.store import RunData, write_store
from helm_plan.report.summary import build_summary
from helm_plan.sim import NodeContext, load_context
from helm_plan.synth import SynthConfig

ProgressFactory = Callable[[str], AbstractContextManager[Progress]]
STAGES = ("inspect", "curves", "capacity", "oracle", "policies", "report")
"""Pipeline stages in run order."""
STAGE_VERSION = "1"
"""Bump to invalidate every cached stage (a change in what a stage computes)."""


def prepare_demo(out_dir: str | Path, synth_cfg: SynthConfig) -> Path:
    """Write the demo trace into ``out_dir`` (reused when an identical one is there)."""
    path = Path(out_dir) / f"demo-{stable_hash(asdict(synth_cfg))[:8]}.parquet"
    if path.is_file():
        with contextlib.suppress(Exception):
            if trace.provenance(path).get("arguments") == json.loads(
                json.dumps(asdict(synth_cfg), default=str)
            ):
                return path
    synth.write(synth_cfg, path)
    return path


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
    # Ray starts on the first map (never when every stage is cached); leaving the block
    # shuts down an instance it started, on success, error or Ctrl-C alike.
    with executors.get_executor(cfg.executor, cfg.workers, cfg.ray_address) as executor:
        return _run_analyze(trace_path, cfg, out_dir, progress_factory, command, executor)


def _run_analyze(
    trace_path: str | Path,
    cfg: AnalyzeConfig,
    out_dir: str | Path,
    progress_factory: ProgressFactory | None,
    command: str,
    executor: executors.Executor,
) -> AnalyzeResult:
    pf = progress_factory or _null_factory
    out = Path(out_dir)
    tpath = Path(trace_path)
    # validates the trace: a bad one fails before any work
    ctx = load_context(
        tpath, gpu=cfg.gpu, model=cfg.model, latency=cfg.latency,
        pool_bytes=cfg.pool_bytes, pool_fraction=cfg.pool_fraction, seed=cfg.seed,
        spill_dir=cfg.spill_dir,
    )  # fmt: skip
    sha = trace.sha256(tpath)
    gpu, model, lat_prof = ctx.gpu, ctx.model, ctx.latency_profile
    slo_source = ("given (--slo-ms or [analyze] slo_ms)" if cfg.slo_ms is not None else
                  f"model {model.name} default_slo_ms: {model.slo_source}")  # fmt: skip
    cfg = dataclasses.replace(cfg, slo_ms=resolve_slo_ms(model, cfg.slo_ms))  # the one SLO rule
    n_requests = int(ctx.arrays.n_requests)
    if cfg.capacity:
        require_rate(ctx.arrays)  # before any stage: planning needs an arrival rate
    assert lat_prof is not None  # load_context always resolves one
    base = {"v": STAGE_VERSION, "trace": sha, "gpu": asdict(gpu), "model": asdict(model),
            "latency": asdict(lat_prof), "pool": ctx.pool_bytes, "seed": cfg.seed}  # fmt: skip
    keys = {"inspect": stable_hash({**base, "stage": "inspect"})}
    keys["curves"] = stable_hash({**base, "stage": "curves", "cfg": asdict(cfg.curves)})
    ocfg = cfg.oracle  # the executor never changes results, so it is not in the key
    keys["oracle"] = stable_hash(
        {**base, "stage": "oracle", "node": asdict(cfg.node), "cfg": asdict(ocfg)}
    )
    keys["policies"] = stable_hash({**base, "stage": "policies", "up": keys["oracle"],
                              "node": asdict(cfg.node), "cfg": asdict(ocfg),
                              "boot": [cfg.n_boot, cfg.confidence]})  # fmt: skip
    record = {"trace": str(tpath), "command": command,
              "config": json.loads(json.dumps(asdict(cfg), default=str))}  # fmt: skip
    with rundir.claim(out, sha, record):
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

        curves_due = not cache.path("curves", keys["curves"], "json").is_file()
        # the workers will read this trace (the curves, the plan's contexts and load points,
        # which reference its arrays rather than copy them, or the oracle): the driver
        # keeps a view of their copy instead of a second one
        ctx = executor.share(ctx)
        cached_or("inspect", lambda tick: stage_inspect(tpath, ctx, tick))
        # With workers the curves need nothing downstream before the report: they run in
        # the background on a worker the oracle leaves idle, and are collected after it.
        curves_bg = None
        if curves_due:
            curves_bg = executors.background(
                executor, lambda view: view.map(curves_task, [cfg.curves], shared=(ctx,))[0],
                "curves",
            )  # fmt: skip
        if curves_bg is None:
            cached_or("curves", lambda tick: stage_curves(ctx, cfg.curves, tick))
        op_ctx, ocfg, keys_op, fits = ctx, cfg.oracle, {}, False
        if cfg.capacity:
            # the plan and the operating point scale the loaded arrays (plan.dense): the
            # trace is never read as a table (history lists included: ~0.7 KB a request)
            plan_key = asdict(capacity_inputs(cfg))
            plan_key["plan"]["spill_dir"] = None  # never changes a result
            keys["capacity"] = stable_hash({**base, "stage": "capacity", "plan": plan_key})
            cap = cached_or("capacity", lambda tick: stage_capacity(
                ctx, capacity_inputs(cfg), tick, executor))  # fmt: skip
            op_ctx = operating_context(ctx, cap.meta["per_node_factor"], cfg.seed, cfg.window_s,
                                       cfg.spill_dir)  # fmt: skip
            op_ctx = executor.share(op_ctx)  # the oracle's trace (ctx itself if unscaled)
            keys_op = {"op": cap.meta["per_node_factor"]}
            if curves_bg is None:  # the trace as it is served inspect, curves and the plan only
                del ctx
            release_memory()
        if op_ctx.footprint_bytes <= op_ctx.pool_bytes:
            ocfg, fits = oracle_shortcut(cfg.oracle), True
        keys["oracle"] = stable_hash({"up": keys["oracle"], **keys_op, "cfg": asdict(ocfg)})
        keys["policies"] = stable_hash({"up": keys["policies"], **keys_op, "o": keys["oracle"]})
        lab_path = cache.path("oracle", keys["oracle"], "parquet")
        labels = None
        if lab_path.is_file():
            with contextlib.suppress(Exception):
                labels = read_labels(lab_path)
        static = None
        if not cache.path("policies", keys["policies"], "json").is_file():
            # the static search needs no labels: with workers it runs beside the oracle on
            # a worker the oracle's threads leave idle (same answer)
            static = BackgroundStatic(op_ctx, cfg.node, ocfg, executor)
        oracle_s = None
        with stage("oracle", labels is not None) as tick:
            if labels is None:
                t_or = time.perf_counter()
                labels = stage_oracle(op_ctx, cfg.node, ocfg, tick, executor)
                oracle_s = time.perf_counter() - t_or
                write_labels(labels, lab_path)
            else:
                tick(1, 1)
        shortcut = shortcut_note(cfg, oracle_s, labels) if fits else {}
        if curves_bg is not None:
            cached_or("curves", lambda tick: curves_bg.result())
        cached_or("policies", lambda tick: stage_policies(
            op_ctx, cfg.node, ocfg, labels, n_boot=cfg.n_boot, confidence=cfg.confidence,
            seed=cfg.seed, progress=tick, executor=executor, static=static))  # fmt: skip

        t_rep = time.perf_counter()
        with pf("report") as tick:
            tick(0, 4)
            run = _run_data(tpath, sha, cfg, op_ctx, lat_prof, labels, outputs, runs, command)
            run.meta.update(shortcut, trace_requests=n_requests, slo_source=slo_source)
            store_path = write_store(out / "helm.duckdb", run)
            tick(1, 4)
            labels_path = write_labels(labels, out / "labels.parquet")
            report_path = report_html.write_report(out / "report.html", run)
            tick(3, 4)
            runs.append(StageRun("report", "", False, time.perf_counter() - t_rep))
            summary = build_summary(run)
            summary["setup"]["slo_source"] = slo_source
            summary["timings_s"] = {r.name: round(r.seconds, 3) for r in runs}
            summary_path = io.write_json(out / "summary.json", summary)
            tick(4, 4)
        return AnalyzeResult(out, report_path, summary_path, store_path, labels_path, summary,
                             tuple(runs), op_ctx.notes)  # fmt: skip


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
