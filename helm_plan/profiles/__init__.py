"""GPU, model and latency profiles: TOML files with units in their key names.

A profile is named by a shipped file (``a100-80g``) or a path to the user's
own TOML file. Every field is validated with a precise error.

One module per kind (:mod:`.gpu`, :mod:`.model`, :mod:`.latency`) over one
shared reader and validator (:mod:`.loading`); callers import from here.
"""

from __future__ import annotations

from helm_plan.profiles.gpu import DEFAULT_GPU, HOST_KEYS, GiB, GpuProfile, load_gpu
from helm_plan.profiles.latency import (
    LatencyProfile,
    default_latency_name,
    load_latency,
    profile_to_dict,
)

# _data_root (the shipped profiles' folder) stays importable from here as before the split:
# tests read the shipped TOML files through it.
from helm_plan.profiles.loading import _data_root as _data_root
from helm_plan.profiles.loading import available
from helm_plan.profiles.model import (
    DEFAULT_MODEL,
    TABLE_KEYS,
    EmbTable,
    ModelProfile,
    load_model,
    resolve_slo_ms,
)

__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_MODEL",
    "HOST_KEYS",
    "TABLE_KEYS",
    "EmbTable",
    "GiB",
    "GpuProfile",
    "LatencyProfile",
    "ModelProfile",
    "available",
    "default_latency_name",
    "load_gpu",
    "load_latency",
    "load_model",
    "profile_to_dict",
    "resolve_slo_ms",
]
