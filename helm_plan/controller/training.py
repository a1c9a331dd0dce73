"""The training set, training and validation behind ``helm-plan train`` and ``validate``.

- :data:`DEFAULT_SET` / :data:`HELD_OUT`: the synthetic traces of the shipped
  controller (steady, trend, burst, mixed; several seeds, loads and pools)
  and the unseen ones it is validated on (other seeds, and a mixed regime
  with other loads); :func:`real_trace_contexts` adds ingested public logs
  when ``../shared/datasets`` (or ``$HELM_PLAN_DATASETS``) exists.
- :func:`fit`: label traces -> a :class:`Controller` with its card.
- :func:`validate`: one trace closed loop: the controller (and its layer
  ablation) against the oracle schedule and best static, all at the same
  node config.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from helm_plan._version import __version__
from helm_plan.controller import dataset
from helm_plan.controller.env import SHIFTS
from helm_plan.controller.features import FEATURE_VERSION
from helm_plan.controller.policy import ControllerPolicy
from helm_plan.controller.runtime import Controller, RuntimeConfig
from helm_plan.oracle import OracleConfig, best_static, label_windows
from helm_plan.oracle.sensitivity import adaptivity_ci
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext, load_context
from helm_plan.sim.node import NodeResult, simulate_node
from helm_plan.sim.policy import SchedulePolicy, fill_forward

NARROW_BAND = 0.1
"""|r − r*| is reported over windows whose flat band is narrower than this (elsewhere r* is
arbitrary: any r in the band is within 2% of the best P99)."""


@dataclass(frozen=True)
class SynthSpec:
    """One synthetic training or validation trace."""

    regime: str
    """steady, trend, burst or mixed."""
    seed: int
    """Generator seed."""
    qps: float = 80.0
    """Base arrival rate, requests/s."""
    pool_fraction: float = 0.1
    """Pool as a share of the trace's EMB+KV footprint."""
    duration_s: float = 300.0
    """Trace length, seconds."""

    @property
    def name(self) -> str:
        return f"synth:{self.regime}:seed{self.seed}:qps{self.qps:g}:pool{self.pool_fraction:g}"


DEFAULT_SET = tuple(
    SynthSpec(reg, seed, qps, pool)
    for reg in ("steady", "trend", "burst", "mixed")
    for seed, qps, pool in ((1, 80.0, 0.1), (2, 120.0, 0.05))
)
"""The shipped controller's synthetic traces."""

HELD_OUT = tuple(
    SynthSpec(reg, seed, qps, pool)
    for reg, seed, qps, pool in (
        ("steady", 21, 100.0, 0.08),
        ("burst", 22, 100.0, 0.08),
        ("mixed", 23, 90.0, 0.12),
        ("trend", 24, 110.0, 0.06),
    )
)
"""Unseen traces of the validation (other seeds, loads and pools)."""

DEFAULT_NODE = NodeConfig(window_s=10.0)
"""Node config of training and validation (SLO: each trace's model's ``default_slo_ms``)."""
DEFAULT_ORACLE = OracleConfig(trials=0)
"""Labels on the coarse grid plus the edge points (no Optuna trials: training-set speed)."""


def synth_context(spec: SynthSpec) -> NodeContext:
    """The node context of a synthetic spec (gr-small, candidates 64, 100k items)."""
    from helm_plan.synth import SynthConfig, synthesize

    tab = synthesize(
        SynthConfig(
            regime=spec.regime, qps=spec.qps, duration_s=spec.duration_s, items=100_000,
            candidates=64, returning_history_mean=800.0, seed=spec.seed,
        )
    )  # fmt: skip
    return load_context(tab, pool_fraction=spec.pool_fraction, seed=spec.seed)


REAL_TRAIN = ("movielens",)
"""Public logs in the shipped training set (when the datasets folder exists)."""
REAL_HELD_OUT = ("amazon",)
"""Public logs only the validation sees."""
_REAL_FILES = {"movielens": "movielens-100k.inter.tsv", "amazon": "amazon-video-games.seq.txt"}


def real_trace_contexts(
    datasets_dir: Path, kinds: tuple[str, ...] = REAL_TRAIN, qps: float = 40.0
) -> list[tuple[str, NodeContext]]:
    """Public logs ingested and re-timed to ``qps`` for 300 s (those present in the folder)."""
    from helm_plan.ingest import IngestConfig, ingest

    out = []
    for kind in kinds:
        path = datasets_dir / _REAL_FILES[kind]
        if not path.exists():
            continue
        cfg = IngestConfig(kind=kind, n_candidates=64, qps=qps, duration_s=300.0, seed=0)
        tab, _ = ingest(path, cfg)
        name = path.name.split(".")[0]
        out.append((name, load_context(tab, pool_fraction=0.1, seed=0)))
    return out


def label_traces(
    named: list[tuple[str, NodeContext]],
    ncfg: NodeConfig = DEFAULT_NODE,
    ocfg: OracleConfig = DEFAULT_ORACLE,
    progress: Callable[[int, int], None] | None = None,
) -> list[dataset.LabelTrace]:
    """Label every context (in order)."""
    out = []
    for i, (name, ctx) in enumerate(named):
        out.append(dataset.build(ctx, ncfg, ocfg, name))
        if progress:
            progress(i + 1, len(named))
    return out


def fit(
    traces: list[dataset.LabelTrace],
    args: Any = None,  # noqa: ANN401 - a ppo.Args (imported lazily: torch)
    progress: Callable[[int, int], None] | None = None,
    card_extra: dict[str, Any] | None = None,
) -> tuple[Controller, Any]:
    """Train layer 1 on ``traces`` and wrap it with the default online layers and a card."""
    from helm_plan.controller import ppo

    args = args or ppo.Args()
    res = ppo.train(traces, args, progress)
    import torch

    card = {
        "feature_version": FEATURE_VERSION,
        "helm_plan": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "seed": args.seed,
        "ppo": {k: v for k, v in asdict(args).items()},
        "training_set": [t.name for t in traces],
        "training_windows": int(sum(t.n_windows for t in traces)),
        "train_seconds": round(res.seconds, 1),
        "mean_episode_return": res.mean_episode_return,
        "runtime": asdict(RuntimeConfig()),
    }
    card.update(card_extra or {})
    return Controller(res.weights, np.array(SHIFTS), card=card), res


@dataclass(frozen=True)
class Validation:
    """One trace, closed loop: the controller against the oracle schedule and best static."""

    name: str
    """Trace."""
    figures: dict[str, Any]
    """Flat JSON-able figures (see :func:`validate`)."""
    ratios: np.ndarray
    """The controller's r per window."""
    r_star: np.ndarray
    """The oracle's r* per window."""


def _pooled(res: NodeResult) -> float:
    return float(res.p99_ms)


def validate(
    ctrl: Controller,
    ctx: NodeContext,
    name: str,
    ncfg: NodeConfig = DEFAULT_NODE,
    ocfg: OracleConfig = DEFAULT_ORACLE,
    ablation: bool = True,
) -> Validation:
    """Run the controller closed loop on ``ctx`` and compare it with the oracle and best static.

    Figures: ``p99_ms`` (controller, pooled over measured windows), ``oracle_p99_ms`` (the
    oracle schedule at the same refill), ``best_static_p99_ms`` and ``best_static_r``,
    ``regret_vs_oracle`` (P99 / oracle P99 − 1), ``vs_best_static`` (P99 / best static − 1),
    ``gain_ci`` (bootstrap CI of 1 − P99 / best static P99), SLO attainments,
    ``abs_dr_narrow`` (mean |r − r*| over measured windows with a flat band < 0.1; NaN when
    there is none) with ``narrow_windows``, decision latency, and the ablation P99s.
    """
    ncfg = ncfg.for_context(ctx)
    lab = label_windows(ctx, ncfg, ocfg)
    r_star = lab.r_star
    bs = best_static(ctx, ncfg, ocfg)
    static = simulate_node(ctx, np.array([bs.ratio]), ncfg)
    oracle = simulate_node(ctx, SchedulePolicy(fill_forward(r_star), "oracle"), ncfg)
    variants = {"all": ctrl.cfg}
    if ablation:
        variants = {
            "base": RuntimeConfig(adapter=False, burst=False),
            "base+adapter": RuntimeConfig(adapter=True, burst=False),
            "all": ctrl.cfg,
        }
    runs: dict[str, NodeResult] = {}
    lat: list[float] = []
    for k, cfg in variants.items():
        pol = ControllerPolicy(ctx, ncfg, ctrl.with_config(cfg), "controller")
        runs[k] = simulate_node(ctx, pol, ncfg)
        if k == "all":
            lat = pol.latency_s
    run = runs["all"]
    widx = run.window_idx  # derived on each access: once here
    meas = widx >= run.measured_from_window
    ci = adaptivity_ci(static.sojourn_s[meas], run.sojourn_s[meas], widx[meas], seed=0)
    flat = lab.table["flatness"].to_numpy()
    w_ok = np.arange(len(r_star)) >= run.measured_from_window
    narrow = w_ok & np.isfinite(r_star) & (flat < NARROW_BAND)
    dr = np.abs(run.ratios - r_star)
    lat_us = np.array(lat) * 1e6
    figs: dict[str, Any] = {
        "trace": name,
        "windows": int(len(r_star)),
        "p99_ms": _pooled(run),
        "oracle_p99_ms": _pooled(oracle),
        "best_static_p99_ms": _pooled(static),
        "best_static_r": float(bs.ratio),
        "regret_vs_oracle": _pooled(run) / _pooled(oracle) - 1.0,
        "vs_best_static": _pooled(run) / _pooled(static) - 1.0,
        "gain_vs_static": float(ci.value),
        "gain_ci_lo": float(ci.lo),
        "gain_ci_hi": float(ci.hi),
        "slo_attainment": float(run.slo_attainment),
        "best_static_slo_attainment": float(static.slo_attainment),
        "narrow_windows": int(narrow.sum()),
        "abs_dr_narrow": float(dr[narrow].mean()) if narrow.any() else float("nan"),
        "abs_dr_all": float(np.nanmean(dr[w_ok])),
        "latency_median_us": float(np.median(lat_us)) if len(lat_us) else float("nan"),
        "latency_p99_us": float(np.percentile(lat_us, 99)) if len(lat_us) else float("nan"),
    }
    for k, r in runs.items():
        figs[f"p99_ms[{k}]"] = _pooled(r)
    return Validation(name, figs, run.ratios, r_star)
