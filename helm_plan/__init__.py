"""helm-plan: trace-driven capacity planning for generative-recommender serving."""

from __future__ import annotations

from helm_plan._version import __version__
from helm_plan.arrays import TraceArrays, from_table, window_edges
from helm_plan.errors import (
    ConfigError,
    HelmPlanError,
    IngestError,
    InputFileError,
    ProfileError,
    TraceError,
)
from helm_plan.pool import resolve_pool
from helm_plan.profiles import (
    GpuProfile,
    LatencyProfile,
    ModelProfile,
    load_gpu,
    load_latency,
    load_model,
)

__all__ = [
    "ConfigError",
    "GpuProfile",
    "HelmPlanError",
    "IngestError",
    "InputFileError",
    "LatencyProfile",
    "ModelProfile",
    "ProfileError",
    "TraceArrays",
    "TraceError",
    "__version__",
    "from_table",
    "load_gpu",
    "load_latency",
    "load_model",
    "resolve_pool",
    "window_edges",
]
