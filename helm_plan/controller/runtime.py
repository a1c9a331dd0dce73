"""The deployable controller, ``Controller.step(features, curve) -> ratio`` (numba, no torch).

A serving runtime embeds this module (it never imports torch). At each
window boundary it passes the observation vector of the window just served
(:func:`helm_plan.controller.features.observation`) and that window's
measured curve (:func:`helm_plan.controller.features.saved_share`, from the
node's ghost caches; None when it has none) and gets the EMB share for the
next window. Four layers, with their state:

0. **Measured curve**: the curve is smoothed over windows
   (:class:`~helm_plan.controller.features.CurveState`) and its features
   (optimum, distance, saving, span) are written into the observation.
1. **Base policy**: the PPO actor (two tanh layers) picks an action
   (argmax, deterministic): a shift of the controller's *base* ratio, or
   (a NaN shift) a jump to the curve's optimum.
2. **Residual adapter**: a bounded online correction ``c`` added to the base
   ratio, ``|c| <= adapter_cap``. Each window it moves by ``adapter_lr`` times
   the ghost signal ``tanh(net_up − net_down)`` and decays by
   ``adapter_decay``. Frozen during bursts.
3. **Burst-aware recovery**: an EWMA band on the burst score and the
   cold-user share (z-scores against the EWMA mean and deviation) with a
   one-sided CUSUM; a burst starts when the CUSUM passes ``cusum_h`` or one
   z-score passes ``z_enter``, and ends after ``calm_windows`` windows with
   both z-scores under ``z_exit``. During a burst the shift per window is
   capped at ``burst_max_shift`` and the EWMAs stop learning. After it, the
   ratio returns to the last stable ratio in ``recovery_windows`` equal
   steps. A burst that lasts ``max_burst_windows`` is a level shift.
4. **Guard** (:mod:`helm_plan.controller.guard`): serves the anchor (the
   robust static ratio) unless the measured curve backs the move, and falls
   back to it with hysteresis when the windows served away from it lose
   against their counterfactual.

``step`` times itself (``time.perf_counter_ns`` at entry and exit, around the
whole decision: observation vector and measured curve in, ratio out, all four
layers; see :meth:`Controller.step`): :meth:`Controller.decision_latency_us` is
the latency measured in this run, never the card's. The decision is one
compiled call (:mod:`helm_plan.controller._kernel`, numba; no torch) on
arrays made when the controller is built.

The controller file is a ``.npz``: the actor's weights, the shifts, the
feature version (checked: a controller for other features is an error) and
a JSON card.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from helm_plan.controller import _kernel as K
from helm_plan.controller import checks
from helm_plan.controller.features import (
    CURVE_POINTS,
    FEATURE_VERSION,
    N_FEATURES,
    CurveState,
    check_version,
)
from helm_plan.controller.guard import REGIME_WINDOWS, RISK_CAP, RISK_MARGIN, Guard
from helm_plan.errors import ConfigError, InputFileError

_NO_CURVE = np.zeros(0)
"""The curve :func:`~helm_plan.controller._kernel.step` reads when a window measured none."""

DEFAULT_PATH = Path(__file__).parent / "default" / "controller.npz"
"""The shipped controller (trained by ``scripts/train_controller.sh``)."""


@dataclass(frozen=True)
class RuntimeConfig:
    """The online layers' settings (layer 1 has none: it is the trained actor)."""

    hold_margin: float = 0.0
    """Layer 1 holds r unless its best action's logit beats holding by more than this
    (0: plain argmax; the guard, not a margin tuned on training labels, keeps it cautious)."""
    adapter: bool = True
    """Run layer 2, the residual adapter."""
    adapter_cap: float = 0.1
    """Largest |correction| the adapter adds to the base ratio."""
    adapter_lr: float = 0.02
    """Adapter step per window per unit of ghost signal."""
    adapter_decay: float = 0.1
    """Share of the correction forgotten per window."""
    burst: bool = True
    """Run layer 3, burst detection and recovery."""
    ewma_alpha: float = 0.2
    """Weight of a new window in the EWMA mean and variance of rate and cold share."""
    z_enter: float = 4.0
    """A z-score above this starts a burst at once."""
    cusum_k: float = 1.0
    """CUSUM slack, in z units (a trend that moves the rate ~10% a window stays under it)."""
    cusum_h: float = 4.0
    """CUSUM threshold that starts a burst."""
    z_exit: float = 2.0
    """Both z-scores below this count as a calm window."""
    calm_windows: int = 2
    """Calm windows that end a burst."""
    max_burst_windows: int = 8
    """A "burst" longer than this is a level shift: the band adopts it, the burst ends and the
    ratio stays where the capped moves took it (no return to a ratio of the old level)."""
    burst_max_shift: float = 0.05
    """Largest |Δr| per window during a burst."""
    recovery_windows: int = 3
    """Windows to return to the last stable ratio after a burst."""
    min_sd: float = 0.1
    """Floor of the EWMA deviations of the log burst score and the cold share (a flat history
    must not make every wiggle a burst): with z_enter 4, a 50% rate jump or a cold share up
    0.4 starts a burst at once, smaller steps through the CUSUM."""
    guard: bool = True
    """Run layer 4, the guard."""
    enter_margin: float = 0.005
    """The guard serves a move away from the anchor only when the measured curve predicts a P99
    at least this much (log-ratio) below the anchor's."""
    exit_margin: float = 0.005
    """The guard falls back to the anchor when the EWMA of the realised-vs-counterfactual P99
    log-ratio of windows served away from it passes this."""
    evidence_alpha: float = 0.5
    """Weight of a new window in that EWMA."""
    hold_windows: int = 3
    """Windows the guard holds the anchor after falling back, at least."""
    rearm_windows: int = 2
    """Windows in a row whose prediction clears enter_margin before the guard re-engages."""
    risk_margin: float = RISK_MARGIN
    """A move to a ratio that would have had a P99 more than this (log-ratio) above the
    anchor's on a window measured since the anchor was set is risky (guard.py)."""
    risk_cap: float = RISK_CAP
    """The guard never serves a ratio that would have been this much (log-ratio) slower than
    the anchor on such a window."""
    regime_windows: int = REGIME_WINDOWS
    """The guard serves a risky move only when every run of windows in which the ratio lost
    lasted at least this many windows, and it is not losing now."""

    def __post_init__(self) -> None:
        for name in ("hold_margin", "adapter_cap", "adapter_lr", "burst_max_shift", "min_sd",
                     "enter_margin", "exit_margin", "risk_margin", "risk_cap"):  # fmt: skip
            if not (getattr(self, name) >= 0.0 and math.isfinite(getattr(self, name))):
                raise ConfigError(
                    f"{name} must be finite and >= 0, got {getattr(self, name)}",
                    hint=f"pass {name} >= 0",
                )
        for name in ("adapter_decay", "ewma_alpha", "evidence_alpha"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(
                    f"{name} must be in [0, 1], got {getattr(self, name)}", hint="pass 0..1"
                )
        for name in ("calm_windows", "recovery_windows", "max_burst_windows", "hold_windows",
                     "rearm_windows", "regime_windows"):  # fmt: skip
            if int(getattr(self, name)) < 1:
                raise ConfigError(
                    f"{name} must be >= 1, got {getattr(self, name)}", hint=f"pass {name} >= 1"
                )


_CONFIG_SLOTS = {
    "hold_margin": K.HOLD_MARGIN, "adapter": K.ADAPTER, "adapter_cap": K.ADAPTER_CAP,
    "adapter_lr": K.ADAPTER_LR, "adapter_decay": K.ADAPTER_DECAY, "burst": K.BURST,
    "ewma_alpha": K.EWMA_ALPHA, "z_enter": K.Z_ENTER, "cusum_k": K.CUSUM_K,
    "cusum_h": K.CUSUM_H, "z_exit": K.Z_EXIT, "calm_windows": K.CALM_WINDOWS,
    "max_burst_windows": K.MAX_BURST_WINDOWS, "burst_max_shift": K.BURST_MAX_SHIFT,
    "recovery_windows": K.RECOVERY_WINDOWS, "min_sd": K.MIN_SD, "guard": K.GUARD,
}  # fmt: skip
"""Where each RuntimeConfig field sits in the compiled step's settings array."""


class Controller:
    """The three-layer controller and its state (see the module docstring).

    Settings, online state, the guard's state, both curves and the actor's layers live in
    one float64 array (``_mem``, :func:`controller._kernel.layout`): :meth:`step` is one
    compiled call on it. ``_cf`` (settings, rewritten when ``cfg`` is set), ``_st`` (state),
    ``curve.curve`` and ``guard._s`` are views of it; the attributes below read and write
    its slots."""

    base = K.Slot("_st", K.BASE)
    correction = K.Slot("_st", K.CORRECTION)
    ratio = K.Slot("_st", K.RATIO)
    in_burst = K.Slot("_st", K.IN_BURST, bool)
    stable_ratio = K.Slot("_st", K.STABLE_RATIO)
    _m0 = K.Slot("_st", K.M0)
    _m1 = K.Slot("_st", K.M1)
    _v0 = K.Slot("_st", K.V0)
    _v1 = K.Slot("_st", K.V1)
    _cusum = K.Slot("_st", K.CUSUM)
    _calm = K.Slot("_st", K.CALM, int)
    _burst_len = K.Slot("_st", K.BURST_LEN, int)
    _recover_left = K.Slot("_st", K.RECOVER_LEFT, int)
    bursts = K.Slot("_st", K.BURSTS, int)

    def __init__(
        self,
        weights: dict[str, np.ndarray],
        shifts: np.ndarray,
        cfg: RuntimeConfig | None = None,
        card: dict[str, Any] | None = None,
        feature_version: str = FEATURE_VERSION,
        source: str = "controller",
        anchor: float | None = None,
    ) -> None:
        check_version(feature_version, source)
        # shapes, finite values and shifts: a NaN or ragged actor is refused, never run
        Ws, bs, self.shifts = checks.controller_arrays(weights, shifts, N_FEATURES, source)
        self._W = [np.ascontiguousarray(W) for W in Ws]
        self._b = [np.ascontiguousarray(b) for b in bs]
        # settings, state, curves, shifts and layers in one float64 array made once: a decision
        # is one compiled call on it (controller._kernel.step) and allocates nothing
        self._mem = K.layout(CURVE_POINTS, np.asarray(self.shifts, np.float64), self._W, self._b)
        self._bind()
        self._hold = int(np.nanargmin(np.abs(self.shifts)))  # the zero shift (NaN: the jump)
        self._cf[K.HOLD_ACTION] = self._hold
        self.cfg = cfg or RuntimeConfig()
        self.anchor = anchor
        """The guard's anchor (None: estimated online from the measured curve)."""
        self.card = card or {}
        self.source = source
        self.reset()
        # load (or compile) the compiled step now, on a scratch copy: the first decision of a
        # process must not pay numba's cache load (~10 ms) or compilation inside its timer
        K.step(np.zeros(N_FEATURES), _NO_CURVE, self._mem.copy())

    def _bind(self) -> None:
        """The views of ``_mem`` the Python side reads and writes (the compiled step finds the
        same parts through the offsets in the settings)."""
        m = self._mem
        self._cf = m[: K.N_CONFIG]
        self._st = K.part(m, K.OFF_ST, -K.N_STATE)
        self._shifts = K.part(m, K.OFF_SHIFTS, K.N_SHIFTS)
        self._dims = K.part(m, K.OFF_DIMS, K.N_DIMS)
        self._buf = K.part(m, K.OFF_BUF, K.N_BUF)
        self._w = m[int(m[K.OFF_W]) :]
        if "curve" in self.__dict__:  # state made by reset(): point it back into _mem
            self.curve.curve = K.part(m, K.OFF_CURVE, K.N_CURVE)
            g = self.guard
            g._s, g._long, g._worst, g._run, g._shortest = self._guard_views()

    def _guard_views(self) -> tuple[np.ndarray, ...]:
        """The guard's state, mean curve, worst curve and losing runs: views of ``_mem``."""
        m = self._mem
        curves = (K.OFF_LONG, K.OFF_WORST, K.OFF_RUN, K.OFF_SHORTEST)
        return (K.part(m, K.OFF_G, -K.N_GUARD), *(K.part(m, o, K.N_CURVE) for o in curves))

    def __setstate__(self, state: dict[str, Any]) -> None:
        # a copy (copy.deepcopy: a cluster copies the policy per node) or an unpickled
        # controller: its views are copies now, so point them into its own _mem again
        self.__dict__.update(state)
        self._bind()

    @property
    def cfg(self) -> RuntimeConfig:
        """The online layers' settings (setting them takes effect at the next step)."""
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: RuntimeConfig) -> None:
        self._cfg = cfg
        for name, i in _CONFIG_SLOTS.items():
            self._cf[i] = float(getattr(cfg, name))

    # -------------------------------------------------------------- files

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        cfg: RuntimeConfig | None = None,
        anchor: float | None = None,
    ) -> Controller:
        """A controller from a ``.npz`` written by :meth:`save` (``anchor``: the guard's)."""
        p = Path(path)
        if not p.exists():
            raise InputFileError(
                f"controller file {p} not found",
                hint="train one with `helm-plan train TRACE... -o FILE`",
            )
        d = checks.read_npz(p, "controller", "pass a .npz written by `helm-plan train`")
        if "feature_version" not in d or "shifts" not in d:
            raise InputFileError(
                f"{p} is not a helm-plan controller (no feature version or shifts)",
                hint="pass a .npz written by `helm-plan train`",
            )
        weights = {k: v for k, v in d.items() if k[0] in "Wb" and k[1:].isdigit()}
        card = checks.controller_card(d, str(p))
        return cls(weights, d["shifts"], cfg, card, str(d["feature_version"]), str(p), anchor)

    def arrays(self) -> dict[str, np.ndarray]:
        """What :meth:`save` writes."""
        out: dict[str, np.ndarray] = {}
        for i, (W, b) in enumerate(zip(self._W, self._b, strict=True)):
            out[f"W{i}"], out[f"b{i}"] = W, b
        out["shifts"] = self.shifts
        out["feature_version"] = np.array(FEATURE_VERSION)
        out["card"] = np.array(json.dumps(self.card, sort_keys=True, default=str))
        return out

    # -------------------------------------------------------------- state

    def reset(self, ratio: float = float("nan")) -> None:
        """Forget all online state (a node starting cold)."""
        self.base = ratio
        self.correction = 0.0
        self.ratio = ratio
        self.in_burst = False
        self.stable_ratio = ratio
        self._m0 = self._m1 = float("nan")  # EWMA means of log burst score and cold share
        self._v0 = self._v1 = 0.0  # and their EWMA variances
        self._cusum = 0.0
        self._calm = self._burst_len = 0
        self._recover_left = 0
        self.bursts = 0
        self.curve = CurveState()
        self.curve.curve = K.part(self._mem, K.OFF_CURVE, K.N_CURVE)
        self.curve.reset()
        self._st[K.CURVE_SEEN] = 0.0
        self._cf[K.CURVE_KEEP], self._cf[K.CURVE_TOL] = 1.0 - self.curve.alpha, self.curve.tol
        self._cf[K.GUARD_RESETS] = self.anchor is None  # the first step resets the guard there
        c = self.cfg
        self.guard = Guard(self.anchor, c.enter_margin, c.exit_margin, c.evidence_alpha,
                           c.hold_windows, c.rearm_windows, c.risk_margin, c.risk_cap,
                           c.regime_windows, views=self._guard_views())  # fmt: skip
        self.latency_ns: list[int] = []
        """Duration of every step() since the last reset, ns (the runtime's own timer)."""

    def start_ratio(self, fallback: float = 0.5) -> float:
        """The ratio to serve before anything is measured: the anchor when one is given."""
        return self.anchor if self.anchor is not None and self.cfg.guard else fallback

    def with_config(
        self, cfg: RuntimeConfig | None = None, anchor: float | None = None
    ) -> Controller:
        """The same actor with other online settings and anchor (fresh state)."""
        return Controller(
            {f"W{i}": W for i, W in enumerate(self._W)} | {f"b{i}": b for i, b in enumerate(self._b)},
            self.shifts, cfg or self.cfg, self.card, FEATURE_VERSION, self.source, anchor,
        )  # fmt: skip

    def decision_latency_us(self) -> dict[str, float]:
        """Median and p99 of this run's step() durations (µs) and their count."""
        if not self.latency_ns:
            return {"median": float("nan"), "p99": float("nan"), "n": 0}
        a = np.asarray(self.latency_ns, np.float64) / 1e3
        return {"median": float(np.median(a)), "p99": float(np.percentile(a, 99)), "n": len(a)}

    # -------------------------------------------------------------- layers

    def base_shift(self, x: np.ndarray) -> float:
        """Layer 1: the actor's action for observation ``x`` (argmax of its logits) as a shift
        of the base ratio (the curve action: the shift to the curve's optimum)."""
        k, margin = K.forward(self._w, self._dims, x, self._buf, self._hold)
        return K.shift_of(self._st, self._cf, x, self._shifts, k, margin)

    def _detect(self, x: np.ndarray) -> bool:
        """Layer 3's detector: update the EWMA band and CUSUM, return whether a burst is on."""
        return bool(K.detect(self._st, self._cf, x))

    def step(self, features: np.ndarray, curve: np.ndarray | None = None) -> float:
        """The EMB share for the next window, from the observation of the window just served
        and its measured curve (None: not measured). Writes the curve features into
        ``features`` (a float64 vector of :data:`N_FEATURES`).

        Timed (the runtime's own timer, ``latency_ns``): from entry to the ratio, i.e. the
        whole decision: the curve smoothed and its features written into the observation
        (layer 0), the actor's forward pass and argmax (layer 1), the adapter (2), the burst
        detector and recovery (3), the guard with its online anchor (4), and the call into
        the compiled step (:func:`~helm_plan.controller._kernel.step`). Not inside: building
        the observation vector and the measured curve from the window
        (:class:`~helm_plan.controller.measure.NodeMeter`), which is measuring, not deciding,
        and loading the compiled code, done once when the controller is built.
        """
        t0 = time.perf_counter_ns()
        if curve is None:
            curve = _NO_CURVE
        else:
            self.curve.seen = True  # as the step marks it in _mem
        out = K.step(features, curve, self._mem)
        self.latency_ns.append(time.perf_counter_ns() - t0)
        return out


def save(ctrl: Controller, path: str | os.PathLike[str]) -> Path:
    """Write ``ctrl`` as an uncompressed ``.npz`` (atomically)."""
    from io import BytesIO

    from helm_plan import io

    buf = BytesIO()
    np.savez(buf, **ctrl.arrays())
    return io.write_bytes(path, buf.getvalue())


def config_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(RuntimeConfig))


def config_dict(cfg: RuntimeConfig) -> dict[str, Any]:
    return asdict(cfg)
