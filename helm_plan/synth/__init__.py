"""Synthetic canonical traces (``helm-plan synth``): regimes, users, items, ``--like`` fits.

- :class:`SynthConfig` (:mod:`.config`): the generator's options;
- :func:`synthesize` / :func:`iter_chunks` (:mod:`.core`): the vectorised
  generator, streamed segment by segment;
- :mod:`.users`: arrivals, cold, returning and revisiting users per segment;
- :mod:`.items`: Zipf items with drift, burst hot sets and new items, in
  memory independent of the catalog size;
- :func:`write`, :func:`fit`, :func:`like_config` (:mod:`.like`): the parquet
  writer and the fit of a real trace's statistics for ``--like``
  (catalog estimate: :mod:`.catalog`);
- :func:`scenario`, :func:`synthesize_scenario`, :func:`write_scenario`
  (:mod:`.scenarios`): named scenarios with known answers (``--scenario``).
"""

from __future__ import annotations

from helm_plan.synth.config import MAX_ITEMS, ROW_GROUP_ROWS, ROW_GROUP_TOKENS, SynthConfig
from helm_plan.synth.core import Plan, iter_chunks, plan, synthesize, zipf_ranks
from helm_plan.synth.like import (
    LIKE_SCALE,
    LikeFit,
    SynthResult,
    fit,
    like_config,
    provenance,
    write,
)
from helm_plan.synth.scenarios import (
    SCENARIOS,
    DetectabilityConfig,
    FlatConfig,
    Phase,
    Scenario,
    detectability,
    iter_scenario_chunks,
    scenario,
    synthesize_scenario,
    write_scenario,
)

__all__ = [
    "LIKE_SCALE",
    "MAX_ITEMS",
    "ROW_GROUP_ROWS",
    "ROW_GROUP_TOKENS",
    "SCENARIOS",
    "DetectabilityConfig",
    "FlatConfig",
    "LikeFit",
    "Phase",
    "Plan",
    "Scenario",
    "SynthConfig",
    "SynthResult",
    "detectability",
    "fit",
    "iter_chunks",
    "iter_scenario_chunks",
    "like_config",
    "plan",
    "provenance",
    "scenario",
    "synthesize",
    "synthesize_scenario",
    "write",
    "write_scenario",
    "zipf_ranks",
]
