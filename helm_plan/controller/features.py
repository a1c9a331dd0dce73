"""The controller's observation: one function for the label tables and the live windows.

:func:`observation` maps the raw measurements of a window (what a server
knows at its end; a ``dict`` keyed by :data:`RAW_KEYS`) to the normalised
vector the policy reads. Training (:mod:`helm_plan.controller.env`, from
label tables) and serving (:mod:`helm_plan.controller.policy`, from the live
:class:`~helm_plan.sim.step.WindowResult`) both call it, so the two cannot
skew in scaling, clipping or missing-value handling. The module is numpy
and the compiled loops of :mod:`helm_plan.controller._kernel`, no torch (the
runtime imports it).

**Scale-free.** One controller serves any trace, model and GPU, so no entry
is an absolute rate, length or time: load is the node's utilisation (busy
seconds per window per stream), latency is P99 over the SLO, histories are a
share of the model's ``max_seq_len``, and every ghost gain is a share of the
window's busy seconds.

**The measured curves**, on the ghost's grid of ``r`` (:data:`CURVE_POINTS`):

- :func:`saved_share`: the share of the window's busy seconds that cache hits
  at ``r`` save (EMB hit bytes at the H2D and host-gather cost per byte,
  KV-reused tokens at the prefill cost per token): mean service, the simple
  threshold rule's marginal gains;
- :func:`p99_gain`: the window's **counterfactual P99** at every ``r``, as
  ``log(P99 realised / P99 at r)`` (> 0: ``r`` would have been faster). Each
  request's service time loses what its own ghost hits at the served ratio
  saved and gains what its hits at ``r`` would save; its queue wait scales by
  the M/G/1 (Pollaczek–Khinchine) factor of the change of busy time,
  ``s²·(1 − u)/(1 − s·u)`` for busy time scaled by ``s`` at utilisation ``u``
  (capped at :data:`U_CAP`; mean wait ``λE[S²]/(2(1 − u))`` with every service
  scaled by ``s``); P99 is taken over the window's requests. What it
  approximates: the ghost holds the KV outcome fixed when EMB moves (the
  coupling), a move's refill traffic is not in it, and the queue is scaled as
  a whole, not replayed. This is what the controller reads.

:class:`CurveState` smooths a curve over windows and gives its optimum and
the features the runtime appends (:data:`CURVE_NAMES`), so the env and the
runtime compute them with one piece of code.

A controller stores :data:`FEATURE_VERSION`; loading one made for another
version is an error (:func:`check_version`), never a silent mismatch.
"""

from __future__ import annotations

import math

import numpy as np

from helm_plan.controller import _kernel
from helm_plan.errors import ConfigError

FEATURE_VERSION = "2"
"""Bump whenever RAW_KEYS, FEATURE_NAMES, the curve features or the scaling below change."""

RAW_KEYS = (
    "utilisation",
    "p99_slo",
    "slo_attainment",
    "rate_trend",
    "burst_score",
    "interarrival_cv",
    "cold_user_share",
    "hist_len_mean",
    "hist_len_p95",
    "max_seq_len",
    "emb_hit_rate",
    "kv_reuse_rate",
    "h2d_util",
    "ratio",
    "ghost_net_up_s",
    "ghost_net_down_s",
    "busy_s",
)
"""Raw measurements of one window: utilisation (busy seconds / (window · streams)), P99 over
the SLO, attainment, arrival shape (trend, burst score, inter-arrival CV, cold share),
context lengths and the model's max_seq_len (tokens), hit rates, H2D utilisation, the ratio
served, the ghost's net seconds saved by a move of ±δ, and the window's busy seconds."""

OBS_NAMES = (
    "utilisation",
    "log_p99_slo",
    "slo_miss",
    "rate_trend",
    "log_burst",
    "interarrival_cv",
    "cold_share",
    "hist_fill",
    "hist_tail",
    "emb_hit",
    "kv_reuse",
    "h2d_util",
    "ratio",
    "ghost_net_up",
    "ghost_net_down",
)
"""Entries :func:`observation` fills."""

CURVE_NAMES = ("curve_opt", "curve_dr", "curve_gain", "curve_span")
"""Entries the curve fills (:meth:`CurveState.fill`): the smoothed P99 curve's optimum ``r_g``,
``r_g − r``, the log P99 a move to ``r_g`` saves, and the curve's max − min."""

FEATURE_NAMES = OBS_NAMES + CURVE_NAMES
"""Entries of the observation vector, in order."""

N_FEATURES = len(FEATURE_NAMES)
UTIL_INDEX = FEATURE_NAMES.index("utilisation")
COLD_INDEX = FEATURE_NAMES.index("cold_share")
BURST_INDEX = FEATURE_NAMES.index("log_burst")
RATIO_INDEX = FEATURE_NAMES.index("ratio")
NET_UP_INDEX = FEATURE_NAMES.index("ghost_net_up")
NET_DOWN_INDEX = FEATURE_NAMES.index("ghost_net_down")
CURVE_INDEX = len(OBS_NAMES)
OPT_INDEX = FEATURE_NAMES.index("curve_opt")
assert (_kernel.BURST_INDEX, _kernel.COLD_INDEX, _kernel.RATIO_INDEX, _kernel.NET_UP_INDEX,
        _kernel.NET_DOWN_INDEX, _kernel.CURVE_INDEX, _kernel.OPT_INDEX) == (
    BURST_INDEX, COLD_INDEX, RATIO_INDEX, NET_UP_INDEX, NET_DOWN_INDEX, CURVE_INDEX, OPT_INDEX
), "controller._kernel's feature indices"  # fmt: skip


CURVE_POINTS = 101
"""Ratios of the measured curve: 0, 0.01, ..., 1 (the ghost's grid)."""
CURVE_ALPHA = 0.5
"""Weight of a new window in the smoothed curve (half-life of one window)."""
CURVE_TOL = 0.002
"""The curve's optimum is the current ratio unless the best point beats it by more than this
(no move for a 0.2% P99 saving)."""
NARROW_BAND = 0.1
"""Windows whose flat band is narrower than this are where |r − r*| means something (elsewhere
any r of the band is within 2% of the best P99): training shapes toward r* and validation
reports |r − r*| only there."""
U_CAP = 0.95
"""Utilisation cap of the counterfactual queue (a saturated window says little about another r)."""


def _f(raw: dict[str, float], key: str, missing: float) -> float:
    v = raw.get(key, missing)
    return float(v) if v is not None and math.isfinite(v) else missing


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def observation(raw: dict[str, float]) -> np.ndarray:
    """The normalised observation vector (:data:`FEATURE_NAMES`) of a window's raw measurements.

    Missing or NaN entries take a neutral value (an empty window: idle, P99 at the SLO, no
    hits); every entry is clipped to a few units. The curve entries are left at 0 for
    :meth:`CurveState.fill`.
    """
    busy = _f(raw, "busy_s", 0.0)
    seq = max(_f(raw, "max_seq_len", 1.0), 1.0)
    out = np.zeros(N_FEATURES, np.float64)
    out[0] = _clip(_f(raw, "utilisation", 0.0), 0.0, 2.0)
    out[1] = _clip(math.log(max(_f(raw, "p99_slo", 1.0), 1e-6)), -6.0, 2.0) / 2.0
    out[2] = _clip(1.0 - _f(raw, "slo_attainment", 1.0), 0.0, 1.0)
    out[3] = _clip(_f(raw, "rate_trend", 0.0), -1.0, 3.0)
    out[4] = _clip(math.log(max(_f(raw, "burst_score", 1.0), 1e-3)), -3.0, 3.0)
    out[5] = _clip(_f(raw, "interarrival_cv", 1.0), 0.0, 5.0) / 5.0
    out[6] = _clip(_f(raw, "cold_user_share", 0.0), 0.0, 1.0)
    out[7] = _clip(_f(raw, "hist_len_mean", 0.0) / seq, 0.0, 1.0)
    out[8] = _clip(_f(raw, "hist_len_p95", 0.0) / seq, 0.0, 1.0)
    out[9] = _clip(_f(raw, "emb_hit_rate", 0.0), 0.0, 1.0)
    out[10] = _clip(_f(raw, "kv_reuse_rate", 0.0), 0.0, 1.0)
    out[11] = _clip(_f(raw, "h2d_util", 0.0), 0.0, 3.0)
    out[12] = _clip(_f(raw, "ratio", 0.5), 0.0, 1.0)
    # a move of δ saves a few percent of the busy time at most: scale to order one
    if busy > 0.0:
        out[13] = _clip(10.0 * _f(raw, "ghost_net_up_s", 0.0) / busy, -3.0, 3.0)
        out[14] = _clip(10.0 * _f(raw, "ghost_net_down_s", 0.0) / busy, -3.0, 3.0)
    return out


def saved_share(
    emb_hit_bytes: np.ndarray,
    kv_reused_tokens: np.ndarray,
    emb_s_per_byte: float,
    kv_s_per_token: float,
    busy_s: float,
) -> np.ndarray:
    """The measured curve: the share of ``busy_s`` that hits at each EMB share would save.

    ``emb_hit_bytes`` and ``kv_reused_tokens`` are a window's ghost curves on the
    :data:`CURVE_POINTS` grid; zeros when the window was idle.
    """
    if not busy_s > 0.0:
        return np.zeros(CURVE_POINTS)
    return (np.asarray(emb_hit_bytes) * emb_s_per_byte
            + np.asarray(kv_reused_tokens) * kv_s_per_token) / busy_s  # fmt: skip


def p99_gain(
    service_s: np.ndarray,
    sojourn_s: np.ndarray,
    served_ratio: float,
    window_s: float,
    slots: int,
    saved_s: np.ndarray,
) -> np.ndarray:
    """``log(P99 realised / P99 at r)`` on the grid (the module docstring).

    ``saved_s`` is (requests, :data:`CURVE_POINTS`): the service seconds each request's
    ghost hits save at each ``r``; ``service_s`` and ``sojourn_s`` what each request took
    at ``served_ratio``."""
    k0 = int(round(min(max(served_ratio, 0.0), 1.0) * (saved_s.shape[1] - 1)))
    svc = np.maximum(service_s[:, None] + (saved_s[:, k0 : k0 + 1] - saved_s), 0.0)
    busy = float(service_s.sum())
    wait = np.maximum(sojourn_s - service_s, 0.0)
    if busy > 0.0:
        u = min(busy / (window_s * slots), U_CAP)
        sc = svc.sum(axis=0) / busy
        q = sc * sc * (1.0 - u) / (1.0 - np.minimum(sc * u, U_CAP))
        svc += wait[:, None] * q[None, :]
    else:
        svc += wait[:, None]
    p99 = np.percentile(svc, 99, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(p99[k0] / p99)
    return np.where(np.isfinite(out), out, 0.0)


class CurveState:
    """The smoothed measured curve (EWMA over windows) and the features read from it."""

    def __init__(self, alpha: float = CURVE_ALPHA, tol: float = CURVE_TOL) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ConfigError(f"curve alpha must be in (0, 1], got {alpha}", hint="pass 0.5")
        self.alpha, self.tol = alpha, tol
        self.curve = np.zeros(CURVE_POINTS)
        self.seen = False

    def reset(self) -> None:
        self.curve[:] = 0.0
        self.seen = False

    def update(self, share: np.ndarray | None, alpha: float | None = None) -> None:
        """Fold a window's curve in with weight ``alpha`` (default: the state's); None is a
        window with nothing measured."""
        if share is None:
            return
        c = self.curve
        if not self.seen:
            c[:] = share
            self.seen = True
            return
        # c <- (1 - a)·c + a·share, in place, one compiled loop (the runtime's µs budget)
        _kernel.curve_update(c, _f64(share), 1.0 - (self.alpha if alpha is None else alpha))

    def optimum(self, r: float) -> float:
        """The curve's best ratio, or ``r`` itself when ``r`` is within ``tol`` of the best (and
        when nothing is known yet): no move for a gain under ``tol``."""
        return _kernel.curve_optimum(self.curve, self.seen, self.tol, r)

    def value(self, r: float) -> float:
        """The smoothed curve at ``r`` (nearest grid point)."""
        return self.curve.item(_k(r))

    def fill(self, x: np.ndarray) -> np.ndarray:
        """Write the curve features (:data:`CURVE_NAMES`) of observation ``x`` in place: the
        optimum (as :meth:`optimum`), its distance, the log P99 it saves (x10, capped at 3) and
        the curve's span (x10, capped at 3)."""
        _kernel.curve_fill(self.curve, self.seen, self.tol, x)
        return x


def _f64(a: np.ndarray) -> np.ndarray:
    """``a`` as a contiguous float64 array (itself when it is one: no copy on the hot path)."""
    if type(a) is np.ndarray and a.dtype == np.float64 and a.flags.c_contiguous:
        return a
    return np.ascontiguousarray(a, np.float64)


def _k(r: float) -> int:
    """The grid point nearest ratio ``r`` (clipped to [0, 1])."""
    return 0 if r <= 0.0 else CURVE_POINTS - 1 if r >= 1.0 else int(r * (CURVE_POINTS - 1) + 0.5)


def check_version(version: str, source: str) -> None:
    """Raise when a controller was made for another feature version."""
    if str(version) != FEATURE_VERSION:
        raise ConfigError(
            f"{source} was trained on feature version {version}, this helm-plan computes "
            f"version {FEATURE_VERSION}",
            hint="retrain it with `helm-plan train` (or use the shipped `controller`)",
        )
