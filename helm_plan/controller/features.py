"""The controller's observation: one function for the label tables and the live windows.

:func:`observation` maps the raw measurements of a window (what a server
knows at its end; a ``dict`` keyed by :data:`RAW_KEYS`) to the normalised
vector the policy reads. Training (:mod:`helm_plan.controller.env`, from
label tables) and serving (:mod:`helm_plan.controller.policy`, from the live
:class:`~helm_plan.sim.step.WindowResult`) both call it, so the two cannot
skew in scaling, clipping or missing-value handling. What differs is only
where the raw numbers come from: a label table holds the hit rates and P99
on a coarse grid of ``r`` (interpolated at the controller's ``r``) and the
ghost curves of the oracle schedule's own lookups; a live node measures
them. The module is numpy only (the runtime imports it).

A controller stores :data:`FEATURE_VERSION`; loading one made for another
version is an error (:func:`check_version`), never a silent mismatch.
"""

from __future__ import annotations

import math

import numpy as np

from helm_plan.errors import ConfigError

FEATURE_VERSION = "1"
"""Bump whenever RAW_KEYS, FEATURE_NAMES or the scaling below change."""

RAW_KEYS = (
    "arrival_rate_rps",
    "rate_trend",
    "burst_score",
    "interarrival_cv",
    "cold_user_share",
    "hist_len_mean",
    "hist_len_p95",
    "emb_hit_rate",
    "kv_reuse_rate",
    "h2d_util",
    "p99_slo",
    "ratio",
    "ghost_emb_gain_up",
    "ghost_emb_loss_down",
    "ghost_kv_gain_down",
    "ghost_kv_loss_up",
    "ghost_net_up_s",
    "ghost_net_down_s",
    "window_s",
)
"""Raw measurements of one window (rates in requests/s, lengths in tokens, times in s)."""

FEATURE_NAMES = (
    "log_rate",
    "rate_trend",
    "log_burst",
    "interarrival_cv",
    "cold_share",
    "log_hist_mean",
    "log_hist_p95",
    "emb_hit",
    "kv_reuse",
    "h2d_util",
    "log_p99_slo",
    "ratio",
    "ghost_emb_up",
    "ghost_emb_down",
    "ghost_kv_down",
    "ghost_kv_up",
    "ghost_net_up",
    "ghost_net_down",
)
"""Entries of the observation vector, in order."""

N_FEATURES = len(FEATURE_NAMES)
RATE_INDEX = FEATURE_NAMES.index("log_rate")
COLD_INDEX = FEATURE_NAMES.index("cold_share")
RATIO_INDEX = FEATURE_NAMES.index("ratio")
NET_UP_INDEX = FEATURE_NAMES.index("ghost_net_up")
NET_DOWN_INDEX = FEATURE_NAMES.index("ghost_net_down")


def _f(raw: dict[str, float], key: str, missing: float) -> float:
    v = raw.get(key, missing)
    return float(v) if v is not None and math.isfinite(v) else missing


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def observation(raw: dict[str, float]) -> np.ndarray:
    """The normalised observation vector (:data:`FEATURE_NAMES`) of a window's raw measurements.

    Missing or NaN entries take a neutral value (an empty window: no rate,
    no hits, P99 at the SLO); every entry is clipped to a few units.
    """
    win = _f(raw, "window_s", 10.0)
    p99 = _f(raw, "p99_slo", 1.0)
    out = np.empty(N_FEATURES, np.float64)
    out[0] = math.log1p(max(_f(raw, "arrival_rate_rps", 0.0), 0.0)) / 8.0
    out[1] = _clip(_f(raw, "rate_trend", 0.0), -1.0, 3.0)
    out[2] = _clip(math.log(max(_f(raw, "burst_score", 1.0), 1e-3)), -3.0, 3.0)
    out[3] = _clip(_f(raw, "interarrival_cv", 1.0), 0.0, 5.0) / 5.0
    out[4] = _clip(_f(raw, "cold_user_share", 0.0), 0.0, 1.0)
    out[5] = math.log1p(max(_f(raw, "hist_len_mean", 0.0), 0.0)) / 10.0
    out[6] = math.log1p(max(_f(raw, "hist_len_p95", 0.0), 0.0)) / 10.0
    out[7] = _clip(_f(raw, "emb_hit_rate", 0.0), 0.0, 1.0)
    out[8] = _clip(_f(raw, "kv_reuse_rate", 0.0), 0.0, 1.0)
    out[9] = _clip(_f(raw, "h2d_util", 0.0), 0.0, 3.0)
    out[10] = _clip(math.log(max(p99, 1e-6)), -10.0, 4.0) / 4.0  # P99 sits far below the SLO
    out[11] = _clip(_f(raw, "ratio", 0.5), 0.0, 1.0)
    # ghost gains are a few hit-rate points: scale them to order one
    out[12] = _clip(10.0 * _f(raw, "ghost_emb_gain_up", 0.0), -3.0, 3.0)
    out[13] = _clip(10.0 * _f(raw, "ghost_emb_loss_down", 0.0), -3.0, 3.0)
    out[14] = _clip(10.0 * _f(raw, "ghost_kv_gain_down", 0.0), -3.0, 3.0)
    out[15] = _clip(10.0 * _f(raw, "ghost_kv_loss_up", 0.0), -3.0, 3.0)
    # net seconds saved per window, as a share of the window (a utilisation)
    out[16] = _clip(10.0 * _f(raw, "ghost_net_up_s", 0.0) / win, -3.0, 3.0)
    out[17] = _clip(10.0 * _f(raw, "ghost_net_down_s", 0.0) / win, -3.0, 3.0)
    return out


def check_version(version: str, source: str) -> None:
    """Raise when a controller was made for another feature version."""
    if str(version) != FEATURE_VERSION:
        raise ConfigError(
            f"{source} was trained on feature version {version}, this helm-plan computes "
            f"version {FEATURE_VERSION}",
            hint="retrain it with `helm-plan train` (or use the shipped `controller`)",
        )
