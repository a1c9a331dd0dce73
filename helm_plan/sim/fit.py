"""`helm-plan fit`: replay a trace's caches and fit the latency model to its ``latency_ms``.

The replay (cold caches at a fixed ratio, never resized) gives each request's
predictors; :func:`helm_plan.latency.observed.fit_observed` fits and validates
the coefficients on them.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

import numpy as np

from helm_plan._version import __version__
from helm_plan.cache.core import Workload, new_state, replay
from helm_plan.errors import ConfigError, TraceError
from helm_plan.latency.model import LatencyModel
from helm_plan.latency.observed import ObservedFit, fit_observed
from helm_plan.profiles import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    LatencyProfile,
    ModelProfile,
    profile_to_dict,
)
from helm_plan.sim.context import load_context


def predictors_from_trace(
    wl: Workload, model: ModelProfile, *, ratio: float, pool_bytes: int
) -> dict[str, np.ndarray]:
    """Per-request predictors from replaying the trace through the EMB/KV caches at ``ratio``.

    The caches start cold at the first request and are never resized. Returns
    ``n_computed, ctx_len, n_cand, lookup_bytes, miss_bytes`` (int64, one per request).
    """
    state = new_state(wl, ratio, pool_bytes, model)
    out = replay(wl, state)
    return {
        "n_computed": out.n_computed,
        "ctx_len": out.ctx_len,
        "n_cand": out.n_cand,
        "lookup_bytes": out.lookup_bytes,
        "miss_bytes": out.miss_bytes,
    }


@dataclass(frozen=True)
class FitConfig:
    """Options of `helm-plan fit`."""

    gpu: str = DEFAULT_GPU
    """GPU profile name or path."""
    model: str = DEFAULT_MODEL
    """Model profile name or path."""
    latency: str | None = None
    """Base latency profile (bandwidths, unidentifiable terms); None = shipped GPU_MODEL."""
    ratio: float = 0.5
    """EMB share r of the cache pool during the replay."""
    pool_bytes: int | None = None
    """Cache pool size in bytes; None sizes it from HBM."""
    pool_fraction: float | None = None
    """Cache pool as a share of the trace's EMB+KV footprint; None sizes it from HBM."""
    holdout_fraction: float = 0.2
    """Share of requests held out to validate the fit."""
    seed: int = 0
    """Seed for candidate draws and the train/held-out split."""

    def __post_init__(self) -> None:
        if not 0 <= self.ratio <= 1:
            raise ConfigError(
                f"ratio must be in [0, 1], got {self.ratio}", hint="pass --ratio in [0, 1]"
            )
        if not 0 <= self.holdout_fraction < 1:
            raise ConfigError(
                f"holdout_fraction must be in [0, 1), got {self.holdout_fraction}",
                hint="pass --holdout in [0, 1)",
            )


@dataclass(frozen=True)
class TraceFit:
    """`helm-plan fit` output: the fit, the base it started from, and the profile to write."""

    fit: ObservedFit
    """The fit and its validation."""
    base: LatencyModel
    """The model before fitting (shipped/roofline or --latency)."""
    base_name: str
    """Name of the base latency profile."""
    profile: LatencyProfile
    """The fitted coefficients as a latency profile."""
    pool_bytes: int
    """Cache pool used for the replay, bytes."""
    pool_source: str
    """How the pool was sized."""

    def toml_dict(self) -> dict[str, Any]:
        """TOML-ready dict of the fitted profile with its ``[derivation]`` table."""
        d = self.fit.derivation()
        d.update(
            {
                "base_profile": self.base_name,
                "pool_bytes": self.pool_bytes,
                "pool_source": self.pool_source,
            }
        )
        return profile_to_dict(self.profile, d)


def fit_trace(path: Any, cfg: FitConfig) -> TraceFit:
    """Read a trace with ``latency_ms``, replay its caches, fit and validate the model."""
    ctx = load_context(
        path, gpu=cfg.gpu, model=cfg.model, latency=cfg.latency,
        pool_bytes=cfg.pool_bytes, pool_fraction=cfg.pool_fraction, seed=cfg.seed,
    )  # fmt: skip
    arr, lat = ctx.arrays, ctx.latency_profile
    assert lat is not None
    if arr.latency_ms is None:
        raise TraceError(
            f"{path} has no latency_ms column",
            hint="helm-plan fit needs observed latencies from a serving log",
        )
    preds = predictors_from_trace(
        ctx.workload, ctx.model, ratio=cfg.ratio, pool_bytes=ctx.pool_bytes
    )
    fit = fit_observed(
        arr.latency_ms, preds, base=ctx.latency, holdout_fraction=cfg.holdout_fraction,
        seed=cfg.seed,
    )  # fmt: skip
    source = (
        f"fitted to observed latency_ms of {path} ({fit.n_train + fit.n_heldout} requests, "
        f"cache replay at r={cfg.ratio}), base {lat.name}, "
        f"{_dt.datetime.now(_dt.UTC).date().isoformat()}, helm-plan {__version__}"
    )
    profile = fit.profile(
        name=f"{ctx.gpu.name}_{ctx.model.name}_observed", gpu=ctx.gpu.name,
        model=ctx.model.name, source=source,
    )  # fmt: skip
    return TraceFit(fit, ctx.latency, lat.name, profile, ctx.pool_bytes, ctx.pool_source)
