"""``helm-plan analyze``: the end-to-end pipeline, declared stages and a resumable cache.

The stages are records (:data:`STAGES`: name, the upstream stages whose keys
enter its key, its own inputs, its function), run in order by one small
runner (:class:`Runner`): ``inspect`` → ``capacity`` → ``curves`` ‖
``oracle`` → ``policies`` → ``report``. ``capacity`` fixes the one operating
point (:mod:`helm_plan.analyze.capacity`): every stage after it reads that
node's traffic. With workers, ``curves`` and the best-static search run in
the background of the oracle, on a worker the oracle's threads leave idle
(:mod:`helm_plan.exec.background`).

Each finished stage is stored atomically in ``DIR/.stages/<stage>-<key>.{json,
parquet}``, where ``key`` is a SHA-256 over the trace's SHA-256, the resolved
profile contents, the stage's inputs and the keys of the stages it reads. A
rerun with the same inputs loads finished stages instead of recomputing them,
so an interrupted run (SIGINT mid-stage) resumes where it stopped and leaves
no half-written file: every output goes through :mod:`helm_plan.io`.

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
from helm_plan import io, regimes, rundir, synth, trace
from helm_plan._densify import release_memory
from helm_plan.analyze import warm
from helm_plan.analyze.config import AnalyzeConfig
from helm_plan.analyze.operating import (
    capacity_inputs,
    operating_context,
    planned_spans,
    shortcut_note,
    stage_capacity,
)
from helm_plan.analyze.policies_stage import stage_policies
from helm_plan.analyze.stage_cache import StageCache, stable_hash, versions
from helm_plan.analyze.stages import (
    curves_task,
    labels_tables,
    latency_table,
    stage_curves,
    stage_inspect,
    stage_oracle,
)
from helm_plan.analyze.state import AnalyzeResult, Run, StageRun
from helm_plan.exec import Progress
from helm_plan.oracle import read_labels, write_labels
from helm_plan.oracle.static import BackgroundStatic
from helm_plan.plan.gpus import gpu_setups
from helm_plan.plan.run import require_rate
from helm_plan.profiles import resolve_slo_ms
from helm_plan.report import html as report_html
from helm_plan.report.store import RunData, write_store
from helm_plan.report.summary import build_summary
from helm_plan.report.tables import CONFIG, LATENCY_COEF, TIMINGS, VERSIONS
from helm_plan.sim import load_context
from helm_plan.synth import SynthConfig

ProgressFactory = Callable[[str], AbstractContextManager[Progress]]
STAGE_VERSION = "2"
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
class Stage:
    """One analyze stage: its name, the stages whose keys its key includes, its own inputs
    (JSON-able, hashed into the key) and its function."""

    name: str
    up: tuple[str, ...]
    inputs: Callable[[Run], Any]
    compute: Callable[[Run, Progress], Any]
    labels: bool = False
    """Stores a :class:`~helm_plan.oracle.Labels` (parquet) instead of tables (JSON)."""


def _capacity_key(run: Run) -> dict[str, Any]:
    key = asdict(capacity_inputs(run.cfg))
    key["plan"]["spill_dir"] = None  # never changes a result
    return key


STAGES = {
    s.name: s
    for s in (
        Stage("inspect", (), lambda run: {},
              lambda run, tick: stage_inspect(run.tpath, run.ctx, tick)),
        Stage("capacity", (), _capacity_key,
              lambda run, tick: stage_capacity(run.ctx, capacity_inputs(run.cfg), tick,
                                               run.executor)),
        Stage("curves", ("capacity",), lambda run: asdict(run.cfg.curves_config()),
              lambda run, tick: stage_curves(run.op, run.cfg.curves_config(), tick)),
        Stage("oracle", ("capacity",), lambda run: {"node": asdict(run.node),
                                                     "cfg": asdict(run.oracle)},
              lambda run, tick: stage_oracle(run.op, run.node, run.oracle, tick, run.executor),
              labels=True),
        Stage("policies", ("oracle",),
              lambda run: {"node": asdict(run.node), "cfg": asdict(run.oracle),
                           "boot": [run.cfg.n_boot, run.cfg.confidence],
                           "fleet": run.fleet_ratio, "spans": [list(sp) for sp in run.spans]},
              lambda run, tick: stage_policies(
                  run.op, run.node, run.oracle, run.labels, n_boot=run.cfg.n_boot,
                  confidence=run.cfg.confidence, seed=run.cfg.seed, progress=tick,
                  executor=run.executor, static=run.static, fleet_ratio=run.fleet_ratio,
                  spans=run.spans)),
    )
}  # fmt: skip
"""The stages, in run order (the report follows them)."""


def _null_factory(label: str) -> AbstractContextManager[Progress]:
    return contextlib.nullcontext(lambda done, total: None)


class Runner:
    """Runs stages through the cache: key, load or compute, store, time."""

    def __init__(self, run: Run, cache: StageCache, pf: ProgressFactory) -> None:
        self.run, self.cache, self.pf = run, cache, pf

    def key(self, s: Stage) -> str:
        r = self.run
        if s.name not in r.keys:
            up = {u: self.key(STAGES[u]) for u in s.up}
            r.keys[s.name] = stable_hash({**r.base, "stage": s.name, "in": s.inputs(r), "up": up})
        return r.keys[s.name]

    def _path(self, s: Stage) -> Path:
        return self.cache.path(s.name, self.key(s), "parquet" if s.labels else "json")

    def done(self, s: Stage) -> bool:
        return self._path(s).is_file()

    def _load(self, s: Stage) -> Any:
        if not s.labels:
            return self.cache.load(s.name, self.key(s))
        with contextlib.suppress(Exception):
            return read_labels(self._path(s))
        return None

    def _keep(self, s: Stage, out: Any) -> None:
        if s.labels:
            self.run.labels = out
        else:
            self.run.outputs[s.name] = out

    @contextlib.contextmanager
    def _timed(self, s: Stage, cached: bool) -> Iterator[Progress]:
        t0 = time.perf_counter()
        with self.pf(f"{s.name} (cached)" if cached else s.name) as tick:
            yield tick
        self.run.runs.append(StageRun(s.name, self.key(s), cached, time.perf_counter() - t0))

    def __call__(self, name: str, compute: Callable[[Progress], Any] | None = None) -> Any:
        """Load stage ``name`` or compute it (``compute`` replaces the stage's function, e.g.
        collecting it from the background), store it, and keep it in the run."""
        s = STAGES[name]
        hit = self._load(s)
        with self._timed(s, hit is not None) as tick:
            if hit is None:
                t0 = time.perf_counter()
                hit = compute(tick) if compute else s.compute(self.run, tick)
                self.run.seconds[name] = time.perf_counter() - t0
                if s.labels:
                    write_labels(hit, self._path(s))
                else:
                    self.cache.save(s.name, self.key(s), hit)
            else:
                tick(1, 1)
        self._keep(s, hit)
        return hit


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
    with warm.ahead(tpath, cfg):  # on a cold numba cache: the later kernels, compiled meanwhile
        return _stages(tpath, cfg, out, pf, command, executor)


def _stages(tpath: Path, cfg: AnalyzeConfig, out: Path, pf: ProgressFactory, command: str,
            executor: executors.Executor) -> AnalyzeResult:  # fmt: skip
    # validates the trace: a bad one fails before any work
    ctx = load_context(
        tpath, gpu=cfg.gpu, model=cfg.model, latency=cfg.latency,
        pool_bytes=cfg.pool_bytes, pool_fraction=cfg.pool_fraction, seed=cfg.seed,
        spill_dir=cfg.spill_dir,
    )  # fmt: skip
    sha = trace.sha256(tpath)
    lat_prof = ctx.latency_profile
    if cfg.capacity:
        require_rate(ctx.arrays)  # before any stage: planning needs an arrival rate
        # the plan's own resolver (every GPU profile, its latency profile and price), run
        # before any work so a bad one fails here and not after the first stages
        gpu_setups(capacity_inputs(cfg).plan, ctx.model)
    assert lat_prof is not None  # load_context always resolves one
    base = {"v": STAGE_VERSION, "trace": sha, "gpu": asdict(ctx.gpu), "model": asdict(ctx.model),
            "latency": asdict(lat_prof), "pool": ctx.pool_bytes, "seed": cfg.seed}  # fmt: skip
    record = {"trace": str(tpath), "command": command,
              "config": json.loads(json.dumps(asdict(cfg), default=str))}  # fmt: skip
    slo_ms = resolve_slo_ms(ctx.model, cfg.slo_ms)
    with rundir.claim(out, sha, record):
        # the workers read this trace (the plan, inspect's tables): the driver keeps a view of
        # their copy instead of a second one
        run = Run(cfg, tpath, executor, executor.share(ctx), slo_ms, base)
        stage = Runner(run, StageCache(out), pf)
        stage("inspect")
        n_requests = int(run.ctx.arrays.n_requests)
        if cfg.capacity:
            cap = stage("capacity")
            run.op = executor.share(operating_context(run.ctx, cap, cfg.seed, cfg.window_s,
                                                      cfg.spill_dir))  # fmt: skip
            run.fleet_ratio = float(cap.meta["operating"]["ratio"])
            run.spans = planned_spans(regimes.read_spans(tpath), cap, float(run.ctx.arrays.ts_s[0]))
        else:
            run.keys["capacity"] = "none"
            run.op = run.ctx
            run.spans = regimes.read_spans(tpath)
        release_memory()
        run.fits = run.op.footprint_bytes <= run.op.pool_bytes
        curves_bg = None
        if not stage.done(STAGES["curves"]):  # with workers: beside the oracle, collected after
            op = run.op
            curves_bg = executors.background(
                executor, lambda view: view.map(curves_task, [cfg.curves_config()],
                                                shared=(op,))[0], "curves")  # fmt: skip
        if curves_bg is None:
            stage("curves")
        if not stage.done(STAGES["policies"]):
            # the static search needs no labels: with workers it runs beside the oracle on a
            # worker the oracle's threads leave idle (same answer)
            run.static = BackgroundStatic(run.op, run.node, run.oracle, executor)
        stage("oracle")
        shortcut = shortcut_note(cfg, run.seconds.get("oracle"), run.labels) if run.fits else {}
        if curves_bg is not None:
            stage("curves", lambda tick: curves_bg.result())
        stage("policies")
        return _report(run, out, pf, sha, lat_prof, command, shortcut, n_requests)


def _report(run: Run, out: Path, pf: ProgressFactory, sha: str, lat_prof: Any, command: str,
            shortcut: dict[str, Any], n_requests: int) -> AnalyzeResult:  # fmt: skip
    t_rep = time.perf_counter()
    with pf("report") as tick:
        tick(0, 4)
        data = _run_data(run, sha, lat_prof, command)
        data.meta.update(shortcut, trace_requests=n_requests)
        store_path = write_store(out / "helm.duckdb", data)
        tick(1, 4)
        labels_path = write_labels(run.labels, out / "labels.parquet")
        report_path = report_html.write_report(out / "report.html", data)
        tick(3, 4)
        run.runs.append(StageRun("report", "", False, time.perf_counter() - t_rep))
        summary = build_summary(data)
        summary["setup"]["slo_source"] = data.meta["slo_source"]
        summary["timings_s"] = {r.name: round(r.seconds, 3) for r in run.runs}
        summary_path = io.write_json(out / "summary.json", summary)
        tick(4, 4)
    return AnalyzeResult(out, report_path, summary_path, store_path, labels_path, summary,
                         tuple(run.runs), run.op.notes)  # fmt: skip


def _config_table(cfg: AnalyzeConfig) -> pl.DataFrame:
    rows = []
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v):
            rows += [(f.name, k, json.dumps(x, default=str)) for k, x in asdict(v).items()]
        else:
            rows.append(("analyze", f.name, json.dumps(v, default=str)))
    return pl.DataFrame(rows, schema=["section", "key", "value"], orient="row")


def _run_data(run: Run, sha: str, lat_prof: Any, command: str) -> RunData:
    cfg, ctx = run.cfg, run.op
    tables: dict[str, pl.DataFrame] = {}
    meta: dict[str, Any] = {}
    for o in run.outputs.values():
        tables.update({k: v for k, v in o.tables.items() if not k.startswith("_")})
        meta.update(o.meta)
    tables.update(labels_tables(run.labels))
    tables[LATENCY_COEF] = latency_table(ctx.latency, lat_prof.source)
    tables[CONFIG] = _config_table(cfg)
    v = versions()
    tables[VERSIONS] = pl.DataFrame({"package": list(v), "version": list(v.values())})
    tables[TIMINGS] = pl.DataFrame(
        {"stage": [r.name for r in run.runs], "seconds": [r.seconds for r in run.runs],
         "cached": [r.cached for r in run.runs], "key": [r.key for r in run.runs]}
    )  # fmt: skip
    tpath = run.tpath
    meta.update(
        trace_path=str(tpath), trace_stem=tpath.stem, trace_sha256=sha, seed=cfg.seed,
        gpu=ctx.gpu.name, model=ctx.model.name, latency=lat_prof.name,
        latency_source=lat_prof.source, slo_ms=run.slo_ms,
        slo_source="given (--slo-ms or [analyze] slo_ms)" if cfg.slo_ms is not None else
        f"model {ctx.model.name} default_slo_ms: {ctx.model.slo_source}",
        attainment=cfg.attainment,
        window_s=cfg.window_s, windows=ctx.n_windows(cfg.window_s), pool_bytes=ctx.pool_bytes,
        pool_source=ctx.pool_source, footprint_bytes=ctx.footprint_bytes,
        notes=list(ctx.notes), command=command or f"helm-plan analyze {tpath}",
        python=sys.version.split()[0], trace_provenance=trace.provenance(tpath),
        n_requests=int(ctx.arrays.n_requests), oracle_warmup=cfg.oracle.warmup,
        oracle_warmup_windows=cfg.oracle.warmup_windows,
    )  # fmt: skip
    return RunData(tables=tables, meta=meta)
