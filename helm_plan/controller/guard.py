"""The controller's last layer: do no harm against the robust static ratio (numpy only).

The guard holds an **anchor**: the static ratio a planner would deploy instead
of the controller (the best static ratio of the planner's own search, handed
over by the caller), or, when none is given, the best ratio of the node's own
measured curve averaged over every window so far (an online estimate of the
best static split). It reads the window's **counterfactual P99 curve**
(:func:`helm_plan.controller.measure.p99_gain`: ``log(P99 realised / P99 at
r)`` for every ``r`` of the grid, from the node's ghost caches) and keeps the
controller from paying for moves the measurements do not back, in two ways:

- **Before a move** (prediction): a proposal away from the anchor is served
  only when the smoothed curve predicts that it beats the anchor's P99 by
  ``enter_margin`` (log-ratio); otherwise the anchor is served.
- **After a move** (evidence): each window served away from the anchor is
  scored against its counterfactual, the realised P99 against the P99 the
  anchor would have had on that same window (the window's curve at the
  anchor). The log-ratio's EWMA is the evidence; above ``exit_margin`` the
  guard falls back to the anchor and holds it at least ``hold_windows``
  windows, and re-engages only after ``rearm_windows`` windows in a row whose
  prediction clears ``enter_margin`` again (hysteresis: no flapping).

The prediction and the evidence read the same ghost caches; what neither
sees (the refill traffic of a move, the EMB traffic a KV miss adds) is why
the margins are not zero.
"""

from __future__ import annotations

import math

import numpy as np

from helm_plan.controller.features import CurveState, _k


class Guard:
    """The guard's state for one node (see the module docstring)."""

    def __init__(
        self,
        anchor: float | None = None,
        enter_margin: float = 0.005,
        exit_margin: float = 0.005,
        evidence_alpha: float = 0.5,
        hold_windows: int = 3,
        rearm_windows: int = 2,
    ) -> None:
        self.fixed = anchor if anchor is not None and math.isfinite(anchor) else None
        self.enter_margin, self.exit_margin = enter_margin, exit_margin
        self.evidence_alpha = evidence_alpha
        self.hold_windows, self.rearm_windows = hold_windows, rearm_windows
        self._long = CurveState()
        self.reset()

    def reset(self, start: float = 0.5) -> None:
        """A cold node: no evidence, the online anchor back at ``start``."""
        self.anchor = self.fixed if self.fixed is not None else start
        self.evidence = 0.0
        self.fallback = False
        self._hold = self._rearm = 0
        self._seen = 0
        self._long.reset()
        self.decisions = 0
        self.overrides = 0
        self.fallback_windows = 0

    def _update_anchor(self, share: np.ndarray | None) -> None:
        if self.fixed is not None or share is None:
            return
        self._seen += 1
        self._long.update(share, 1.0 / self._seen)  # the mean curve over every window so far
        self.anchor = self._long.optimum(self.anchor)

    def step(
        self,
        proposal: float,
        served: float,
        gain: np.ndarray | None,
        curve: CurveState,
    ) -> float:
        """The ratio to serve next: ``proposal`` or the anchor.

        ``served`` is the ratio of the window just served, ``gain`` its counterfactual P99
        curve (None: nothing measured), ``curve`` the smoothed curve (the prediction).
        """
        self._update_anchor(gain)
        a = self.anchor
        self.decisions += 1
        if gain is not None:
            # realised against the anchor's counterfactual on the same window: > 0 when the
            # anchor would have been faster (0 when the anchor was served)
            loss = gain.item(_k(a)) - gain.item(_k(served)) if abs(served - a) > 1e-9 else 0.0
            self.evidence += self.evidence_alpha * (loss - self.evidence)
        pred = curve.value(proposal) - curve.value(a)
        if not self.fallback and self.evidence > self.exit_margin:
            self.fallback = True
            self._hold, self._rearm = self.hold_windows, 0
        if self.fallback:
            self._rearm = self._rearm + 1 if pred > self.enter_margin else 0
            if self._hold > 0 or self._rearm < self.rearm_windows:
                self._hold -= 1
                self.fallback_windows += 1
                self.overrides += abs(proposal - a) > 1e-9
                return a
            self.fallback, self.evidence = False, 0.0
        if abs(proposal - a) > 1e-9 and pred <= self.enter_margin:
            self.overrides += 1
            return a
        return proposal

    @property
    def fallback_share(self) -> float:
        """Share of decisions the guard spent falling back (NaN before any)."""
        return self.fallback_windows / self.decisions if self.decisions else float("nan")

    @property
    def override_share(self) -> float:
        """Share of decisions where the guard served the anchor instead of the proposal."""
        return self.overrides / self.decisions if self.decisions else float("nan")
