"""Latency stage: the service-time model, roofline profiles, calibration and observed fits.

Importing this package does not import torch; ``helm_plan.latency.calibrate`` does, lazily.
"""

from __future__ import annotations

from helm_plan.latency.model import (
    TERMS,
    LatencyModel,
    build_latency_model,
    profile_mismatch,
    resolve_latency,
)

__all__ = [
    "TERMS",
    "LatencyModel",
    "build_latency_model",
    "profile_mismatch",
    "resolve_latency",
]
