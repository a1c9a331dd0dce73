"""Controller: the shipped controller against the oracle and best static.

Its figures and summary live in :mod:`helm_plan.report.controller` (also
read by summary.json); the section is left out when analyze ran no controller.
"""

from __future__ import annotations

from helm_plan.report.controller import controller_body, controller_summary
from helm_plan.report.page import Page
from helm_plan.report.store import RunData

TITLE = "Controller"
ORDER = 90


def render(run: RunData, page: Page) -> str | None:
    """The controller's figures and table, or None when analyze ran no controller."""
    return None if controller_summary(run) is None else controller_body(run, page)
