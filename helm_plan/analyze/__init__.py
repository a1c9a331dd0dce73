"""``helm-plan analyze``: the staged, resumable end-to-end run (DESIGN.md, Pipeline).

:func:`run_analyze` runs inspect → curves → oracle → policies → report on a
trace into a run directory; :func:`build_config` turns a TOML plan file and
CLI overrides into an :class:`AnalyzeConfig`.
"""

from __future__ import annotations

from helm_plan.analyze.config import (
    DEMO_COLD_WORKERS,
    DEMO_POOL_FRACTION,
    DEMO_SLO_MS,
    DEMO_SYNTH,
    DEMO_TRIALS,
    DEMO_WORKERS,
    ORACLE_DEFAULTS,
    AnalyzeConfig,
    build_config,
    demo_plan,
    demo_synth_config,
)
from helm_plan.analyze.run import STAGES, prepare_demo, run_analyze
from helm_plan.analyze.state import AnalyzeResult, StageRun

__all__ = [
    "DEMO_COLD_WORKERS",
    "DEMO_POOL_FRACTION",
    "DEMO_SLO_MS",
    "DEMO_SYNTH",
    "DEMO_TRIALS",
    "DEMO_WORKERS",
    "ORACLE_DEFAULTS",
    "STAGES",
    "AnalyzeConfig",
    "AnalyzeResult",
    "StageRun",
    "build_config",
    "demo_plan",
    "demo_synth_config",
    "prepare_demo",
    "run_analyze",
]
