"""The sensitivity atlas (``helm-plan atlas``): where the EMB/KV split matters.

- :mod:`.config`: the axes, one cell's settings (:class:`Cell`), the grid of 2-D
  panels (:class:`AtlasConfig`);
- :mod:`.cell`: one cell's model, GPU and trace, measured as ``analyze
  --no-capacity`` measures a trace (:func:`measure`), or exported for analyze
  (:func:`export`);
- :mod:`.run`: every cell of a grid, cached by content, over the executor seam
  (:func:`run_atlas`), and the output files;
- :mod:`.page`: the self-contained HTML page of heatmaps.
"""

from __future__ import annotations

from helm_plan.atlas.cell import EXPORT_FILES, cell_model, default_slo_ms, export, measure, setup
from helm_plan.atlas.config import (
    AXES,
    DEFAULT_PANELS,
    QUICK,
    AtlasConfig,
    Cell,
    build_config,
    grid,
)
from helm_plan.atlas.page import render
from helm_plan.atlas.run import OUTPUTS, AtlasResult, cell_key, run_atlas, write_outputs

__all__ = [
    "EXPORT_FILES",
    "OUTPUTS",
    "AXES",
    "DEFAULT_PANELS",
    "QUICK",
    "AtlasConfig",
    "AtlasResult",
    "Cell",
    "build_config",
    "cell_key",
    "cell_model",
    "default_slo_ms",
    "export",
    "grid",
    "measure",
    "render",
    "run_atlas",
    "setup",
    "write_outputs",
]
