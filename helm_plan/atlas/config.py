"""What the atlas varies: the axes, one cell's settings, the grid of 2-D panels.

A **cell** fixes every axis (:class:`Cell`); the atlas is a set of 2-D
**panels** (heatmaps), each varying two axes over their levels with every
other axis at the **base** cell. Cells shared between panels (the base, when
its value is a level of both axes) are computed once.

The axes (:data:`AXES`) are the workload and hardware parameters that decide
whether the EMB/KV split matters:

- the model: ``emb_row_bytes`` (bytes one EMB lookup reads), ``candidates``
  (scored per request, each one lookup), ``stack`` (layers x d_model: KV bytes
  per token and compute);
- the users: ``history`` (mean pre-existing history of a returning user) and
  ``returning_share``;
- the bursts: ``burst_cold_share`` (users new to the trace) and
  ``burst_new_item_share`` (items never seen before the burst), and the
  ``swing`` (burst rate as a multiple of the base rate);
- the catalogue: ``items`` and ``zipf_alpha``;
- the node: ``pool_fraction`` (the cache pool as a share of the cell trace's
  EMB+KV footprint), ``utilisation`` (mean arrival rate x the lowest mean
  service time over static splits: up to where the SLO binds) and ``h2d_gbps``
  (the H2D link).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from helm_plan.config import require_int, require_positive, require_range
from helm_plan.errors import ConfigError


@dataclass(frozen=True)
class Cell:
    """Every axis of one atlas cell (the atlas model, workload and node)."""

    emb_row_bytes: int = 4096
    """Bytes of the EMB row one lookup reads (the atlas model's one item table, fp16)."""
    candidates: int = 64
    """Candidates scored per request (each looks up one row)."""
    stack: str = "16x512"
    """HSTU stack ``LAYERSxD_MODEL``: KV bytes per token (2·layers·d·2) and compute."""
    history: float = 1024.0
    """Mean pre-existing history of a returning user's first request, tokens (cap 2048)."""
    returning_share: float = 0.8
    """Share of users outside bursts who return with that history (the rest are new)."""
    burst_cold_share: float = 0.8
    """Share of burst requests that are a user's first (users new to the trace)."""
    burst_new_item_share: float = 0.2
    """Share of burst items never drawn before that burst."""
    items: int = 200_000
    """Item catalogue size."""
    zipf_alpha: float = 0.8
    """Item popularity skew."""
    pool_fraction: float = 0.03
    """Cache pool as a share of the cell trace's EMB+KV footprint."""
    utilisation: float = 0.5
    """Mean arrival rate x the lowest mean service time over the static splits."""
    swing: float = 2.5
    """Regime swing: burst arrival rate as a multiple of the base rate."""
    h2d_gbps: float = 25.0
    """Host-to-device link bandwidth, GB/s (a100-80g: 25)."""

    def __post_init__(self) -> None:
        require_int("emb_row_bytes", self.emb_row_bytes, 2)
        if self.emb_row_bytes % 2:
            raise ConfigError(f"emb_row_bytes must be even (fp16 rows), got {self.emb_row_bytes}",
                              hint="use e.g. 512, 2048 or 8192")  # fmt: skip
        require_int("candidates", self.candidates, 0, 4096)
        parse_stack(self.stack)
        require_range("history", self.history, 1.0, 2048.0)
        for name in ("returning_share", "burst_cold_share", "burst_new_item_share"):
            require_range(name, getattr(self, name), 0.0, 1.0)
        if self.burst_new_item_share > 0.5:
            raise ConfigError(
                f"burst_new_item_share must be at most 0.5, got {self.burst_new_item_share}",
                hint="the rest of a burst's items come from its hot set and the catalogue",
            )
        require_int("items", self.items, 1_000, 1_000_000_000)
        require_range("zipf_alpha", self.zipf_alpha, 0.0, 3.0)
        require_range("pool_fraction", self.pool_fraction, 1e-4, 1.0)
        require_range("utilisation", self.utilisation, 0.01, 0.99)
        require_range("swing", self.swing, 1.0, 20.0)
        require_positive("h2d_gbps", self.h2d_gbps)


def parse_stack(text: str) -> tuple[int, int]:
    """``"LAYERSxD_MODEL"`` as (layers, d_model), with a precise error."""
    try:
        a, b = (int(x) for x in str(text).lower().split("x"))
    except ValueError:
        raise ConfigError(f"stack must be LAYERSxD_MODEL, got {text!r}",
                          hint='e.g. "4x256" or "16x512"') from None  # fmt: skip
    if not (1 <= a <= 128 and 16 <= b <= 16384):
        raise ConfigError(f"stack {text!r} out of range (1-128 layers, d_model 16-16384)",
                          hint='e.g. "4x256" or "16x512"')  # fmt: skip
    return a, b


@dataclass(frozen=True)
class Axis:
    """One axis of the atlas: a :class:`Cell` field, its label and its levels."""

    name: str
    """The Cell field."""
    label: str
    """Axis title (with unit)."""
    levels: tuple[Any, ...]
    """Levels of the default grid."""
    quick: tuple[Any, ...]
    """Levels of ``--quick``."""


AXES: dict[str, Axis] = {
    a.name: a
    for a in (
        Axis("emb_row_bytes", "EMB bytes per lookup", (1024, 4096, 16384), (1024, 16384)),
        Axis("candidates", "candidates per request", (16, 64, 256), (16, 256)),
        Axis("stack", "layers x d_model", ("4x256", "16x512", "24x1024"), ("4x256", "24x1024")),
        Axis("history", "returning user's history (tokens)", (256.0, 1024.0, 2048.0),
             (256.0, 2048.0)),
        Axis("returning_share", "returning share", (0.2, 0.5, 0.8), (0.2, 0.8)),
        Axis("burst_cold_share", "cold users in bursts", (0.2, 0.5, 0.8), (0.2, 0.8)),
        Axis("burst_new_item_share", "new items in bursts", (0.0, 0.2, 0.4), (0.0, 0.4)),
        Axis("items", "catalogue (items)", (20_000, 200_000, 2_000_000), (20_000, 2_000_000)),
        Axis("zipf_alpha", "popularity skew", (0.6, 0.8, 1.1), (0.6, 1.1)),
        Axis("pool_fraction", "pool / footprint", (0.01, 0.03, 0.1), (0.01, 0.1)),
        Axis("utilisation", "utilisation", (0.3, 0.5, 0.7), (0.3, 0.7)),
        Axis("swing", "regime swing (burst x base rate)", (1.5, 2.5, 4.0), (1.5, 4.0)),
        Axis("h2d_gbps", "H2D GB/s", (8.0, 25.0, 64.0), (8.0, 64.0)),
    )
}  # fmt: skip
"""Every axis, by Cell field."""

DEFAULT_PANELS: tuple[tuple[str, str], ...] = (
    ("pool_fraction", "utilisation"),
    ("history", "returning_share"),
    ("burst_cold_share", "burst_new_item_share"),
    ("items", "zipf_alpha"),
    ("emb_row_bytes", "candidates"),
    ("stack", "h2d_gbps"),
    ("swing", "utilisation"),
)
"""The default grid's panels (x axis, y axis): every axis appears at least once."""


@dataclass(frozen=True)
class AtlasConfig:
    """The atlas grid and how each cell is measured (``helm-plan atlas``)."""

    base: Cell = field(default_factory=Cell)
    """Every axis a panel does not vary."""
    panels: tuple[tuple[str, str], ...] = DEFAULT_PANELS
    """2-D panels (x axis, y axis), by axis name."""
    quick: bool = False
    """Use each axis's ``quick`` levels (2 per axis) instead of its default ones."""
    levels: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    """Levels overriding an axis's (axis name, levels)."""
    requests: int = 6000
    """Expected requests of each cell's trace (its bursts included)."""
    windows: int = 12
    """Windows per cell trace (the window length follows from the utilisation)."""
    trials: int = 4
    """Optuna trials per window of the oracle, on top of its coarse grid and edge points."""
    coarse_step: float = 0.2
    """Coarse grid of the oracle and the best-static search."""
    n_boot: int = 200
    """Bootstrap resamples (over windows) of each gain's interval."""
    confidence: float = 0.95
    """Confidence level of the intervals."""
    seed: int = 0
    """Seed of every cell's trace, candidate draws, Optuna studies and bootstrap."""
    gpu: str = "a100-80g"
    """GPU profile every cell starts from (its H2D bandwidth is an axis)."""

    def __post_init__(self) -> None:
        for x, y in self.panels:
            for a in (x, y):
                if a not in AXES:
                    raise ConfigError(f"unknown atlas axis {a!r}",
                                      hint=f"use one of {', '.join(AXES)}")  # fmt: skip
            if x == y:
                raise ConfigError(f"panel ({x}, {y}) varies one axis twice",
                                  hint="give two different axes")  # fmt: skip
        if not self.panels:
            raise ConfigError(
                "the atlas needs at least one panel", hint="e.g. pool_fraction, utilisation"
            )
        for name, lv in self.levels:
            if name not in AXES:
                raise ConfigError(
                    f"unknown atlas axis {name!r}", hint=f"use one of {', '.join(AXES)}"
                )
            if not lv:
                raise ConfigError(f"axis {name} has no levels", hint="give at least one level")
            for v in lv:  # each level must make a valid cell
                dataclasses.replace(self.base, **{name: v})
        require_int("requests", self.requests, 500, 10_000_000)
        require_int("windows", self.windows, 3, 1000)
        require_int("trials", self.trials, 0)
        require_int("n_boot", self.n_boot, 10)
        require_range("confidence", self.confidence, 0.5, 0.999)
        require_int("seed", self.seed, 0)

    def axis_levels(self, name: str) -> tuple[Any, ...]:
        """The levels of axis ``name`` in this grid."""
        given = dict(self.levels)
        if name in given:
            return tuple(given[name])
        a = AXES[name]
        return a.quick if self.quick else a.levels

    def run_key(self) -> dict[str, Any]:
        """What, beside a cell's settings, decides its result (part of its cache key)."""
        keep = ("requests", "windows", "trials", "coarse_step", "n_boot", "confidence", "seed",
                "gpu")  # fmt: skip
        return {k: getattr(self, k) for k in keep}


QUICK = {"quick": True, "requests": 4000, "windows": 10, "n_boot": 100}
"""``--quick``: every panel at 2 x 2 levels (each axis's ``quick`` ones) on smaller cell traces."""


def grid(cfg: AtlasConfig) -> list[tuple[Cell, list[tuple[int, Any, Any]]]]:
    """Every distinct cell of the grid, in panel order, with where it sits:
    ``(panel index, x level, y level)`` for each panel that holds it."""
    out: dict[Cell, list[tuple[int, Any, Any]]] = {}
    for p, (x, y) in enumerate(cfg.panels):
        for yv in cfg.axis_levels(y):
            for xv in cfg.axis_levels(x):
                c = dataclasses.replace(cfg.base, **{x: xv, y: yv})
                out.setdefault(c, []).append((p, xv, yv))
    return list(out.items())


def build_config(
    plan: dict[str, Any] | None = None, *, quick: bool = False, seed: int | None = None
) -> AtlasConfig:
    """An AtlasConfig from a TOML plan's sections: ``[atlas]`` (AtlasConfig fields; ``panels``
    a list of ``[x, y]`` pairs), ``[base]`` (Cell fields) and ``[levels]`` (axis = [levels]);
    ``quick`` applies :data:`QUICK` under the file's own settings, ``seed`` overrides."""
    from helm_plan.config import from_dict

    plan = dict(plan or {})
    unknown = sorted(set(plan) - {"atlas", "base", "levels"})
    if unknown:
        raise ConfigError(f"unknown atlas section [{unknown[0]}]",
                          hint="valid sections: [atlas], [base], [levels]")  # fmt: skip
    top: dict[str, Any] = {**(QUICK if quick else {}), **plan.get("atlas", {})}
    if "panels" in top:
        try:
            top["panels"] = tuple((str(x), str(y)) for x, y in top["panels"])
        except (TypeError, ValueError):
            raise ConfigError(
                "[atlas] panels must be a list of [x, y] axis pairs",
                hint='e.g. panels = [["pool_fraction", "utilisation"]]',
            ) from None
    for k in ("base", "levels"):
        if k in top:
            raise ConfigError(f"[atlas] {k} belongs in its own section", hint=f"use [{k}]")
    if seed is not None:
        top["seed"] = seed
    base = from_dict(Cell, dict(plan.get("base", {})), section="base")
    levels = plan.get("levels", {})
    if not isinstance(levels, dict) or not all(isinstance(v, list) for v in levels.values()):
        raise ConfigError("[levels] maps an axis to a list of levels",
                          hint='e.g. utilisation = [0.3, 0.6, 0.9]')  # fmt: skip
    top["levels"] = tuple((k, tuple(v)) for k, v in levels.items())
    levels_ = top.pop("levels")
    cfg = from_dict(AtlasConfig, top, section="atlas")
    return dataclasses.replace(cfg, base=base, levels=levels_)
