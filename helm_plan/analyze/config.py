"""Options of ``helm-plan analyze``: the top-level config, plan-file sections and the demo."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from helm_plan.cache.curves import CurvesConfig
from helm_plan.cluster.config import MAX_NODES, NODES_REASON
from helm_plan.config import (
    from_dict,
    require_at_most,
    require_int,
    require_positive,
    require_range,
)
from helm_plan.errors import ConfigError
from helm_plan.exec import ExecutorConfig
from helm_plan.oracle import OracleConfig
from helm_plan.plan.config import require_attainment
from helm_plan.policies import default_policies
from helm_plan.profiles import DEFAULT_GPU, DEFAULT_MODEL
from helm_plan.sim import DEFAULT_WINDOW_S, NodeConfig
from helm_plan.synth import SynthConfig

DEMO_SYNTH = SynthConfig(
    regime="mixed", qps=250.0, duration_s=40.0, items=2_000_000, zipf_alpha=0.7,
    candidates=64, max_seq_len=2048, cold_history_mean=150.0, session_share=0.9,
    revisit_gap_s=5.0, drift_ranks=20_000, burst_factor=3.0, burst_len_frac=0.06, bursts=4,
    burst_hot_items=2_000, returning_share=0.0, burst_new_item_share=0.0, seed=0,
)  # fmt: skip
"""The embedded demo workload: steady, trend and burst thirds (seeded), 40 s at 250 req/s:
its busiest window needs two a100-80g nodes under the demo's SLO, so every section (capacity,
routing, policies, controller) has something to show."""
DEMO_POOL_FRACTION = 0.1
"""Demo pool as a share of the demo trace's EMB+KV footprint, so the caches compete."""
DEMO_TRIALS = 6
"""Search steps per window for the demo's oracle."""
DEMO_MODEL = "gr-large"
"""The demo's model: a few ms per request, so a fleet of 2 or more is planned from a trace
small enough to analyse in seconds."""
DEMO_SLO_MS = 10.0
"""Demo P99 SLO: gr-large serves the demo in about 4 ms a request at best, so 10 ms binds at
the trace's bursts (its default_slo_ms, 250 ms, would not)."""
DEMO_WINDOW_S = 5.0
"""Demo window: 8 windows over the 40-s trace."""
DEMO_GPUS = ("a100-80g", "h100-80g")
"""GPUs the demo plans (every shipped one takes about twice as long)."""
DEMO_PLAN_POLICIES = ("best-static", "emb-max", "kv-max")
"""Policies the demo's fleet search tries. The controller still runs on the analysed node
(its own section); searching fleets with it too takes longer than the rest of the demo."""
DEMO_HEADROOM_STEPS = 2
"""Bisection steps of the demo's headroom (4 by default): a coarser bracket, a second less."""
DEMO_WORKERS = 2
"""Worker processes of the demo (analyze's default is 1): the two cores the demo is sized for
(15.8 against 18.2 s warm, 37 against 42 s with every kernel compiled on first use; results
identical). Not 0 (all cores): on a large machine each worker would compile its kernels."""
DEMO_COLD_WORKERS = 1
"""Worker processes of the demo on a cold numba cache (:func:`demo_plan`): the compile-ahead
process (:mod:`helm_plan.analyze.warm`) takes the second core, and two workers would each
load (or compile) every cluster kernel: 23.8 against 25.9 s on 2 cores with an empty cache
(warm, one worker takes 12.7-13.2 s against 10.7 s)."""


@dataclass(frozen=True)
class AnalyzeConfig:
    """Top-level options of ``helm-plan analyze`` (plan file section ``[analyze]``)."""

    gpu: str = DEFAULT_GPU
    """GPU profile name or TOML path."""
    model: str = DEFAULT_MODEL
    """Model profile name or TOML path."""
    latency: str | None = None
    """Latency profile name or TOML path (None = the shipped GPU_MODEL profile or a roofline)."""
    slo_ms: float | None = None
    """P99 latency SLO, milliseconds (None: the model profile's default_slo_ms, the one SLO rule
    of every command: :func:`helm_plan.profiles.resolve_slo_ms`)."""
    window_s: float = DEFAULT_WINDOW_S
    """Window length, seconds (curves, oracle and policies)."""
    pool_bytes: int | None = None
    """Cache pool in bytes (None = HBM minus weights and reserve)."""
    pool_fraction: float | None = None
    """Cache pool as a share of the trace's EMB+KV footprint (overrides HBM sizing)."""
    seed: int = 0
    """Seed for candidate draws, Optuna studies and the bootstrap."""
    workers: int = 1
    """Worker processes for oracle windows and static sweeps (0 = all cores)."""
    executor: str = "local"
    """Where the parallel tasks run: ``local`` processes or ``ray`` (never changes a result)."""
    ray_address: str | None = None
    """Ray cluster address ``HOST:PORT`` (None = a local Ray instance of ``workers`` CPUs)."""
    n_boot: int = 1000
    """Bootstrap resamples (over windows) of the value-of-adaptivity CI."""
    confidence: float = 0.95
    """Confidence level of the bootstrap CI."""
    capacity: bool = True
    """Plan first and analyse one node of the SLO-binding fleet (False: the trace as it is)."""
    peak_qps: float | None = None
    """Plan for this rate in the busiest window, requests/s (None: the trace's own)."""
    scale: float | None = None
    """Plan for the trace's rate times this factor (instead of peak_qps)."""
    scale_by: str = "users"
    """The traffic model of --peak-qps / --scale (helm_plan.plan.scale: users, users-shifted,
    time)."""
    gpus: tuple[str, ...] | None = None
    """GPUs the plan compares (None: every shipped GPU profile); ``gpu`` is always planned and
    is the one the sections after Capacity analyse."""
    headroom_steps: int = 4
    """Bisections of each GPU's headroom (traffic growth until N + 1; 0 = skip)."""
    attainment: float = 0.99
    """Share of requests the plan requires within the SLO."""
    routers: tuple[str, ...] = ("jsq", "affinity", "kv-overlap", "helm")
    """Routers the plan and the routing comparison cover."""
    plan_policies: tuple[str, ...] = default_policies("analyze-plan")
    """Policies the plan covers: the specs naming ``analyze-plan`` among their defaults (not
    hill-climb: a baseline the controller's tests already beat, and every policy adds a search
    per router)."""
    max_nodes: int = 64
    """Largest fleet the plan considers."""
    capacity_max_requests: int = 50_000
    """Largest trace one point of the plan's single-node load curve simulates."""
    spill_dir: str | None = None
    """Keep the trace's history tokens in an unlinked file in this folder instead of memory
    (4 bytes a token; the kernels drop their pages between windows). Never changes a result."""
    precompile: bool = True
    """On a cold numba cache, compile the later stages' kernels in a background process
    while the first stages run (:mod:`helm_plan.analyze.warm`). Never changes a result."""
    node: NodeConfig = field(default_factory=NodeConfig)
    """Node simulator settings (plan section ``[node]``; :meth:`node_config` sets its SLO and
    window from here)."""
    oracle: OracleConfig = field(default_factory=lambda: OracleConfig(**ORACLE_DEFAULTS))
    """Oracle settings (plan section ``[oracle]``; :meth:`oracle_config` sets its seed)."""
    curves: CurvesConfig = field(default_factory=lambda: CurvesConfig(**CURVES_DEFAULTS))
    """Curve settings (plan section ``[curves]``; :meth:`curves_config` sets window and seed)."""

    def __post_init__(self) -> None:
        if self.slo_ms is not None:
            require_positive("slo_ms", self.slo_ms)
        require_positive("window_s", self.window_s)
        require_range("confidence", self.confidence, 0.5, 0.999)
        if self.n_boot < 10:
            raise ConfigError(
                f"n_boot must be >= 10, got {self.n_boot}", hint="set n_boot >= 10 in [analyze]"
            )
        require_int("seed", self.seed, 0)
        require_attainment(self.attainment)  # a bad plan file fails before any stage
        require_int("max_nodes", self.max_nodes, 1)
        require_at_most("max_nodes", self.max_nodes, MAX_NODES, NODES_REASON)
        if self.peak_qps is not None and self.scale is not None:
            raise ConfigError("give --peak-qps or --scale, not both", hint="drop one of the two")
        ExecutorConfig(self.executor, self.workers, self.ray_address)  # validates them
        if self.gpus is not None and not self.gpus:
            raise ConfigError("analyze needs at least one GPU to plan", hint="pass --gpus a100-80g")
        require_int("headroom_steps", self.headroom_steps, 0, 30)

    # One source of truth for the shared settings: the stages read these, never the raw
    # sections (whose slo_ms, window_s and seed the [analyze] section owns).
    def node_config(self, slo_ms: float) -> NodeConfig:
        """The node config with the resolved SLO and this config's window."""
        return dataclasses.replace(self.node, slo_ms=slo_ms, window_s=self.window_s)

    def oracle_config(self) -> OracleConfig:
        """The oracle config with this config's seed."""
        return dataclasses.replace(self.oracle, seed=self.seed)

    def curves_config(self) -> CurvesConfig:
        """The curves config with this config's window and seed."""
        return dataclasses.replace(self.curves, window_s=self.window_s, seed=self.seed)


_SECTIONS = {"node": NodeConfig, "oracle": OracleConfig, "curves": CurvesConfig}
ORACLE_DEFAULTS: dict[str, Any] = {"warmup": "carry"}
"""analyze labels windows from the carried state by default: its adaptive policies replay the
oracle schedule on a running node, and labels from cold caches and an idle queue misjudge that
node badly near saturation (a 1.2M-request mixed trace at rho~0.9: the oracle schedule came out
48% worse than the best static split with ``window`` labels, 0.7% worse with ``carry``)."""
CURVES_DEFAULTS: dict[str, Any] = {"worst_case": False}
"""analyze measures the no-KV-cache (``emb_kv0``) curve only when asked (``[curves] worst_case =
true``; the demo asks), for a reference line of the Cache curves section: its stream was 4.1x
the ``emb`` curve's lookups and 125 of the curves' 150 s on a 310k-request mixed trace, and on
the 1.24M-request one of ``bench_analyze.py`` its pass alone held the run ~11 of its 18 minutes
after the oracle and policies had finished."""
_DEFAULTS = {"oracle": ORACLE_DEFAULTS, "curves": CURVES_DEFAULTS}
_OWNED = {"node": ("slo_ms", "window_s"), "oracle": ("seed",), "curves": ("window_s", "seed")}


def build_config(
    plan: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None
) -> AnalyzeConfig:
    """AnalyzeConfig from plan sections (``[analyze]``, ``[node]``, ``[oracle]``, ``[curves]``)
    with ``overrides`` (CLI flags; None values ignored) applied on top of ``[analyze]``."""
    plan = dict(plan or {})
    unknown = sorted(set(plan) - {"analyze", "demo", *_SECTIONS})
    if unknown:
        raise ConfigError(
            f"unknown plan section [{unknown[0]}]",
            hint="valid sections: [analyze], [node], [oracle], [curves], [demo]",
        )
    top = dict(plan.get("analyze", {}))
    top.update({k: v for k, v in (overrides or {}).items() if v is not None})
    subs: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        sec = dict(plan.get(name, {}))
        for k in _OWNED[name]:
            if k in sec:
                raise ConfigError(
                    f"[{name}] {k} is set in [analyze]", hint=f"move {k} to [analyze]"
                )
        sec = {**_DEFAULTS.get(name, {}), **sec}
        subs[name] = from_dict(cls, sec, section=name)
    if any(k in top for k in _SECTIONS):
        raise ConfigError(
            "nested options belong in their own plan sections",
            hint="put [node], [oracle] and [curves] options in their own sections",
        )
    cfg = from_dict(AnalyzeConfig, top, section="analyze")
    return dataclasses.replace(cfg, **subs)


def demo_plan(plan: dict[str, Any] | None = None, cold: bool = False) -> dict[str, Any]:
    """``plan`` with the demo defaults (pool fraction, SLO, model, window, GPUs, fleet
    policies, headroom steps, workers, oracle steps) where it sets none.

    ``cold``: numba's cache lacks the kernels (:func:`helm_plan.analyze.warm.cold`). Then,
    unless the plan turns ``precompile`` off, the demo runs one worker (``DEMO_COLD_WORKERS``)
    beside the process that compiles the later kernels ahead."""
    out = {k: dict(v) for k, v in (plan or {}).items()}
    a = out.setdefault("analyze", {})
    if cold and a.get("precompile", True):
        a.setdefault("workers", DEMO_COLD_WORKERS)
    a.setdefault("pool_fraction", DEMO_POOL_FRACTION)
    a.setdefault("slo_ms", DEMO_SLO_MS)
    a.setdefault("model", DEMO_MODEL)
    a.setdefault("window_s", DEMO_WINDOW_S)
    a.setdefault("gpus", list(DEMO_GPUS))
    a.setdefault("plan_policies", list(DEMO_PLAN_POLICIES))
    a.setdefault("headroom_steps", DEMO_HEADROOM_STEPS)
    a.setdefault("workers", DEMO_WORKERS)
    out.setdefault("oracle", {}).setdefault("trials", DEMO_TRIALS)
    out.setdefault("curves", {}).setdefault("worst_case", True)  # the demo shows every curve
    return out


def demo_synth_config(plan: dict[str, Any] | None = None, seed: int | None = None) -> SynthConfig:
    """The demo trace's SynthConfig: DEMO_SYNTH with plan ``[demo]`` keys and ``seed`` applied."""
    sec = dict((plan or {}).get("demo", {}))
    if seed is not None:
        sec["seed"] = seed
    return from_dict(SynthConfig, {**asdict(DEMO_SYNTH), **sec}, section="demo")
