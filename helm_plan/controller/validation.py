"""Validation a planner can read: the controller against best static, the oracle and two simple
rules, on one trace, closed loop, with confidence intervals.

:func:`validate` runs on one node (the same config for every policy):

- **best static** (the oracle's grid + golden-section search), the controller's anchor: its
  guard falls back to that ratio, the one the planner would deploy instead;
- **the oracle** schedule (per-window labels, replayed at the same refill; never reported worse
  than best static, a schedule it could have chosen);
- **the oracle one window late** (``oracle-late``: window ``t`` served at ``r*`` of window
  ``t − 1``, the first at best static): what a policy that decides from the window just served
  could at best do, knowing that window perfectly. Where it loses to best static, the phases
  are too short for any causal controller, and holding best static is the right answer;
- **the controller** (all layers), its guard's fallback and override shares, and its decision
  latency as its own timer measured it in this run;
- the **threshold rule** and **hill climbing** (:mod:`helm_plan.controller.policy`), so the
  controller's value over a simple rule is measured, not assumed;
- optionally the layer ablation (base; base + adapter; without the guard).

Every gain is ``1 − P99 / P99 of the peer`` over the measured windows, with a percentile
bootstrap CI over windows (:func:`helm_plan.oracle.sensitivity.adaptivity_ci`). ``|r − r*|``
is averaged over measured windows whose flat band is narrower than
:data:`~helm_plan.controller.env.NARROW_BAND` (elsewhere ``r*`` is one arbitrary point of a
plateau). The label's band spans only the points its search evaluated, so a plateau the search
hit once looks narrow; the band of those windows is resolved on the ratio lattice
(:func:`helm_plan.oracle.band.resolve_bands`), and ``|r − band|``, the distance from the
served r to the nearest r of that band (0 inside it), is averaged over the windows whose
resolved band is still narrower than ``NARROW_BAND``: the error the controller made, where
the label's point also charges the width of a plateau. :func:`format_rows` lays the figures
out for a table; :func:`verdict` says in one sentence whether to deploy the controller or best
static.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from helm_plan.controller.features import NARROW_BAND
from helm_plan.controller.policy import ControllerPolicy, HillClimbPolicy, ThresholdPolicy
from helm_plan.controller.runtime import Controller, RuntimeConfig
from helm_plan.oracle import (
    OracleConfig,
    best_static,
    distance_to_band,
    label_windows,
    resolve_bands,
)
from helm_plan.oracle.sensitivity import adaptivity_ci
from helm_plan.regimes import RegimeSpan
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.node import NodeResult, simulate_node
from helm_plan.sim.policy import SchedulePolicy, fill_forward
from helm_plan.sim.regime_figures import regime_table

ORACLE_GAINS = 0.05
"""Where the oracle gains at least this over best static, the share it captures is a target."""


@dataclass(frozen=True)
class Gain:
    """``1 − P99 / P99 of the peer`` with its bootstrap CI (95%, over windows)."""

    value: float
    lo: float
    hi: float

    def text(self) -> str:
        return f"{self.value:+.1%} [{self.lo:+.1%}, {self.hi:+.1%}]"


def gain(peer: NodeResult, run: NodeResult, seed: int = 0) -> Gain:
    """``run`` against ``peer`` over the measured windows (same requests, same windows)."""
    i0 = len(run.sojourn_s) - run.requests
    ci = adaptivity_ci(peer.sojourn_s[i0:], run.sojourn_s[i0:], run.window_idx[i0:], seed=seed)
    return Gain(float(ci.value), float(ci.lo), float(ci.hi))


def late_schedule(r_star: np.ndarray, first: float) -> np.ndarray:
    """The per-window ratios of ``r_star`` served one window late (window 0 at ``first``;
    windows without a label keep the previous ratio)."""
    r = np.asarray(r_star, np.float64)
    return fill_forward(np.concatenate([[first], r[:-1]])) if len(r) else r.copy()


def latency_summary(ns: list[int]) -> dict[str, float]:
    """Median and p99 (µs) of decision latencies (ns) and their count."""
    if not ns:
        return {"median": float("nan"), "p99": float("nan"), "n": 0}
    a = np.asarray(ns, np.float64) / 1e3
    return {"median": float(np.median(a)), "p99": float(np.percentile(a, 99)), "n": int(len(a))}


@dataclass(frozen=True)
class TraceValidation:
    """One trace, closed loop (module docstring)."""

    trace: str
    windows: int
    slo_ms: float
    best_static_r: float
    """The best static ratio: the controller's anchor."""
    p99_ms: dict[str, float]
    """Pooled P99 over measured windows per policy (controller, best-static, oracle, threshold,
    hill-climb, ablation rows)."""
    slo_attainment: dict[str, float]
    vs_best_static: dict[str, Gain]
    """Each policy's gain over best static."""
    controller_vs_threshold: Gain
    """The controller's gain over the threshold rule (PPO's value over a simple rule)."""
    oracle_gain: float
    """The oracle's gain over best static (>= 0: best static is a schedule it could choose)."""
    late_gain: float
    """The gain over best static of the oracle's schedule served one window late (the causal
    bound; may be negative)."""
    captured: float
    """Share of the oracle's gain the controller captures (NaN where the oracle gains < 5%)."""
    narrow_windows: int
    abs_dr_narrow: float
    """Mean |r − r*| over measured narrow-band windows (NaN when there is none)."""
    abs_dr_all: float
    band_windows: int
    """Measured windows whose flat band, resolved on the lattice, is narrower than NARROW_BAND."""
    band_dr_narrow: float
    """Mean distance from r to the resolved flat band over those windows (NaN when none)."""
    band_probes: int
    """Window steps the band's resolution evaluated."""
    fallback_share: float
    """Share of decisions the guard spent falling back to the anchor."""
    override_share: float
    """Share of decisions where the guard served the anchor, or the safe part of the move,
    instead of the proposal."""
    latency_us: dict[str, float]
    """Decision latency measured in this run by the runtime's own timer (median, p99, n)."""
    ratios: np.ndarray = field(repr=False)
    r_star: np.ndarray = field(repr=False)
    regimes: list[dict[str, Any]] = field(default_factory=list)
    """P99 and SLO attainment of best static, the oracle schedule and the controller per regime
    of the trace's spans (:func:`helm_plan.sim.regime_figures.regime_table` rows; empty when
    the trace records none)."""

    def figures(self) -> dict[str, Any]:
        """Flat JSON-able figures."""
        d = asdict(self)
        d.pop("ratios"), d.pop("r_star")
        d["vs_best_static"] = {k: asdict(v) for k, v in self.vs_best_static.items()}
        d["controller_vs_threshold"] = asdict(self.controller_vs_threshold)
        return d


def validate(
    ctrl: Controller,
    ctx: NodeContext,
    name: str,
    ncfg: NodeConfig,
    ocfg: OracleConfig | None = None,
    *,
    baselines: bool = True,
    ablation: bool = False,
    seed: int = 0,
    spans: Sequence[RegimeSpan] = (),
) -> TraceValidation:
    """Run the controller closed loop on ``ctx`` against its peers (module docstring);
    ``spans`` (the trace's regime spans, :func:`helm_plan.regimes.read_spans`) add the figures
    per regime."""
    ocfg = ocfg or OracleConfig()
    lab = label_windows(ctx, ncfg, ocfg)
    r_star = lab.r_star
    bs = best_static(ctx, ncfg, ocfg)
    runs: dict[str, NodeResult] = {
        "best-static": simulate_node(ctx, np.array([bs.ratio]), ncfg),
        "oracle": simulate_node(ctx, SchedulePolicy(fill_forward(r_star), "oracle"), ncfg),
        "oracle-late": simulate_node(ctx, SchedulePolicy(late_schedule(r_star, bs.ratio),
                                                         "oracle-late"), ncfg),
    }  # fmt: skip
    pol = ControllerPolicy(ctx, ncfg, ctrl, "controller", anchor=bs.ratio)
    runs["controller"] = simulate_node(ctx, pol, ncfg)
    stats = runs["controller"].policy_stats
    if baselines:
        runs["threshold"] = simulate_node(ctx, ThresholdPolicy(ctx, ncfg), ncfg)
        runs["hill-climb"] = simulate_node(ctx, HillClimbPolicy(ctx, ncfg), ncfg)
    if ablation:
        for k, cfg in (("base", RuntimeConfig(adapter=False, burst=False, guard=False)),
                       ("base+adapter", RuntimeConfig(burst=False, guard=False)),
                       ("no-guard", RuntimeConfig(guard=False))):  # fmt: skip
            p = ControllerPolicy(ctx, ncfg, ctrl.with_config(cfg), k, anchor=bs.ratio)
            runs[k] = simulate_node(ctx, p, ncfg)
    base = runs["best-static"]
    if not runs["oracle"].p99_ms <= base.p99_ms:  # the oracle could have chosen best static
        runs["oracle"] = base
    vs = {k: gain(base, r, seed) for k, r in runs.items() if k != "best-static"}
    run = runs["controller"]
    m = run.measured_from_window
    flat = lab.table["flatness"].to_numpy()
    ok = (np.arange(len(r_star)) >= m) & np.isfinite(r_star)
    narrow = ok & (flat < NARROW_BAND)
    dr = np.abs(run.ratios - r_star)
    bands = resolve_bands(ctx, ncfg, lab, ocfg, narrow) if ocfg.warmup == "carry" else None
    if bands is None:  # window-mode labels: the label's band as it is
        b_lo, b_hi = lab.table["r_flat_lo"].to_numpy(), lab.table["r_flat_hi"].to_numpy()
    else:
        b_lo, b_hi = bands.lo, bands.hi
    resolved = narrow & (b_hi - b_lo < NARROW_BAND)
    band_dr = distance_to_band(run.ratios, b_lo, b_hi)
    og = 1.0 - runs["oracle"].p99_ms / base.p99_ms
    cg = 1.0 - run.p99_ms / base.p99_ms
    n_dec = max(int(stats.get("decisions", 0)), 1)
    thr = runs.get("threshold")
    by_regime = {k: runs[k] for k in ("best-static", "oracle", "controller")}
    regs = regime_table(by_regime, ctx.arrays.ts_s, spans, ncfg.slo_ms).to_dicts() if spans else []
    return TraceValidation(
        trace=name, windows=len(r_star), slo_ms=ncfg.slo_ms, best_static_r=float(bs.ratio),
        p99_ms={k: float(r.p99_ms) for k, r in runs.items()},
        slo_attainment={k: float(r.slo_attainment) for k, r in runs.items()},
        vs_best_static=vs,
        controller_vs_threshold=gain(thr, run, seed) if thr is not None else Gain(*[np.nan] * 3),
        oracle_gain=float(og), late_gain=float(1.0 - runs["oracle-late"].p99_ms / base.p99_ms),
        captured=float(cg / og) if og >= ORACLE_GAINS else float("nan"),
        narrow_windows=int(narrow.sum()),
        abs_dr_narrow=float(dr[narrow].mean()) if narrow.any() else float("nan"),
        abs_dr_all=float(dr[ok].mean()) if ok.any() else float("nan"),
        band_windows=int(resolved.sum()),
        band_dr_narrow=float(band_dr[resolved].mean()) if resolved.any() else float("nan"),
        band_probes=bands.probes if bands is not None else 0,
        fallback_share=stats.get("guard_fallback_windows", 0) / n_dec,
        override_share=stats.get("guard_overrides", 0) / n_dec,
        latency_us=latency_summary(stats.get("decision_latency_ns", [])),
        ratios=run.ratios, r_star=r_star, regimes=regs,
    )  # fmt: skip


COLUMNS = ("trace", "P99 ms ctrl / static / oracle", "ctrl vs static (95% CI)",
           "oracle gain", "one window late", "captured", "ctrl vs threshold (95% CI)",
           "|r-r*| narrow (n)", "|r-band| narrow (n)", "fallback",
           "step µs p50/p99 (this run)")  # fmt: skip
"""The columns of :func:`format_rows`."""


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.0%}"


def format_rows(vals: list[TraceValidation]) -> list[tuple[str, ...]]:
    """One row of :data:`COLUMNS` per trace."""
    out = []
    for v in vals:
        p = v.p99_ms
        lat = v.latency_us
        dr = "n/a" if not np.isfinite(v.abs_dr_narrow) else f"{v.abs_dr_narrow:.3f}"
        bd = "n/a" if not np.isfinite(v.band_dr_narrow) else f"{v.band_dr_narrow:.3f}"
        out.append((
            v.trace,
            f"{p['controller']:.3f} / {p['best-static']:.3f} / {p['oracle']:.3f}",
            v.vs_best_static["controller"].text(),
            f"{v.oracle_gain:+.1%}",
            f"{v.late_gain:+.1%}",
            _pct(v.captured),
            v.controller_vs_threshold.text() if np.isfinite(v.controller_vs_threshold.value)
            else "n/a",
            f"{dr} ({v.narrow_windows})",
            f"{bd} ({v.band_windows})",
            _pct(v.fallback_share),
            f"{lat['median']:.1f} / {lat['p99']:.1f}",
        ))  # fmt: skip
    return out


def verdict(v: TraceValidation) -> str:
    """One sentence: deploy the controller, or best static."""
    g = v.vs_best_static["controller"]
    if g.lo > 0.0:
        return (f"{v.trace}: the controller beats best static (r = {v.best_static_r:.2f}) by "
                f"{g.text()}: deploy the controller.")  # fmt: skip
    return (f"{v.trace}: the controller does not beat best static ({g.text()}): use best static, "
            f"r = {v.best_static_r:.2f}.")  # fmt: skip
