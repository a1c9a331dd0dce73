"""Capacity planning: scale a trace to the planned traffic, find the minimal fleet per choice.

- :mod:`.scale`: add users (default) or compress time to reach a target load
  (:mod:`.dense` does it to the loaded arrays);
- :mod:`.search`: the minimal fleet size by bracket and bisection, and its cost;
- :mod:`.loadcurve`: one node's P99 against offered load, and its maximum QPS;
- :mod:`.run`: the plan itself (GPU × policy × router), :mod:`.result` its tables and plan.json.
"""

from __future__ import annotations

from helm_plan.plan.config import PlanConfig
from helm_plan.plan.dense import scale_arrays
from helm_plan.plan.gpus import GpuSetup, default_policies, gpu_setups
from helm_plan.plan.loadcurve import LoadCurve, LoadPoint, LoadSetup, load_curve, load_curves
from helm_plan.plan.result import PlanResult, plan_doc
from helm_plan.plan.run import plan
from helm_plan.plan.scale import ScaleBy, Scaling, factor_for, peak_qps, scale
from helm_plan.plan.search import Cost, Point, Search, cost, first_guess, minimal_nodes

__all__ = [
    "Cost",
    "GpuSetup",
    "LoadCurve",
    "LoadPoint",
    "LoadSetup",
    "PlanConfig",
    "PlanResult",
    "Point",
    "ScaleBy",
    "Scaling",
    "Search",
    "cost",
    "default_policies",
    "factor_for",
    "first_guess",
    "gpu_setups",
    "load_curve",
    "load_curves",
    "minimal_nodes",
    "peak_qps",
    "plan",
    "plan_doc",
    "scale",
    "scale_arrays",
]
