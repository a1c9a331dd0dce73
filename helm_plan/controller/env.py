"""Gymnasium environments of the controller: fast on label tables, closed loop on the node.

Both observe :func:`helm_plan.controller.features.observation` of the window
just served and act with a discrete shift of ``r`` (:data:`SHIFTS`).

- :class:`LabelEnv` (training) scores a ratio from a :class:`LabelTrace`
  without replaying: P99 interpolated on the window's grid (coarse grid plus
  the oracle's own ``r*``). An episode is one trace from window 1 (window 0
  has cold caches) at a random start ratio.
- :class:`NodeEnv` (validation, optional fine-tuning) steps a real
  :class:`~helm_plan.sim.step.NodeRunner` (carried caches, throttled refill)
  and measures the ghost gains live.

**Reward.** ``−P99/P99_ref − violation·[P99 > SLO] − shift_cost·|Δr|``
``− band_weight·distance(r, flat band)``. The issue's ``−P99/SLO`` is scaled
by ``P99_ref`` instead of the SLO: with the shipped profiles a window's P99
is far below a 100 ms SLO, so ``P99/SLO`` hardly varies with ``r`` and
teaches nothing; ``P99_ref`` is the window's oracle P99 in ``LabelEnv`` (the
reward is minus one minus the regret) and the SLO in ``NodeEnv`` (where no
oracle is known). The band term (0 inside the flat band) is reward shaping
toward ``r*`` where the band says ``r`` matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from helm_plan.cache.ghost import Ghost, GhostCurves, gains
from helm_plan.controller.dataset import ARRIVAL_KEYS, LabelTrace, cost_coefficients
from helm_plan.controller.features import N_FEATURES, observation
from helm_plan.errors import ConfigError
from helm_plan.sim import metrics
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.step import NodeRunner, WindowResult

SHIFTS = (-0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2)
"""The discrete actions: shifts of r per window."""
HOLD = SHIFTS.index(0.0)
GHOST_DELTA = 0.05
"""δ of the ghost marginal gains (share of the pool)."""


@dataclass(frozen=True)
class RewardConfig:
    """How a window is scored."""

    violation_penalty: float = 1.0
    """Charged when the window's P99 exceeds the SLO."""
    shift_cost: float = 0.05
    """Charged per unit of |Δr| (the refill traffic a move causes)."""
    band_weight: float = 1.0
    """Charged per unit of distance from r to the window's flat band (LabelEnv only)."""
    rstar_weight: float = 1.0
    """Charged per unit of |r − r*| (LabelEnv only): shaping toward the oracle's own choice."""


def _ratio_of(r: float) -> float:
    return min(max(r, 0.0), 1.0)


def raw_from_window(
    res: WindowResult,
    arrival: dict[str, float],
    ghost: dict[str, float],
    slo_ms: float,
    h2d_bw_Bps: float,
) -> dict[str, float]:
    """The raw measurements of a served window (the live side of the feature function)."""
    raw = dict(arrival)
    raw.update(ghost)
    raw.update(
        emb_hit_rate=res.emb_hit_rate,
        kv_reuse_rate=res.kv_reuse_rate,
        h2d_util=res.miss_bytes / (h2d_bw_Bps * (res.end_s - res.start_s)),
        p99_slo=res.p99_ms / slo_ms,
        ratio=res.ratio,
        window_s=res.end_s - res.start_s,
    )
    return raw


def raw_from_labels(
    tr: LabelTrace, w: int, r: float, delta: float = GHOST_DELTA
) -> dict[str, float]:
    """The raw measurements of window ``w`` served at ``r``, read from a label trace."""
    raw = {k: float(tr.arrival[w, i]) for i, k in enumerate(ARRIVAL_KEYS)}
    gr = tr.grid_r[w]
    emb = float(np.interp(r, gr, tr.grid_emb_hit[w]))
    p99 = float(np.interp(r, gr, tr.grid_p99_ms[w]))
    rs = tr.r_star[w]
    es = float(np.interp(rs, gr, tr.grid_emb_hit[w])) if np.isfinite(rs) else float("nan")
    # H2D traffic scales with the miss rate around r* (the table holds it at r* only)
    h2d = tr.h2d_util_star[w] * (1.0 - emb) / (1.0 - es) if es < 1.0 else tr.h2d_util_star[w]
    curves = GhostCurves(
        np.linspace(0.0, 1.0, tr.ghost_emb.shape[1]), tr.ghost_emb[w],
        float(tr.ghost_lookup_bytes[w]), tr.ghost_kv[w], float(tr.ghost_ctx_tokens[w]),
    )  # fmt: skip
    raw.update(gains(curves, r, delta, tr.emb_s_per_byte, tr.kv_s_per_token).as_dict())
    raw.update(
        emb_hit_rate=emb,
        kv_reuse_rate=float(np.interp(r, gr, tr.grid_kv_reuse[w])),
        h2d_util=float(h2d),
        p99_slo=p99 / tr.slo_ms,
        ratio=r,
        window_s=tr.window_s,
    )
    return raw


class LabelEnv(gym.Env):
    """Training environment over label traces (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        traces: list[LabelTrace],
        reward: RewardConfig | None = None,
        start_ratio: float | None = None,
    ) -> None:
        if not traces:
            raise ConfigError("LabelEnv needs at least one label trace", hint="pass label traces")
        short = [t.name for t in traces if t.n_windows < 2]
        if short:
            raise ConfigError(
                f"label trace {short[0]} has fewer than 2 windows",
                hint="use traces at least two windows long",
            )
        self.traces = traces
        self.reward_cfg = reward or RewardConfig()
        self.start_ratio = start_ratio
        self.action_space = gym.spaces.Discrete(len(SHIFTS))
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (N_FEATURES,), np.float64)
        self._tr, self._w, self._r = traces[0], 1, 0.5

    def _obs(self) -> np.ndarray:
        return observation(raw_from_labels(self._tr, self._w - 1, self._r))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        opts = options or {}
        self._tr = self.traces[int(opts.get("trace", self.np_random.integers(len(self.traces))))]
        self._w = 1
        r0 = opts.get("ratio", self.start_ratio)
        self._r = float(r0) if r0 is not None else float(np.round(self.np_random.uniform(), 2))
        return self._obs(), {"trace": self._tr.name}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        tr, w = self._tr, self._w
        r_new = _ratio_of(self._r + SHIFTS[int(action)])
        cfg = self.reward_cfg
        p99 = float(np.interp(r_new, tr.grid_r[w], tr.grid_p99_ms[w]))
        ref = tr.p99_star_ms[w]
        reward = -cfg.shift_cost * abs(r_new - self._r)
        if np.isfinite(p99) and np.isfinite(ref) and ref > 0:
            reward -= p99 / ref
            reward -= cfg.violation_penalty * float(p99 > tr.slo_ms)
            lo, hi = tr.flat_lo[w], tr.flat_hi[w]
            reward -= cfg.band_weight * max(lo - r_new, r_new - hi, 0.0)
            reward -= cfg.rstar_weight * abs(r_new - tr.r_star[w])
        else:  # an empty window: only the move is charged
            reward -= 1.0
        info = {"window": w, "ratio": r_new, "r_star": float(tr.r_star[w]), "p99_ms": p99}
        self._r, self._w = r_new, w + 1
        done = self._w >= tr.n_windows
        obs = self._obs() if not done else observation(raw_from_labels(tr, w, r_new))
        return obs, float(reward), done, False, info


class NodeEnv(gym.Env):
    """Closed loop over one node: each step serves a window at the shifted ratio."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        ctx: NodeContext,
        cfg: NodeConfig | None = None,
        reward: RewardConfig | None = None,
        start_ratio: float = 0.5,
    ) -> None:
        self.ctx = ctx
        self.cfg = (cfg or NodeConfig()).for_context(ctx)
        self.reward_cfg = reward or RewardConfig()
        self.start_ratio = start_ratio
        self.runner = NodeRunner(ctx, self.cfg)
        if self.runner.n_windows < 2:
            raise ConfigError(
                f"NodeEnv needs at least 2 windows, the trace has {self.runner.n_windows}",
                hint="use a longer trace or a shorter --window-s",
            )
        self.ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token)
        self.feats = metrics.window_features(
            ctx.arrays.ts_s, self.runner.edges, self.cfg.window_s, ctx.first_visit, ctx.ctx_len
        )
        self.costs = cost_coefficients(ctx)
        self.action_space = gym.spaces.Discrete(len(SHIFTS))
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (N_FEATURES,), np.float64)

    def _serve(self, r: float) -> tuple[np.ndarray, WindowResult]:
        res = self.runner.step(r)
        w = res.window
        g: dict[str, float] = {}
        if res.requests:
            c = self.ghost.observe(res.first, res.first + res.requests, res.n_computed)
            g = gains(c, r, GHOST_DELTA, *self.costs).as_dict()
        arr = {k: float(v[w]) for k, v in self.feats.items()}
        raw = raw_from_window(res, arr, g, self.cfg.slo_ms, self.ctx.latency.h2d_bw_Bps)
        return observation(raw), res

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.runner.reset()
        self.ghost.reset()
        r0 = float((options or {}).get("ratio", self.start_ratio))
        obs, res = self._serve(r0)  # window 0: cold caches, not the controller's to score
        return obs, {"window": 0, "ratio": r0, "p99_ms": res.p99_ms}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        r_old = self.runner.ratio
        r_new = _ratio_of(r_old + SHIFTS[int(action)])
        obs, res = self._serve(r_new)
        cfg = self.reward_cfg
        reward = -cfg.shift_cost * abs(r_new - r_old)
        if np.isfinite(res.p99_ms):
            reward -= res.p99_ms / self.cfg.slo_ms
            reward -= cfg.violation_penalty * float(res.p99_ms > self.cfg.slo_ms)
        info = {"window": res.window, "ratio": r_new, "p99_ms": res.p99_ms}
        return obs, float(reward), self.runner.done, False, info
