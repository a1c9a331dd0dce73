"""Node simulation: the steppable node, the closed-loop policy protocol, batching, refill, metrics.

- :class:`NodeRunner` (:mod:`.step`) serves one window at a time from carried
  caches, queue backlog and refill; :func:`simulate_node` drives it with a
  :class:`Policy` over the whole trace;
- :func:`evaluate_span` (:mod:`.span`) is the cold-start what-if of the
  window-mode oracle;
- :mod:`.metrics` defines every latency and hit-rate figure once.

The oracle, the named-policy catalogue (:mod:`helm_plan.policies`), the
controller and the cluster sit above this package.
"""

from __future__ import annotations

from helm_plan.sim.config import DEFAULT_WINDOW_S, NodeConfig
from helm_plan.sim.context import NodeContext, load_context, prepare_context
from helm_plan.sim.node import NodeResult, collect, simulate_node
from helm_plan.sim.policy import Observation, Policy, SchedulePolicy, StaticPolicy, fill_forward
from helm_plan.sim.refill import (
    REFILL_MODES,
    Refill,
    RefillMode,
    RefillPlan,
    get_refill,
    register_refill,
)
from helm_plan.sim.span import SpanEval, evaluate_span, replay_span
from helm_plan.sim.step import NodeRunner, WindowResult

__all__ = [
    "DEFAULT_WINDOW_S",
    "REFILL_MODES",
    "NodeConfig",
    "NodeContext",
    "NodeResult",
    "NodeRunner",
    "Observation",
    "Policy",
    "Refill",
    "RefillMode",
    "RefillPlan",
    "SchedulePolicy",
    "SpanEval",
    "StaticPolicy",
    "WindowResult",
    "collect",
    "evaluate_span",
    "fill_forward",
    "get_refill",
    "load_context",
    "prepare_context",
    "register_refill",
    "replay_span",
    "simulate_node",
]
