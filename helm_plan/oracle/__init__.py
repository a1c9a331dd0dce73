"""The oracle: offline-optimal EMB share per window, best static, and sensitivity measures.

- :func:`label_windows`: per-window ``r*`` (window or carry warm-up), the
  label table the report and the controller read (:mod:`.labels`);
- :func:`best_static`: the single ``r`` with the lowest whole-trace P99;
- :func:`resolve_bands`: chosen windows' flat bands made as fine as the ratio lattice
  (:mod:`.band`: what validation measures |r − r*| to);
- :mod:`.sensitivity`: regret, ratio distance, the flat band, the bootstrap
  CI of the value of adaptivity.

The oracle sits above the node simulator (it steps and forks
:class:`~helm_plan.sim.step.NodeRunner`) and maps independent work over an
:mod:`helm_plan.exec` executor.
"""

from __future__ import annotations

from helm_plan.oracle.band import Bands, distance_to_band, resolve_bands
from helm_plan.oracle.config import SAMPLERS, WARMUPS, OracleConfig
from helm_plan.oracle.labelling import label_windows
from helm_plan.oracle.labels import Labels, read_labels, write_labels
from helm_plan.oracle.sensitivity import (
    AdaptivityCI,
    adaptivity_ci,
    flat_band,
    flatness,
    ratio_distance,
    regret,
    sensitivity_table,
    window_regret,
)
from helm_plan.oracle.static import BestStatic, best_static

__all__ = [
    "SAMPLERS",
    "WARMUPS",
    "AdaptivityCI",
    "Bands",
    "BestStatic",
    "Labels",
    "OracleConfig",
    "adaptivity_ci",
    "best_static",
    "distance_to_band",
    "flat_band",
    "flatness",
    "label_windows",
    "ratio_distance",
    "read_labels",
    "regret",
    "resolve_bands",
    "sensitivity_table",
    "window_regret",
    "write_labels",
]
