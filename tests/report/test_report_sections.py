"""The section registry: one module per section (its title and place with it), the protocol."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from fake_run import make_fleet_run, make_run

import helm_plan
from helm_plan.errors import ConfigError
from helm_plan.report import html as report_html
from helm_plan.report import sections
from helm_plan.report.page import Page
from helm_plan.report.sections import SECTIONS

PAGE_ORDER = ("summary", "capacity", "routing", "workload", "curves", "latency", "oracle",
              "policies", "controller", "sensitivity", "reproducibility")  # fmt: skip


def _figures(page: str) -> dict:
    m = re.search(r'id="helm-figures">(.*?)</script>', page, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_every_section_module_is_registered_once_in_page_order():
    modules = {m.name for m in pkgutil.iter_modules(sections.__path__)}
    assert [s.key for s in SECTIONS] == list(PAGE_ORDER)
    assert set(PAGE_ORDER) == modules  # no module left out of the registry, none missing
    for s in SECTIONS:  # a section's render lives in the module named by its key
        assert s.render.__module__ == f"helm_plan.report.sections.{s.key}"
    assert len({s.title for s in SECTIONS}) == len(SECTIONS)


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.key)
def test_each_section_renders_its_own_figures_on_the_fleet_run(section):
    figs: dict = {}
    body = section.render(make_fleet_run(), Page(section.key, figs))
    assert isinstance(body, str) and body
    divs = re.findall(r'<div class="plot" id="([^"]+)"', body)
    assert divs == sorted(figs) and all(d.startswith(f"fig-{section.key}-") for d in divs)
    assert "<section" not in body  # the page wraps it


def test_a_section_returning_none_is_left_out_with_its_toc_entry():
    plain = report_html.render(make_run())  # no plan, no controller
    fleet = report_html.render(make_fleet_run())
    for key in ("capacity", "routing", "controller"):
        assert f'id="{key}"' not in plain and f'href="#{key}"' not in plain
        assert f'<section id="{key}">' in fleet and f'href="#{key}"' in fleet
    got = re.findall(r'<section id="([^"]+)"><h2>([^<]+)</h2>', fleet)
    assert got == [(s.key, s.title) for s in SECTIONS]
    toc = re.findall(r'<li><a href="#([^"]+)">([^<]+)</a></li>', fleet)
    assert toc == got


def _extra_module(name: str, order: int) -> types.ModuleType:
    """A section module as a new file would define it: TITLE, ORDER and render."""

    def render(run, page):
        from helm_plan.report.sections.policies import policy_p99

        return "<p>extra</p>" + page.figure(policy_p99(run))

    m = types.ModuleType(f"helm_plan.report.sections.{name}")
    m.TITLE, m.ORDER, m.render = "Extra checks", order, render
    return m


def test_adding_a_section_is_one_new_module(monkeypatch):
    """A module with TITLE, ORDER and render is all the page needs: its key is its name and
    its ORDER places it (15: between Summary's 10 and Capacity's 20)."""
    mods = [importlib.import_module(f"helm_plan.report.sections.{s.key}") for s in SECTIONS]
    got = sections.collect([*mods, _extra_module("extra", 15)])
    assert [s.key for s in got] == ["summary", "extra", *PAGE_ORDER[1:]]
    monkeypatch.setattr(report_html, "SECTIONS", got)
    page = report_html.render(make_run())
    assert '<section id="extra"><h2>Extra checks</h2><p>extra</p>' in page
    assert page.index('id="summary"') < page.index('id="extra"') < page.index('id="workload"')
    assert '<li><a href="#extra">Extra checks</a></li>' in page
    assert "fig-extra-0" in _figures(page)


def test_the_package_finds_a_new_section_file(tmp_path):
    """Discovery, end to end: a file dropped into a copy of the package is on the page."""
    pkg = tmp_path / "helm_plan"
    shutil.copytree(Path(helm_plan.__file__).parent, pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (pkg / "report" / "sections" / "zz_extra.py").write_text(
        'TITLE = "Extra checks"\nORDER = 105\n\n\ndef render(run, page):\n    return "<p>x</p>"\n'
    )
    code = "from helm_plan.report.sections import SECTIONS; print([s.key for s in SECTIONS])"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([*PAGE_ORDER[:-1], "zz_extra", PAGE_ORDER[-1]])


def test_two_sections_at_one_place_are_refused():
    with pytest.raises(ConfigError, match="share an ORDER: .*a, .*b"):
        sections.collect([_extra_module("a", 5), _extra_module("b", 5)])


def test_section_record_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SECTIONS[0].title = "x"  # type: ignore[misc]
