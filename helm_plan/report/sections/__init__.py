"""The report's sections: the one home of their order and titles.

Each section is a module here with ``render(run, page) -> str | None``
(:class:`~helm_plan.report.page.Section`); :data:`SECTIONS` lists them in
page order. Adding a section is one new module, its line below and its test.
"""

from __future__ import annotations

from helm_plan.report.page import Section
from helm_plan.report.sections import (
    capacity,
    controller,
    curves,
    latency,
    oracle,
    policies,
    reproducibility,
    routing,
    sensitivity,
    summary,
    workload,
)

SECTIONS: tuple[Section, ...] = (
    Section("summary", "Summary", summary.render),
    Section("capacity", "Capacity", capacity.render),
    Section("routing", "Routing", routing.render),
    Section("workload", "Workload", workload.render),
    Section("curves", "Cache curves", curves.render),
    Section("latency", "Latency model", latency.render),
    Section("oracle", "Oracle timeline", oracle.render),
    Section("policies", "Policies", policies.render),
    Section("controller", "Controller", controller.render),
    Section("sensitivity", "Sensitivity", sensitivity.render),
    Section("reproducibility", "Reproducibility", reproducibility.render),
)
"""Every section, in page order (a section whose render returns None is left out)."""

__all__ = ["SECTIONS", "Section"]
