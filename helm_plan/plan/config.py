"""What a capacity plan asks: GPUs, policies, routers, the SLO, the traffic and the prices."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from helm_plan.cluster.config import MAX_NODES, NODES_REASON
from helm_plan.cluster.routers import get_router
from helm_plan.config import require_at_most, require_int, require_positive, require_range
from helm_plan.errors import ConfigError
from helm_plan.oracle import OracleConfig
from helm_plan.plan.scale import ScaleBy
from helm_plan.policies import baseline_policy, default_policies
from helm_plan.profiles import DEFAULT_MODEL
from helm_plan.sim.config import NodeConfig

DEFAULT_GPUS = ("a100-80g", "h100-80g", "h200-141g")
"""GPU kinds compared by default (`helm-plan profiles` lists every shipped one)."""
DEFAULT_POLICIES = default_policies("plan")
"""Policies planned by default (the specs naming ``plan`` among their defaults), in display order."""
DEFAULT_ROUTERS = ("jsq", "affinity", "kv-overlap", "helm")
"""Routers planned by default."""
BASELINE_POLICY = baseline_policy()
"""The reference every saving is measured against: one static split fleet-wide ..."""
DEFAULT_BASELINE_ROUTER = "jsq"
"""... behind a load-only router."""


def require_attainment(a: float) -> None:
    """Raise ConfigError unless 0 < ``a`` <= 1: the share of requests that must meet the SLO
    (0 would accept a fleet that serves nothing in time)."""
    if not 0.0 < a <= 1.0:
        raise ConfigError(f"attainment must be in (0, 1], got {a}",
                          hint="pass --attainment in (0, 1], e.g. 0.99")  # fmt: skip


@dataclass(frozen=True)
class PlanConfig:
    """A capacity question: minimal nodes per GPU × policy × router at a P99 SLO."""

    gpus: tuple[str, ...] = DEFAULT_GPUS
    """GPU profiles to plan for (names or TOML paths)."""
    model: str = DEFAULT_MODEL
    """Model profile."""
    latency: str | None = None
    """Latency profile (one GPU only; default: the shipped profile of each GPU × model)."""
    slo_ms: float | None = None
    """P99 target, ms (None: the model's default_slo_ms)."""
    attainment: float = 0.99
    """Share of requests that must finish within the SLO."""
    policies: tuple[str, ...] | None = None
    """Split policies (None: DEFAULT_POLICIES available in this build)."""
    routers: tuple[str, ...] = DEFAULT_ROUTERS
    """Routers."""
    baseline_router: str = DEFAULT_BASELINE_ROUTER
    """Router of the best-static baseline (planned even when not in routers)."""
    peak_qps: float | None = None
    """Scale the trace so its busiest window carries this rate, requests/s."""
    scale: float | None = None
    """Scale the trace's arrival rate by this factor (instead of peak_qps)."""
    scale_by: str = "users"
    """How to scale: users (clones, catalogue kept) or time (compressed)."""
    max_nodes: int = 256
    """Largest fleet considered per GPU kind."""
    cost_per_hour: tuple[tuple[str, float], ...] = ()
    """(GPU, USD per GPU-hour) overrides of the profiles' cost_per_hour."""
    pool_bytes: int | None = None
    """Per-node cache pool, bytes (None: what the GPU leaves, HBM - weights - reserve)."""
    pool_fraction: float | None = None
    """Per-node pool as a share of the (scaled) trace's EMB+KV footprint."""
    node: NodeConfig = field(default_factory=NodeConfig)
    """How every node serves (its slo_ms is replaced by the plan's SLO)."""
    oracle: OracleConfig = field(default_factory=OracleConfig)
    """The best-static search's grid (coarse_step)."""
    load_curve: bool = True
    """Also compute the single-node load curve (it seeds the search either way)."""
    load_refine_steps: int = 4
    """Bisections of each policy's pass/fail load edge on the single-node curve."""
    check_monotone: bool = False
    """Also evaluate N + 1 of every combination (non-monotone answers are then reported for
    all; each GPU's cheapest gets N + 1 and N + 2 from the frontier either way)."""
    frontier: bool = True
    """Also evaluate N + 1 and N + 2 for each GPU's cheapest fleet (the cost-latency frontier)."""
    headroom_steps: int = 4
    """Bisections of each GPU's headroom (traffic growth until N + 1; 0 = skip it)."""
    load_max_requests: int = 250_000
    """Largest trace a load-curve point simulates (users scaling grows it with the load)."""
    n_boot: int = 1000
    """Window-bootstrap replicates of the node savings' confidence intervals."""
    ci_level: float = 0.95
    """Confidence level of those intervals."""
    seed: int = 0
    """Candidate draws, the fractional clone, routers' random choices, the bootstrap."""
    spill_dir: str | None = None
    """Folder for the planned trace's history tokens when scaling copies them (None: memory;
    see ``helm_plan.io.spill_array``). Never changes a result."""

    def __post_init__(self) -> None:
        if not self.gpus:
            raise ConfigError("plan needs at least one GPU", hint="pass --gpus a100-80g,...")
        if self.latency is not None and len(self.gpus) > 1:
            raise ConfigError(
                f"one latency profile for {len(self.gpus)} GPUs",
                hint="drop --latency (each GPU uses its shipped profile) or plan one GPU",
            )
        if self.slo_ms is not None:
            require_positive("slo_ms", self.slo_ms)
        require_attainment(self.attainment)
        if not self.routers:
            raise ConfigError("plan needs at least one router", hint="pass --routers jsq,helm")
        for r in (*self.routers, self.baseline_router):
            get_router(r)
        if self.policies is not None and not self.policies:
            raise ConfigError("plan needs at least one policy", hint="pass --policies best-static")
        if self.peak_qps is not None and self.scale is not None:
            raise ConfigError("give --peak-qps or --scale, not both", hint="drop one of the two")
        if self.peak_qps is not None:
            require_positive("peak_qps", self.peak_qps)
        if self.scale is not None:
            require_positive("scale", self.scale)
        if self.scale_by not in set(ScaleBy):
            raise ConfigError(f"unknown scaling {self.scale_by!r}", hint="use users or time")
        require_int("max_nodes", self.max_nodes, 1)
        require_at_most("max_nodes", self.max_nodes, MAX_NODES, NODES_REASON)
        for gpu, usd in self.cost_per_hour:
            if not (usd >= 0 and math.isfinite(usd)):
                raise ConfigError(
                    f"cost_per_hour for {gpu} must be finite and >= 0, got {usd}",
                    hint="pass --cost-per-hour GPU=USD with a price in dollars",
                )
        require_int("load_refine_steps", self.load_refine_steps, 0, 30)
        require_int("headroom_steps", self.headroom_steps, 0, 30)
        require_int("load_max_requests", self.load_max_requests, 1)
        require_int("n_boot", self.n_boot, 10)
        require_range("ci_level", self.ci_level, 0.0, 1.0)
        require_int("seed", self.seed, 0)

    @property
    def price_overrides(self) -> dict[str, float]:
        """cost_per_hour as a dict."""
        return dict(self.cost_per_hour)
