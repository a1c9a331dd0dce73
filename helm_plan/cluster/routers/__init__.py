"""Request routers: a registry where adding a router is one new module of this package.

:mod:`.base` holds what every router shares (the :class:`Router` base, the
registry :data:`ROUTERS`, the :class:`RouteView` a rule reads, the compiled
helpers); every other module is one router, its class and its rule together,
and is imported here, so dropping a file into this package registers it with
no other edit (the CLI's choices, the report's colours and the kernel's
dispatch all read the registry).
"""

from __future__ import annotations

import importlib
import pkgutil

from helm_plan.cluster.routers.base import (
    DYNAMO_BLOCK_TOKENS,
    ROUTERS,
    Request,
    Router,
    RouteView,
    build_ring,
    compiled_rule,
    get_router,
    register_router,
    router_seed,
)

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = [
    "DYNAMO_BLOCK_TOKENS",
    "ROUTERS",
    "Request",
    "RouteView",
    "Router",
    "build_ring",
    "compiled_rule",
    "get_router",
    "register_router",
    "router_seed",
]
