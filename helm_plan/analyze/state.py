"""What one ``helm-plan analyze`` run holds as its stages go, and what it returns.

Its own module so that :mod:`helm_plan.analyze.run` (the pipeline: declared
stages, the cached runner, the report step) stays one subject.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helm_plan import exec as executors
from helm_plan.analyze.capacity import oracle_shortcut
from helm_plan.analyze.config import AnalyzeConfig
from helm_plan.analyze.stages import StageOutput
from helm_plan.oracle.static import BackgroundStatic
from helm_plan.regimes import RegimeSpan
from helm_plan.sim import NodeContext


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


@dataclass
class Run:
    """One run's state, as the stages read it (private to analyze.run and the stages)."""

    cfg: AnalyzeConfig
    tpath: Path
    executor: executors.Executor
    ctx: NodeContext
    """The trace as given (inspect and capacity read it)."""
    slo_ms: float
    """The SLO, resolved once (:func:`helm_plan.profiles.resolve_slo_ms`)."""
    base: dict[str, Any]
    """What every stage key includes: the trace, the profiles, the pool, the seed."""
    op: NodeContext | None = None
    """The analysed node's traffic (set after capacity)."""
    fleet_ratio: float | None = None
    """The planned fleet's static r (a row of the policies stage, set after capacity)."""
    fits: bool = False
    """The analysed node's footprint fits its pool (the oracle runs its grid only)."""
    static: BackgroundStatic | None = None
    """The best-static search running beside the oracle."""
    spans: list[RegimeSpan] = field(default_factory=list)
    """The trace's regime spans on the analysed node's timeline (the policies' by-regime
    figures; :func:`~helm_plan.analyze.operating.planned_spans`)."""
    labels: Any = None
    outputs: dict[str, StageOutput] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    runs: list[StageRun] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def node(self):  # noqa: ANN201
        return self.cfg.node_config(self.slo_ms)

    @property
    def oracle(self):  # noqa: ANN201
        o = self.cfg.oracle_config()
        return oracle_shortcut(o, self.op.fit_ratio(o.ratio_step)) if self.fits else o
