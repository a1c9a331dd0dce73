"""Gymnasium environments of the controller: fast on label tables, closed loop on the node.

Both observe :func:`helm_plan.controller.features.observation` of the window
just served, with the measured-curve features a
:class:`~helm_plan.controller.features.CurveState` writes (as the runtime
does), and act with one of :data:`SHIFTS`: a shift of ``r``, or (NaN) a jump
to the measured curve's optimum.

- :class:`LabelEnv` (training) scores a ratio from a :class:`LabelTrace`
  without replaying: P99 and SLO attainment interpolated on the window's grid
  (coarse grid plus the oracle's own ``r*``). An episode is one trace from
  window 1 (window 0 has cold caches) at a random start ratio.
- :class:`NodeEnv` (validation, optional fine-tuning) steps a real
  :class:`~helm_plan.sim.step.NodeRunner` (carried caches, throttled refill)
  and measures the ghost gains live.

**Reward: what the planner sees.** ``−P99/SLO − attainment_weight·(1 − attainment)``
``− violation·[P99 > SLO] − shift_cost·|Δr|``, plus shaping in ``LabelEnv``:
``− band_weight·distance(r, flat band)`` (0 inside the band, where any ``r``
is within 2% of the best P99) and ``− rstar_weight·|r − r*|`` on windows
whose flat band is narrower than :data:`NARROW_BAND` (where ``r*`` means
something). Where P99 sits far below the SLO the split hardly matters to the
planner, and the reward says so: it varies little there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from helm_plan.cache.ghost import GhostCurves, gains
from helm_plan.controller.dataset import ARRIVAL_KEYS, LabelTrace
from helm_plan.controller.features import N_FEATURES, NARROW_BAND, CurveState, observation
from helm_plan.controller.measure import GHOST_DELTA, NodeMeter
from helm_plan.errors import ConfigError
from helm_plan.sim import metrics
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.step import NodeRunner, WindowResult

SHIFTS = (-0.5, -0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2, 0.5, math.nan)
"""The discrete actions: shifts of r per window; NaN jumps to the measured curve's optimum."""
HOLD = SHIFTS.index(0.0)
CURVE_ACTION = len(SHIFTS) - 1


@dataclass(frozen=True)
class RewardConfig:
    """How a window is scored."""

    attainment_weight: float = 1.0
    """Charged per unit of SLO miss share (1 − attainment)."""
    violation_penalty: float = 1.0
    """Charged when the window's P99 exceeds the SLO."""
    shift_cost: float = 0.02
    """Charged per unit of |Δr| (the refill traffic a move causes)."""
    band_weight: float = 0.2
    """Charged per unit of distance from r to the window's flat band (LabelEnv only)."""
    rstar_weight: float = 0.2
    """Charged per unit of |r − r*| on narrow-band windows (LabelEnv only)."""


def _ratio_of(r: float) -> float:
    return min(max(r, 0.0), 1.0)


def _target(r: float, action: int, curve: CurveState) -> float:
    """The ratio an action moves ``r`` to (the curve action: the curve's optimum)."""
    d = SHIFTS[int(action)]
    return _ratio_of(curve.optimum(r) if d != d else r + d)


def label_curves(tr: LabelTrace, w: int) -> GhostCurves:
    """Window ``w``'s ghost curves, as the schedule's replay measured them."""
    return GhostCurves(
        np.linspace(0.0, 1.0, tr.ghost_emb.shape[1]), tr.ghost_emb[w],
        float(tr.ghost_lookup_bytes[w]), tr.ghost_kv[w], float(tr.ghost_ctx_tokens[w]),
    )  # fmt: skip


def raw_from_labels(
    tr: LabelTrace, w: int, r: float, delta: float = GHOST_DELTA
) -> tuple[dict[str, float], np.ndarray | None]:
    """The raw measurements of window ``w`` served at ``r``, read from a label trace, and its
    counterfactual P99 curve relative to ``r`` (None for an empty window).

    Busy seconds at ``r`` are the replay's at its own ratio plus what the ghost curves say
    the caches save there and not at ``r``."""
    raw = {k: float(tr.arrival[w, i]) for i, k in enumerate(ARRIVAL_KEYS)}
    gr = tr.grid_r[w]
    emb = float(np.interp(r, gr, tr.grid_emb_hit[w]))
    p99 = float(np.interp(r, gr, tr.grid_p99_ms[w]))
    rs = tr.r_star[w]
    es = float(np.interp(rs, gr, tr.grid_emb_hit[w])) if np.isfinite(rs) else float("nan")
    # H2D traffic scales with the miss rate around r* (the table holds it at r* only)
    h2d = tr.h2d_util_star[w] * (1.0 - emb) / (1.0 - es) if es < 1.0 else tr.h2d_util_star[w]
    curves = label_curves(tr, w)
    saved = curves.emb_hit_bytes * tr.emb_s_per_byte + curves.kv_reused_tokens * tr.kv_s_per_token
    k_s, k_r = (round(min(max(x, 0.0), 1.0) * (len(saved) - 1)) for x in (tr.sched_r[w], r))
    busy = max(float(tr.busy_s[w] + saved[k_s] - saved[k_r]), 0.0)
    g = gains(curves, r, delta, tr.emb_s_per_byte, tr.kv_s_per_token)
    raw.update(g.as_dict())
    raw.update(
        utilisation=busy / (tr.window_s * tr.slots),
        busy_s=busy,
        emb_hit_rate=emb,
        kv_reuse_rate=float(np.interp(r, gr, tr.grid_kv_reuse[w])),
        h2d_util=float(h2d),
        p99_slo=p99 / tr.slo_ms,
        slo_attainment=float(np.interp(r, gr, tr.grid_slo_att[w])),
        ratio=r,
        max_seq_len=float(tr.max_seq_len),
    )
    if not (curves.lookup_bytes + curves.ctx_tokens > 0):
        return raw, None
    # log-ratios add: the curve relative to r is the replay's curve less its value at r
    return raw, tr.gain[w] - tr.gain[w][k_r]


def window_reward(cfg: RewardConfig, p99_ms: float, att: float, slo_ms: float, dr: float) -> float:
    """The planner's view of one window (module docstring), shaping aside."""
    out = -cfg.shift_cost * abs(dr)
    if not np.isfinite(p99_ms):  # an empty window: only the move is charged
        return out
    out -= p99_ms / slo_ms + cfg.violation_penalty * float(p99_ms > slo_ms)
    return out - cfg.attainment_weight * (1.0 - att if np.isfinite(att) else 0.0)


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
        self.curve = CurveState()

    def _obs(self, w: int, r: float) -> np.ndarray:
        raw, share = raw_from_labels(self._tr, w, r)
        self.curve.update(share)
        return self.curve.fill(observation(raw))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        opts = options or {}
        self._tr = self.traces[int(opts.get("trace", self.np_random.integers(len(self.traces))))]
        self._w = 1
        r0 = opts.get("ratio", self.start_ratio)
        self._r = float(r0) if r0 is not None else float(np.round(self.np_random.uniform(), 2))
        self.curve.reset()
        return self._obs(0, self._r), {"trace": self._tr.name}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        tr, w = self._tr, self._w
        r_new = _target(self._r, action, self.curve)
        cfg = self.reward_cfg
        p99 = float(np.interp(r_new, tr.grid_r[w], tr.grid_p99_ms[w]))
        att = float(np.interp(r_new, tr.grid_r[w], tr.grid_slo_att[w]))
        reward = window_reward(cfg, p99, att, tr.slo_ms, r_new - self._r)
        if np.isfinite(p99) and np.isfinite(tr.r_star[w]):
            lo, hi = tr.flat_lo[w], tr.flat_hi[w]
            reward -= cfg.band_weight * max(lo - r_new, r_new - hi, 0.0)
            if hi - lo < NARROW_BAND:
                reward -= cfg.rstar_weight * abs(r_new - tr.r_star[w])
        info = {"window": w, "ratio": r_new, "r_star": float(tr.r_star[w]), "p99_ms": p99}
        self._r, self._w = r_new, w + 1
        done = self._w >= tr.n_windows
        obs = self._obs(w, r_new)
        return obs, float(reward), done, False, info


class NodeEnv(gym.Env):
    """Closed loop over one node: each step serves a window at the chosen ratio."""

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
        self.meter = NodeMeter(ctx, self.cfg)
        self.curve = CurveState()
        self.feats = metrics.window_features(
            ctx.arrays.ts_s, self.runner.edges, self.cfg.window_s, ctx.first_visit, ctx.ctx_len
        )
        self.action_space = gym.spaces.Discrete(len(SHIFTS))
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (N_FEATURES,), np.float64)

    def _serve(self, r: float) -> tuple[np.ndarray, WindowResult]:
        res = self.runner.step(r)
        arr = {k: float(v[res.window]) for k, v in self.feats.items()}
        m = self.meter.measure(res, arr)
        self.curve.update(m.share)
        return self.curve.fill(m.x), res

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.runner.reset()
        self.meter.reset()
        self.curve.reset()
        r0 = float((options or {}).get("ratio", self.start_ratio))
        obs, res = self._serve(r0)  # window 0: cold caches, not the controller's to score
        return obs, {"window": 0, "ratio": r0, "p99_ms": res.p99_ms}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        r_old = self.runner.ratio
        r_new = _target(r_old, action, self.curve)
        obs, res = self._serve(r_new)
        reward = window_reward(self.reward_cfg, res.p99_ms, res.slo_attainment,
                               self.cfg.slo_ms, r_new - r_old)  # fmt: skip
        info = {"window": res.window, "ratio": r_new, "p99_ms": res.p99_ms}
        return obs, float(reward), self.runner.done, False, info
