"""The shipped policy specs, one module each (named after its spec, ``-`` spelled ``_``).

Every public module of this package is imported here, in name order, and registers its spec
with :func:`helm_plan.policies.register_policy`: a new policy is one new module in this folder
(and its test), and no list elsewhere names it. Modules whose name starts with ``_`` hold
pieces several specs share (:mod:`helm_plan.policies.specs._fixed`) and register nothing.
Where a policy shows up (tables, charts, default lists, the usage text) follows its spec's
``order``, never the import order.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

__all__ = ["MODULES"]

MODULES: tuple[ModuleType, ...] = tuple(
    importlib.import_module(f"{__name__}.{m.name}")
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
    if not m.name.startswith("_")
)
"""The spec modules, imported (so registered) in name order."""
