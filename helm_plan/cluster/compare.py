"""Router × policy grids over the executor, and a paired bootstrap of one router against another.

Each grid point is an independent cluster run (``fn(shared, (router,
policy))``), so the grid maps over any :class:`~helm_plan.exec.Executor` and
the answer does not depend on the worker count. A point returns the overall
figures, the per-node table, the per-window table and the measured
sojourns (for confidence intervals), not the whole result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from helm_plan.cluster.config import ClusterConfig
from helm_plan.cluster.policies import FleetStatic, node_policies
from helm_plan.cluster.sim import simulate_cluster
from helm_plan.config import require_range
from helm_plan.errors import ConfigError
from helm_plan.exec import Executor, Progress, SerialExecutor
from helm_plan.oracle import OracleConfig
from helm_plan.oracle.sensitivity import weighted_quantile
from helm_plan.policies import PolicyEnv
from helm_plan.sim.context import NodeContext


@dataclass(frozen=True, eq=False)
class GridPoint:
    """One router × policy run of a grid."""

    router: str
    policy: str
    overall: dict[str, Any]
    """ClusterResult.overall() (plus ``refill``)."""
    node_table: pl.DataFrame
    windows: pl.DataFrame
    sojourn_s: np.ndarray
    """Sojourn per measured request, seconds."""
    window_idx: np.ndarray
    """Window per measured request."""
    fleet_static: FleetStatic | None = None


def run_point(
    ctx: NodeContext,
    cfg: ClusterConfig,
    spec: str,
    oracle: OracleConfig | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> GridPoint:
    """Simulate ``cfg.router`` with policy ``spec`` on every node (``executor`` runs a
    best-static search; ``progress`` follows the search, then the windows)."""
    env = PolicyEnv(oracle=oracle or OracleConfig(), executor=executor, progress=progress)
    pol = node_policies(spec, ctx, cfg, env)
    res = simulate_cluster(ctx, pol.policy, pol.cfg, policy_name=pol.spec, progress=progress)
    m = res.window_idx >= res.measured_from_window
    overall = res.overall() | {"refill": pol.cfg.node.refill}
    if pol.fleet_static is not None:
        overall["best_static_r"] = pol.fleet_static.ratio
    return GridPoint(cfg.router, pol.spec, overall, res.node_table, res.windows,
                     res.sojourn_s[m], res.window_idx[m], pol.fleet_static)  # fmt: skip


def grid_point(
    shared: tuple[NodeContext, ClusterConfig, OracleConfig], item: tuple[str, str]
) -> GridPoint:
    """One (router, policy) point of a grid (an executor task)."""
    ctx, base, oracle = shared
    return run_point(ctx, dataclasses.replace(base, router=item[0]), item[1], oracle)


def compare(
    ctx: NodeContext,
    routers: Sequence[str],
    policies: Sequence[str],
    cfg: ClusterConfig,
    *,
    oracle: OracleConfig | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> list[GridPoint]:
    """Every router × policy, in that order (router-major), mapped over ``executor``."""
    if not routers or not policies:
        raise ConfigError(
            "compare needs at least one router and one policy",
            hint="pass --routers and --policies as comma lists",
        )
    items = [(r, p) for r in routers for p in policies]
    ex = executor or SerialExecutor()
    return ex.map(grid_point, items, shared=(ctx, cfg, oracle or OracleConfig()),
                  progress=progress, label=lambda it: f"router {it[0]}, policy {it[1]}")  # fmt: skip


@dataclass(frozen=True)
class RouterCI:
    """Router A against router B on the same requests: P99 cut and attainment gain, with CIs."""

    p99_cut: float
    """1 - P99_A / P99_B (positive: A is faster at the tail)."""
    p99_lo: float
    p99_hi: float
    attainment_gain: float
    """attainment_A - attainment_B (positive: A meets the SLO more often)."""
    att_lo: float
    att_hi: float
    level: float
    n_boot: int
    n_windows: int


def router_ci(
    a_sojourn_s: np.ndarray,
    b_sojourn_s: np.ndarray,
    window_idx: np.ndarray,
    slo_ms: float,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> RouterCI:
    """Paired bootstrap over windows (whole windows resampled, both routers alike)."""
    a, b = np.asarray(a_sojourn_s, np.float64), np.asarray(b_sojourn_s, np.float64)
    w = np.asarray(window_idx, np.int64)
    if not (len(a) == len(b) == len(w)) or len(a) == 0:
        raise ConfigError(
            f"router_ci needs equal non-empty arrays, got {len(a)}, {len(b)}, {len(w)}",
            hint="pass both routers' sojourns of the same requests and their windows",
        )
    require_range("level", level, 0.0, 1.0)
    _, wd = np.unique(w, return_inverse=True)
    n_w = int(wd.max()) + 1
    oa, ob = np.argsort(a, kind="stable"), np.argsort(b, kind="stable")
    sa, sb, wa, wb = a[oa], b[ob], wd[oa], wd[ob]
    slo = slo_ms / 1e3
    met_a = np.bincount(wd, weights=(a <= slo).astype(float), minlength=n_w)
    met_b = np.bincount(wd, weights=(b <= slo).astype(float), minlength=n_w)
    size = np.bincount(wd, minlength=n_w).astype(float)

    def stats(mult: np.ndarray) -> tuple[float, float]:
        cut = 1.0 - weighted_quantile(sa, mult[wa], 0.99) / weighted_quantile(sb, mult[wb], 0.99)
        n = float(mult @ size)
        return cut, float(mult @ met_a - mult @ met_b) / n

    cut, gain = stats(np.ones(n_w))
    rng = np.random.default_rng(seed)
    boot = np.array([stats(np.bincount(rng.integers(0, n_w, n_w), minlength=n_w).astype(float))
                     for _ in range(n_boot)])  # fmt: skip
    alpha = (1.0 - level) / 2
    (p_lo, g_lo), (p_hi, g_hi) = np.quantile(boot, [alpha, 1.0 - alpha], axis=0)
    return RouterCI(cut, float(p_lo), float(p_hi), gain, float(g_lo), float(g_hi), level,
                    n_boot, n_w)  # fmt: skip
