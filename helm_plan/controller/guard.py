"""The controller's last layer: do no harm against the robust static ratio (numpy and numba).

The guard holds an **anchor**: the static ratio a planner would deploy instead
of the controller (the best static ratio of the planner's own search, handed
over by the caller), or, when none is given, the best ratio of the node's own
measured curve averaged over every window so far (an online estimate of the
best static split). It reads the window's **counterfactual P99 curve**
(:func:`helm_plan.controller.measure.p99_gain`: ``log(P99 realised / P99 at
r)`` for every ``r`` of the grid, from the node's ghost caches) and keeps the
controller from paying for moves the measurements do not back, in three ways:

- **Before a move** (prediction): a proposal away from the anchor is served
  only when the smoothed curve predicts that it beats the anchor's P99 by
  ``enter_margin`` (log-ratio) and it is not risky (below); otherwise the
  anchor is served, unless the curve backs the move and only its far part is
  risky: then its safe part is served, the grid ratio nearest the proposal, on
  the way to the anchor, that passes both tests (the anchor when none does).
  Only there: scanning every ratio of a move the curve does not back for one it
  does would pick the curve's noise (the demo lost 0.5 % more). (Serving the
  anchor outright threw the safe part away: on the contested case with 5-s
  phases, seed 2, a controller walking down towards regime A's r* = 0.02 was sent
  back to the anchor 0.15 each time its next step reached a risky ratio, and
  started the walk again: 20.5 % better than best static; with the safe part,
  31.4 %.)
- **After a move** (evidence): each window served away from the anchor is
  scored against its counterfactual, the realised P99 against the P99 the
  anchor would have had on that same window (the window's curve at the
  anchor). The log-ratio's EWMA is the evidence; above ``exit_margin`` the
  guard falls back to the anchor and holds it at least ``hold_windows``
  windows, and re-engages only after ``rearm_windows`` windows in a row whose
  prediction clears ``enter_margin`` again (hysteresis: no flapping).
- **Across regimes** (risk): the guard keeps, for every ratio of the grid, the worst
  ``log(P99 at the anchor / P99 at r)`` over the windows measured since the anchor was
  set. A ratio that would have been more than ``risk_margin`` slower than the anchor on one
  of them is *risky*: it wins in the regime of the moment but loses in one seen before, and
  the next regime change finds the node there. It is never served when that loss passed
  ``risk_cap`` (the node would meet the next regime with almost no cache of one kind: on the
  detectability scenario with 5-s phases the controller served ``r = 0`` in a KV-bound
  phase, the EMB-bound phase that followed ran with no EMB cache, and the trace's P99 was 7.7x
  best static's: benchmarks/bench_controller.py, ``--contested-phase-s 5``, seed 2). Under the
  cap it is served only while it is not losing now and every run of windows in which it lost
  lasted ``regime_windows`` or more: then regimes last longer than the guard's own cycle
  (a window to notice the loss, ``hold_windows`` to hold, ``rearm_windows`` to re-arm), and
  the window lost at the next change is repaid by the windows won until it. On the tuning
  seeds of ``benchmarks/bench_guard_risk.py``, such a move with regimes of 4 windows lost 12
  to 25 % of P99 (a plain margin of 0.5 let it through); with regimes of 10 or 40 windows the
  rule gains 11 to 42 % over best static.

The prediction and the evidence read the same ghost caches; what neither
sees (the refill traffic of a move, the EMB traffic a KV miss adds) is why
the margins are not zero.
"""

from __future__ import annotations

import math

import numpy as np

from helm_plan.controller import _kernel as K
from helm_plan.controller.features import CURVE_POINTS, CURVE_TOL, CurveState

_NO_GAIN = np.zeros(0)
RISK_MARGIN = 0.1
"""Default ``risk_margin``: a move that would have cost more than ~10% of P99 (log-ratio 0.1)
against the anchor on a window measured since the anchor was set is a risky one."""
RISK_CAP = 1.0
"""Default ``risk_cap``: a move that would have cost more than e^1 = 2.7x the anchor's P99 on such
a window is never served (the 7.7x case lost ~e^2 and more in its windows)."""
REGIME_WINDOWS = 6
"""Default ``regime_windows``: a risky move is served only once every run of windows in which it
lost lasted this long: the guard's own cycle (a window to notice, ``hold_windows`` 3 to hold,
``rearm_windows`` 2 to re-arm), so a regime that ends sooner cannot repay the move."""


class Guard:
    """The guard's state for one node (see the module docstring).

    The state lives in one float64 array (``_s``, slots ``controller._kernel.G_*``), the
    online anchor's mean curve in another (``_long``) and the worst curve in a third
    (``_worst``): the step is compiled (:func:`~helm_plan.controller._kernel.guard_step`), and
    the controller's own compiled step runs the same function on the same arrays."""

    anchor = K.Slot("_s", K.G_ANCHOR)
    evidence = K.Slot("_s", K.G_EVIDENCE)
    fallback = K.Slot("_s", K.G_FALLBACK, bool)
    _hold = K.Slot("_s", K.G_HOLD, int)
    _rearm = K.Slot("_s", K.G_REARM, int)
    _seen = K.Slot("_s", K.G_SEEN, int)
    decisions = K.Slot("_s", K.G_DECISIONS, int)
    overrides = K.Slot("_s", K.G_OVERRIDES, int)
    fallback_windows = K.Slot("_s", K.G_FALLBACK_WINDOWS, int)
    enter_margin = K.Slot("_s", K.G_ENTER)
    exit_margin = K.Slot("_s", K.G_EXIT)
    evidence_alpha = K.Slot("_s", K.G_ALPHA)
    hold_windows = K.Slot("_s", K.G_HOLD_WINDOWS, int)
    rearm_windows = K.Slot("_s", K.G_REARM_WINDOWS, int)
    risk_margin = K.Slot("_s", K.G_RISK)
    risk_cap = K.Slot("_s", K.G_RISK_CAP)
    regime_windows = K.Slot("_s", K.G_REGIME, int)

    def __init__(
        self,
        anchor: float | None = None,
        enter_margin: float = 0.005,
        exit_margin: float = 0.005,
        evidence_alpha: float = 0.5,
        hold_windows: int = 3,
        rearm_windows: int = 2,
        risk_margin: float = RISK_MARGIN,
        risk_cap: float = RISK_CAP,
        regime_windows: int = REGIME_WINDOWS,
        views: tuple[np.ndarray, ...] | None = None,
    ) -> None:
        # views: where the state, the mean and worst curves and the losing runs live (parts of
        # the controller's array: its compiled step reads them there); else the guard's own
        if views is None:
            views = (np.zeros(K.N_GUARD), *(np.zeros(CURVE_POINTS) for _ in range(4)))
        self._s, self._long, self._worst, self._run, self._shortest = views
        """State; the mean curve over every window so far (the online anchor's); the worst
        log P99 ratio against the anchor per ratio (the risk); per ratio, its current run of
        windows losing more than ``risk_margin``, and its shortest ended one."""
        fixed = anchor if anchor is not None and math.isfinite(anchor) else None
        self._s[K.G_FIXED] = float("nan") if fixed is None else fixed
        self.enter_margin, self.exit_margin = enter_margin, exit_margin
        self.evidence_alpha = evidence_alpha
        self.hold_windows, self.rearm_windows = hold_windows, rearm_windows
        self.risk_margin, self.risk_cap, self.regime_windows = risk_margin, risk_cap, regime_windows
        self._s[K.G_TOL] = CURVE_TOL
        self.reset()

    @property
    def fixed(self) -> float | None:
        """The anchor given (None: estimated online)."""
        v = float(self._s[K.G_FIXED])
        return None if v != v else v

    def reset(self, start: float = 0.5) -> None:
        """A cold node: no evidence, the online anchor back at ``start``."""
        K.guard_reset(self._s, self._long, float(start))

    def step(
        self,
        proposal: float,
        served: float,
        gain: np.ndarray | None,
        curve: CurveState,
    ) -> float:
        """The ratio to serve next: ``proposal`` or the anchor.

        ``served`` is the ratio of the window just served, ``gain`` its counterfactual P99
        curve (None: nothing measured), ``curve`` the smoothed curve (the prediction). The
        online anchor (no anchor given) is first moved to the best ratio of the mean of every
        measured window's curve.
        """
        has = gain is not None
        g = np.ascontiguousarray(gain, np.float64) if has else _NO_GAIN
        return K.guard_step(self._s, self._long, self._worst, self._run, self._shortest,
                            float(proposal), float(served), g, has, curve.curve)  # fmt: skip

    @property
    def fallback_share(self) -> float:
        """Share of decisions the guard spent falling back (NaN before any)."""
        return self.fallback_windows / self.decisions if self.decisions else float("nan")

    @property
    def override_share(self) -> float:
        """Share of decisions where the guard served the anchor, or the safe part of the move,
        instead of the proposal."""
        return self.overrides / self.decisions if self.decisions else float("nan")
