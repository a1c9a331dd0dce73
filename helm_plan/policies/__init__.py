"""The named-policy catalogue: every policy spec a user can type, parsed in one place.

``simulate --policy``, ``analyze`` and (next) the cluster and planner parse
specs here; each spec builds a closed-loop :class:`helm_plan.sim.policy.Policy`
for a prepared trace, possibly after a search (best static) or from oracle
labels. A small registry, like Vidur's schedulers: adding a policy is one
class with a ``name`` that calls :func:`register_policy`, in a module of this
package (every module here is imported, so a new policy is one new file). The class carries
every fact the rest of the tool needs about the name (:class:`PolicyFacts`:
kind, colour, display order, the runs it is a default of), and analyze, plan,
the report's colours and the CLI's usage text read them from here.

Specs:

- ``static:R``: r = R in every window;
- ``emb-max``: r = 1 (the whole pool to EMB);
- ``kv-max``: r = 0 (the whole pool to KV);
- ``best-static``: the single r minimising whole-trace P99
  (:func:`helm_plan.oracle.best_static`);
- ``schedule:FILE``: per-window ``r_star`` from an oracle labels parquet;
  windows without requests keep the previous window's ratio;
- ``oracle``: the oracle schedule of this trace (the run's labels, or labelled
  now) at the node's refill mode;
- ``naive-adaptive``, ``adaptive``: the oracle schedule with ``eager`` and
  ``throttled`` refill (the naive and the HELM way to move the split);
- ``controller``, ``controller:PATH``: the controller (:mod:`helm_plan.controller`),
  the shipped default or a trained ``.npz``; its guard falls back to this
  run's best static ratio when the run has searched it (``PolicyEnv.best_static``),
  else to the best ratio of the node's own measured curve;
- ``hill-climb``: ghost-cache hill climbing, a fixed step of 0.05 toward the
  cache whose ghost gain saves more service time;
- ``threshold``, ``threshold:T``: the simple rule, to the measured curve's
  optimum (EMB hit gain = KV reuse gain per byte) when that saves more than
  ``T`` (default 0.005) of the window's busy time.
"""

from __future__ import annotations

import importlib
import pkgutil

from helm_plan.policies.registry import (
    DEFAULTS_OF,
    FLEET_STATIC,
    KINDS,
    POLICIES,
    POLICY_FACTS,
    Built,
    PolicyEnv,
    PolicyFacts,
    PolicySpec,
    baseline_policy,
    default_policies,
    is_static,
    parse_policy,
    register_facts,
    register_policy,
    usage,
)
from helm_plan.policies.specs import (
    Adaptive,
    BestStaticSpec,
    ControllerSpec,
    EmbMax,
    HillClimb,
    KvMax,
    NaiveAdaptive,
    OracleSchedule,
    Schedule,
    Static,
    Threshold,
)

# Every other module of this package is a policy file: importing it registers its specs
# (after the shipped ones, so the usage text keeps their order).
for _m in pkgutil.iter_modules(__path__):
    if _m.name not in ("registry", "specs"):
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = [
    "DEFAULTS_OF",
    "FLEET_STATIC",
    "KINDS",
    "POLICIES",
    "POLICY_FACTS",
    "Adaptive",
    "BestStaticSpec",
    "Built",
    "ControllerSpec",
    "EmbMax",
    "HillClimb",
    "KvMax",
    "NaiveAdaptive",
    "OracleSchedule",
    "PolicyEnv",
    "PolicyFacts",
    "PolicySpec",
    "Schedule",
    "Static",
    "Threshold",
    "baseline_policy",
    "default_policies",
    "is_static",
    "parse_policy",
    "register_facts",
    "register_policy",
    "usage",
]
