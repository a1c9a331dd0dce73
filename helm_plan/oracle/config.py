"""How the oracle searches r per window (DESIGN.md, Oracle)."""

from __future__ import annotations

from dataclasses import dataclass

from helm_plan.config import require_int, require_positive, require_range
from helm_plan.errors import ConfigError

SAMPLERS = ("tpe", "gp")
"""Optuna samplers the oracle can use."""
WARMUPS = ("window", "carry")
"""How a window's caches and queue are warmed before it is measured."""


@dataclass(frozen=True)
class OracleConfig:
    """How the oracle searches r per window."""

    trials: int = 20
    """Optuna trials per window, on top of the coarse-grid and edge-point warm start."""
    trial_batch: int = 2
    """Optuna trials asked at a time (``study.ask``) and evaluated side by side: the labels
    depend on it, never on the worker count (1 = Optuna's own one-at-a-time loop)."""
    sampler: str = "tpe"
    """Optuna sampler: tpe (default) or gp."""
    grid_step: float | None = None
    """If set, an exhaustive grid of this step replaces Optuna (validation, e.g. 0.01)."""
    ratio_step: float | None = 0.01
    """Lattice of r that Optuna searches (None = continuous)."""
    coarse_step: float = 0.1
    """Step of the coarse grid stored in the labels (a multiple of 0.01)."""
    seed: int = 0
    """Base seed; window w's study uses SeedSequence([seed, w])."""
    warmup_windows: int = 1
    """Windows before w on which the caches are warmed at r (0 = cold at the window start)."""
    warmup: str = "carry"
    """'carry': each window starts from the caches, queue and refill the labelled schedule
    leaves (sequential; what a running node sees); 'window': cold at r on the warm-up
    windows and an idle queue, windows independent and in parallel."""
    flat_tol: float = 0.02
    """Relative P99 tolerance of the flatness measure."""
    seed_points: tuple[float, ...] = ()
    """Ratios every search (each window's, best static's) evaluates among its first points:
    ``analyze`` puts here a ratio at which neither cache evicts when the footprint fits the
    pool (:attr:`helm_plan.sim.context.NodeContext.fit_band`), since its search then stops
    at its first points."""

    def __post_init__(self) -> None:
        require_int("trials", self.trials, 0)
        require_int("trial_batch", self.trial_batch, 1)
        if self.sampler not in SAMPLERS:
            raise ConfigError(
                f"unknown sampler {self.sampler!r}", hint=f"use one of {', '.join(SAMPLERS)}"
            )
        if self.grid_step is not None:
            require_positive("grid_step", self.grid_step)
            require_range("grid_step", self.grid_step, 0.0, 1.0)
        if self.ratio_step is not None:
            require_positive("ratio_step", self.ratio_step)
            require_range("ratio_step", self.ratio_step, 0.0, 1.0)
        require_positive("coarse_step", self.coarse_step)
        require_range("coarse_step", self.coarse_step, 0.01, 1.0)
        if abs(self.coarse_step * 100 - round(self.coarse_step * 100)) > 1e-6:
            raise ConfigError(
                f"coarse_step must be a multiple of 0.01, got {self.coarse_step}",
                hint="use e.g. 0.1 or 0.05",
            )
        require_int("seed", self.seed, 0)
        require_int("warmup_windows", self.warmup_windows, 0)
        if self.warmup not in WARMUPS:
            raise ConfigError(
                f"unknown warmup {self.warmup!r}", hint=f"use one of {', '.join(WARMUPS)}"
            )
        require_range("flat_tol", self.flat_tol, 0.0, 1.0)
        for r in self.seed_points:
            require_range("seed_points", r, 0.0, 1.0)
