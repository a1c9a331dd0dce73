"""Node simulation: FIFO queue, cache reallocation with refill modes, ratio policies, sensitivity.

The oracle (per-window offline-optimal ratio, best static) lives in
:mod:`helm_plan.oracle`, built on :func:`evaluate_span` and :func:`simulate_node`.
"""

from __future__ import annotations

from helm_plan.sim.context import NodeContext, load_context, prepare_context
from helm_plan.sim.node import (
    DEFAULT_SLO_MS,
    DEFAULT_WINDOW_S,
    NodeConfig,
    NodeResult,
    simulate_node,
)
from helm_plan.sim.policies import POLICIES, Policy, PolicyKind, parse_policy, register_policy
from helm_plan.sim.queue import QueueResult, fifo, window_stats
from helm_plan.sim.refill import (
    REFILL_MODES,
    Refill,
    RefillMode,
    RefillPlan,
    get_refill,
    register_refill,
)
from helm_plan.sim.sensitivity import (
    AdaptivityCI,
    adaptivity_ci,
    flatness,
    ratio_distance,
    regret,
    sensitivity_table,
    window_regret,
)
from helm_plan.sim.span import SpanEval, evaluate_span

__all__ = [
    "DEFAULT_SLO_MS",
    "DEFAULT_WINDOW_S",
    "POLICIES",
    "REFILL_MODES",
    "AdaptivityCI",
    "NodeConfig",
    "NodeContext",
    "NodeResult",
    "Policy",
    "PolicyKind",
    "QueueResult",
    "Refill",
    "RefillMode",
    "RefillPlan",
    "SpanEval",
    "adaptivity_ci",
    "evaluate_span",
    "fifo",
    "flatness",
    "get_refill",
    "load_context",
    "parse_policy",
    "prepare_context",
    "ratio_distance",
    "register_policy",
    "register_refill",
    "regret",
    "sensitivity_table",
    "simulate_node",
    "window_regret",
    "window_stats",
]
