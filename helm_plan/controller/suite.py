"""The controller's training suite and its held-out split (DESIGN.md, Controller).

One controller must serve any trace, so it is trained on a suite, not one
trace: the synthetic regimes (steady, trend, burst, mixed) and the
``detectability`` scenario, public logs ingested and re-timed, at several
pool shares, loads (light, and heavy enough for the queue to dominate P99),
models (gr-small, gr-large, gr-prod) and catalogue scales. The held-out
split (:data:`HELD_OUT`) shares no trace, seed or public log with the
training split (:data:`TRAIN`): other seeds, loads and pools, and MovieLens
(never trained on; training reads Amazon) re-timed from Azure LLM arrivals
and with the mixed regime, and two heavily loaded scenario traces
(``benchmarks/bench_controller.py`` adds analyze's demo trace).

**Load** is asked as a utilisation (busy share of the node at ``r = 0.5``, at the
regime's base rate: a burst of 4x or a trend's 1.5x peak go above it, so a
bursty spec at 0.7 overloads the node during its bursts), so one spec means
the same pressure for any model: :func:`calibrated_qps` runs a
short pilot of the trace at a low rate and divides. The SLO is the model's
``default_slo_ms`` (:func:`helm_plan.profiles.resolve_slo_ms`) unless a spec
sets one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from helm_plan.errors import ConfigError
from helm_plan.profiles import load_model, resolve_slo_ms
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext, load_context
from helm_plan.sim.node import simulate_node

WINDOW_S = 10.0
"""Window of every suite trace."""
PILOT_QPS = 40.0
"""Rate of the load pilot."""
PILOT_S = 60.0
"""Length of the load pilot, seconds."""
MAX_QPS = 3000.0
"""Highest rate a spec may calibrate to (a bound on the suite's cost)."""

_LOGS = {"movielens": "movielens-100k.inter.tsv", "amazon": "amazon-video-games.seq.txt"}
_ARRIVALS = {"azure": "azure-llm-2023-code.csv", "servegen": "servegen-m-large"}


@dataclass(frozen=True)
class TraceSpec:
    """One trace of the suite: where it comes from, the node it runs on, its load."""

    kind: str
    """``synth`` (a regime), ``scenario`` (detectability) or ``log`` (a public log)."""
    source: str
    """The regime (synth), the scenario name, or the log (movielens, amazon)."""
    model: str
    """Model profile."""
    pool_fraction: float
    """Pool as a share of the trace's EMB+KV footprint."""
    util: float
    """Target utilisation at r = 0.5 (the load)."""
    seed: int
    """Generator / ingest seed."""
    items: int = 100_000
    """Catalogue scale (synth)."""
    duration_s: float = 200.0
    """Trace length, seconds."""
    timing: str = "steady"
    """How a log is re-timed: a regime, or real arrivals (azure, servegen)."""
    slo_ms: float | None = None
    """P99 SLO (None: the model's default)."""

    @property
    def name(self) -> str:
        src = f"{self.source}/{self.timing}" if self.kind == "log" else self.source
        return (f"{self.kind}:{src}:{self.model}:pool{self.pool_fraction:g}:util{self.util:g}"
                f":seed{self.seed}")  # fmt: skip

    def node(self) -> NodeConfig:
        """The node every figure of this trace is measured on."""
        return NodeConfig(window_s=WINDOW_S, slo_ms=resolve_slo_ms(load_model(self.model),
                                                                   self.slo_ms))  # fmt: skip


def _S(kind: str, source: str, model: str, pool: float, util: float, seed: int,
       **kw: object) -> TraceSpec:  # fmt: skip
    return TraceSpec(kind, source, model, pool, util, seed, **kw)  # type: ignore[arg-type]


TRAIN: tuple[TraceSpec, ...] = (
    _S("synth", "steady", "gr-small", 0.1, 0.05, 1, duration_s=100.0),
    _S("synth", "burst", "gr-small", 0.05, 0.05, 2, items=1_000_000, duration_s=100.0),
    _S("synth", "trend", "gr-prod", 0.1, 0.3, 3, duration_s=100.0),
    _S("synth", "mixed", "gr-prod", 0.05, 0.7, 4, items=1_000_000, duration_s=100.0),
    _S("synth", "steady", "gr-prod", 0.25, 0.85, 5, duration_s=80.0),
    _S("synth", "mixed", "gr-large", 0.1, 0.7, 6, duration_s=160.0),
    _S("synth", "burst", "gr-large", 0.25, 0.3, 7, items=1_000_000, duration_s=160.0),
    _S("scenario", "detectability", "gr-small", 0.05, 0.06, 8, duration_s=120.0),
    _S("scenario", "detectability", "gr-prod", 0.05, 0.7, 9, duration_s=80.0),
    _S("scenario", "detectability", "gr-large", 0.02, 0.6, 10, duration_s=160.0),
    _S("log", "amazon", "gr-small", 0.1, 0.1, 11, duration_s=100.0),
    _S("log", "amazon", "gr-prod", 0.05, 0.5, 12, timing="burst", duration_s=100.0),
    _S("log", "amazon", "gr-large", 0.1, 0.6, 13, timing="servegen", duration_s=160.0),
)
"""What the shipped controller is trained on."""

HELD_OUT: tuple[TraceSpec, ...] = (
    _S("synth", "mixed", "gr-large", 0.05, 0.3, 23, duration_s=160.0),
    _S("synth", "burst", "gr-prod", 0.1, 0.25, 22, duration_s=100.0),
    _S("synth", "trend", "gr-prod", 0.03, 0.6, 24, items=1_000_000, duration_s=100.0),
    _S("scenario", "detectability", "gr-prod", 0.05, 0.85, 25, duration_s=80.0),
    _S("scenario", "detectability", "gr-large", 0.02, 0.6, 26, duration_s=160.0),
    # Azure's arrivals peak at ~25x their mean, mixed bursts at 4x: lighter base loads
    _S("log", "movielens", "gr-prod", 0.1, 0.1, 27, timing="azure", duration_s=100.0),
    _S("log", "movielens", "gr-prod", 0.1, 0.15, 28, timing="mixed", duration_s=100.0),
)
"""Never trained on: the validation and bench_controller's held-out traces."""


def _table(
    spec: TraceSpec,
    qps: float,
    duration_s: float,
    datasets: Path | None,
    fill_s: float | None = None,
) -> pa.Table:
    """The trace of ``spec`` at ``qps`` for ``duration_s`` (a log's users cloned to fill
    ``fill_s``, default ``duration_s``)."""
    if spec.kind == "synth":
        from helm_plan.synth import SynthConfig, synthesize

        return synthesize(SynthConfig(regime=spec.source, qps=qps, duration_s=duration_s,
                                      items=spec.items, seed=spec.seed))  # fmt: skip
    if spec.kind == "scenario":
        from helm_plan.synth.scenarios import scenario, synthesize_scenario

        return synthesize_scenario(scenario(spec.source, qps=qps, phase_s=duration_s / 4,
                                            phases=4, seed=spec.seed))  # fmt: skip
    if spec.kind == "log":
        from helm_plan.ingest import IngestConfig, ingest

        if datasets is None or not (datasets / _LOGS[spec.source]).exists():
            raise ConfigError(
                f"{spec.name} needs {_LOGS[spec.source]} in the datasets folder",
                hint="set HELM_PLAN_DATASETS to the folder of the public logs",
            )
        arr = _ARRIVALS.get(spec.timing)
        cfg = IngestConfig(
            kind=spec.source, n_candidates=load_model(spec.model).n_candidates, qps=qps,
            duration_s=duration_s, seed=spec.seed,
            regime=None if arr else spec.timing, arrivals=datasets / arr if arr else None,
        )  # fmt: skip
        # a small log (MovieLens: ~2,800 sessions) has its users cloned until it fills the trace
        n0 = _log_requests(datasets / _LOGS[spec.source], spec.source)
        rep = _replicas(qps, fill_s or duration_s, n0)
        return ingest(datasets / _LOGS[spec.source], dataclasses.replace(cfg, replicate=rep))[0]
    raise ConfigError(f"unknown trace kind {spec.kind!r}", hint="use synth, scenario or log")


@functools.cache
def _log_requests(path: Path, kind: str) -> int:
    """Requests (sessions) of a public log ingested as it is."""
    from helm_plan.ingest import IngestConfig, ingest

    return ingest(path, IngestConfig(kind=kind, qps=1.0, seed=0))[0].num_rows


def _replicas(qps: float, duration_s: float, n0: int) -> int:
    return max(1, math.ceil(qps * duration_s / n0))


def _pilot_qps(spec: TraceSpec, tab: pa.Table) -> float:
    ctx = load_context(tab, model=spec.model, pool_fraction=spec.pool_fraction, seed=spec.seed)
    res = simulate_node(ctx, np.array([0.5]), dataclasses.replace(spec.node(), refill="lazy"))
    m = res.measured_from_window
    svc = res.service_s[len(res.service_s) - res.requests :] if m else res.service_s
    return float(min(spec.util / max(float(np.mean(svc)), 1e-9), MAX_QPS))


def calibrated_qps(spec: TraceSpec, datasets: Path | None = None) -> float:
    """The rate at which the trace keeps the node ``spec.util`` busy at r = 0.5 (a pilot).

    A log whose users are cloned to fill the trace is piloted a second time with its clones
    (cold users: a pilot of the log alone sees warmer caches and guesses too high a rate)."""
    q = _pilot_qps(spec, _table(spec, PILOT_QPS, PILOT_S, datasets))
    if spec.kind == "log" and datasets is not None:
        n0 = _log_requests(datasets / _LOGS[spec.source], spec.source)
        if _replicas(q, spec.duration_s, n0) > 1:
            q = _pilot_qps(spec, _table(spec, q, PILOT_S, datasets, fill_s=spec.duration_s))
    return q


def build(spec: TraceSpec, datasets: Path | None = None) -> tuple[NodeContext, NodeConfig]:
    """The node context of ``spec`` at its calibrated load, and its node config."""
    qps = calibrated_qps(spec, datasets)
    tab = _table(spec, qps, spec.duration_s, datasets)
    ctx = load_context(tab, model=spec.model, pool_fraction=spec.pool_fraction, seed=spec.seed)
    return ctx, spec.node()
