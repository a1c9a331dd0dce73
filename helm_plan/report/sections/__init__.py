"""The report's sections, one module each; the package finds them.

A section is a module here with ``TITLE`` (its heading and table-of-contents
entry), ``ORDER`` (its place on the page, lowest first) and
``render(run, page) -> str | None`` (:class:`~helm_plan.report.page.Section`);
its key (anchor and figure ids) is the module's name. :data:`SECTIONS` is
built from the modules, so adding a section is one new module and its test.
Modules whose name starts with ``_`` are helpers, not sections.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from helm_plan.errors import ConfigError
from helm_plan.report.page import Section


def collect(modules: Iterable[ModuleType]) -> tuple[Section, ...]:
    """The sections of ``modules`` in page order; two sections at one place are refused
    (the page's order would then depend on file names)."""
    found = sorted(modules, key=lambda m: m.ORDER)
    orders = [m.ORDER for m in found]
    if len(set(orders)) != len(orders):
        dup = sorted({m.__name__ for m in found if orders.count(m.ORDER) > 1})
        raise ConfigError(f"report sections share an ORDER: {', '.join(dup)}",
                          hint="give each section module its own ORDER")  # fmt: skip
    return tuple(Section(m.__name__.rpartition(".")[2], m.TITLE, m.render) for m in found)


def _modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"{__name__}.{m.name}")
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_")
    ]


SECTIONS: tuple[Section, ...] = collect(_modules())
"""Every section, in page order (a section whose render returns None is left out)."""

__all__ = ["SECTIONS", "Section", "collect"]
