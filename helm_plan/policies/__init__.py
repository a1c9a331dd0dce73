"""The named-policy catalogue: every policy spec a user can type, parsed in one place.

``simulate --policy``, ``analyze``, ``cluster`` and ``plan`` parse specs here; each spec
builds a closed-loop :class:`helm_plan.sim.policy.Policy` for a prepared trace, possibly after
a search (best static) or from oracle labels. A small registry, like Vidur's schedulers:
a policy is one class that calls :func:`register_policy`, in its own module of
:mod:`helm_plan.policies.specs` (every module there is imported, so a new policy is one new
file). The class carries every fact the rest of the tool needs about its name
(:class:`PolicyFacts`: kind, colour, display order, the runs it is a default of) and the
other spellings it answers to (``aliases``: the parser maps them to the name, every output
spells the name); analyze, plan, the report's colours and the CLI's usage text read them
from here.

The specs, in display order, each with the first paragraph of its class's docstring (this
list is made from the registry when the package is imported; :func:`catalogue`):
"""

from __future__ import annotations

import inspect

import helm_plan.policies.specs  # noqa: F401  (imports every spec module: registers the specs)
from helm_plan.policies.registry import (
    ALIASES,
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
    canonical,
    default_policies,
    is_static,
    parse_policy,
    register_facts,
    register_policy,
    usage,
)

__all__ = [
    "ALIASES",
    "DEFAULTS_OF",
    "FLEET_STATIC",
    "KINDS",
    "POLICIES",
    "POLICY_FACTS",
    "Built",
    "PolicyEnv",
    "PolicyFacts",
    "PolicySpec",
    "baseline_policy",
    "canonical",
    "catalogue",
    "default_policies",
    "is_static",
    "parse_policy",
    "register_facts",
    "register_policy",
    "usage",
]


def catalogue() -> str:
    """One line a registered spec, in display order: ``- ``usage``: what it does.``"""
    lines = []
    for name in sorted(POLICIES, key=lambda n: POLICY_FACTS[n].order):
        cls = POLICIES[name]
        what = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
        lines.append(f"- ``{cls.usage or name}``: {what}")
    return "\n".join(lines)


def __getattr__(name: str) -> type[PolicySpec]:
    """A spec class by its class name (``from helm_plan.policies import ControllerSpec``), for
    code written before the specs had a module each: no list of them is kept here."""
    for cls in POLICIES.values():
        if cls.__name__ == name:
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __doc__ is not None:  # python -OO drops docstrings
    __doc__ += "\n" + catalogue() + "\n"
