"""Ratio policies: which EMB share each window gets (a small registry, like the refill modes).

Specs (``parse_policy``):

- ``static:R``: r = R in every window;
- ``emb-max``: r = 1 (the whole pool to EMB);
- ``kv-max``: r = 0 (the whole pool to KV);
- ``best-static``: the single r minimising whole-trace P99 (:func:`helm_plan.oracle.best_static`);
- ``schedule:FILE``: per-window ``r_star`` from an oracle labels parquet. Windows
  without requests (NaN r_star) keep the previous window's ratio.

Adding a policy is one class with a ``name`` that calls :func:`register_policy`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from helm_plan.errors import ConfigError
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import NodeConfig

if TYPE_CHECKING:
    from helm_plan.oracle import OracleConfig

USAGE = "use static:R, emb-max, kv-max, best-static or schedule:FILE"


class PolicyKind(StrEnum):
    """Shipped policy names."""

    STATIC = "static"
    EMB_MAX = "emb-max"
    KV_MAX = "kv-max"
    BEST_STATIC = "best-static"
    SCHEDULE = "schedule"


class Policy(ABC):
    """Maps a prepared trace and node config to one ratio per window."""

    name: ClassVar[str]
    takes_arg: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def from_arg(cls, arg: str | None) -> Policy:
        """Build the policy from the text after ``name:`` (None if absent)."""

    @abstractmethod
    def ratios(
        self,
        ctx: NodeContext,
        node_cfg: NodeConfig,
        *,
        oracle_cfg: OracleConfig | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> np.ndarray:
        """EMB share per window of ``ctx`` at ``node_cfg.window_s``."""

    @property
    @abstractmethod
    def spec(self) -> str:
        """The canonical spec string."""


POLICIES: dict[str, type[Policy]] = {}
"""Registered policies by name."""


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make ``cls`` parseable under ``cls.name``."""
    POLICIES[cls.name] = cls
    return cls


def parse_policy(spec: str) -> Policy:
    """Parse a policy spec, with a precise error for unknown or malformed ones."""
    text = spec.strip()
    name, sep, arg = text.partition(":")
    cls = POLICIES.get(name)
    if cls is None:
        raise ConfigError(f"unknown policy {spec!r}", hint=USAGE)
    if cls.takes_arg and not sep:
        raise ConfigError(f"policy {name!r} needs an argument", hint=USAGE)
    if not cls.takes_arg and sep:
        raise ConfigError(f"policy {name!r} takes no argument, got {spec!r}", hint=USAGE)
    return cls.from_arg(arg if sep else None)


@register_policy
@dataclass(frozen=True)
class Static(Policy):
    """The same r in every window."""

    ratio: float
    """EMB share in [0, 1]."""
    name: ClassVar[str] = "static"
    takes_arg: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (np.isfinite(self.ratio) and 0.0 <= self.ratio <= 1.0):
            raise ConfigError(f"policy static: R must be in [0, 1], got {self.ratio}", hint=USAGE)

    @classmethod
    def from_arg(cls, arg: str | None) -> Policy:
        try:
            r = float(arg or "")
        except ValueError:
            raise ConfigError(
                f"policy static: R must be a number in [0, 1], got {arg!r}", hint=USAGE
            ) from None
        return cls(r)

    def ratios(self, ctx, node_cfg, *, oracle_cfg=None, progress=None):  # noqa: ANN001, ANN201
        return np.full(ctx.n_windows(node_cfg.window_s), self.ratio)

    @property
    def spec(self) -> str:
        return f"static:{self.ratio:g}"


@dataclass(frozen=True)
class _PoolToOneCache(Static):
    """A fixed extreme ratio named by the policy alone (no argument)."""

    takes_arg: ClassVar[bool] = False

    @classmethod
    def from_arg(cls, arg: str | None) -> Policy:
        return cls()

    @property
    def spec(self) -> str:
        return self.name


@register_policy
@dataclass(frozen=True)
class EmbMax(_PoolToOneCache):
    """r = 1: the whole pool holds EMB rows."""

    ratio: float = 1.0
    """Always 1."""
    name: ClassVar[str] = "emb-max"


@register_policy
@dataclass(frozen=True)
class KvMax(_PoolToOneCache):
    """r = 0: the whole pool holds KV."""

    ratio: float = 0.0
    """Always 0."""
    name: ClassVar[str] = "kv-max"


@register_policy
@dataclass(frozen=True)
class BestStaticPolicy(Policy):
    """The static r with the lowest whole-trace P99, found by the oracle machinery."""

    name: ClassVar[str] = "best-static"

    @classmethod
    def from_arg(cls, arg: str | None) -> Policy:
        return cls()

    def ratios(self, ctx, node_cfg, *, oracle_cfg=None, progress=None):  # noqa: ANN001, ANN201
        from helm_plan.oracle import OracleConfig, best_static

        best = best_static(ctx, node_cfg, oracle_cfg or OracleConfig(), progress)
        return np.full(ctx.n_windows(node_cfg.window_s), best.ratio)

    @property
    def spec(self) -> str:
        return self.name


@register_policy
@dataclass(frozen=True)
class Schedule(Policy):
    """Per-window ratios from an oracle labels file (its r_star column)."""

    path: Path
    """Labels parquet written by ``helm-plan oracle``."""
    name: ClassVar[str] = "schedule"
    takes_arg: ClassVar[bool] = True

    @classmethod
    def from_arg(cls, arg: str | None) -> Policy:
        if not arg:
            raise ConfigError("policy schedule needs a labels file: schedule:FILE", hint=USAGE)
        p = Path(arg)
        if not p.exists():
            raise ConfigError(
                f"policy schedule: labels file {p} not found",
                hint="make one with `helm-plan oracle TRACE -o FILE`",
            )
        return cls(p)

    def ratios(self, ctx, node_cfg, *, oracle_cfg=None, progress=None):  # noqa: ANN001, ANN201
        from helm_plan.oracle_labels import read_labels

        lab = read_labels(self.path)
        n_w = ctx.n_windows(node_cfg.window_s)
        if abs(lab.window_s - node_cfg.window_s) > 1e-9:
            raise ConfigError(
                f"policy schedule: {self.path} was made with window_s={lab.window_s:g}, "
                f"not {node_cfg.window_s:g}",
                hint=f"pass --window-s {lab.window_s:g}",
            )
        r = lab.r_star.astype(np.float64)
        if len(r) != n_w:
            raise ConfigError(
                f"policy schedule: {self.path} has {len(r)} windows but the trace has {n_w} "
                f"windows of {node_cfg.window_s:g} s",
                hint="label this trace with `helm-plan oracle`",
            )
        return fill_forward(r)

    @property
    def spec(self) -> str:
        return f"schedule:{self.path}"


def fill_forward(r: np.ndarray) -> np.ndarray:
    """Replace NaN ratios by the previous finite one (leading NaNs by the first finite one)."""
    r = np.asarray(r, np.float64).copy()
    ok = np.isfinite(r)
    if len(r) and not ok.any():
        raise ConfigError("schedule has no finite ratio (every window is empty)")
    if len(r) == 0:
        return r
    idx = np.where(ok, np.arange(len(r)), 0)
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(ok))
    idx[: first + 1] = np.where(ok[: first + 1], idx[: first + 1], first)
    return r[idx]
