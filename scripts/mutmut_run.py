"""scripts/mutation.sh's helper: the mutmut CLI with a narrowed test selection, and the score.

``python scripts/mutmut_run.py run ...`` runs the mutmut CLI; mutmut reads its
test selection from ``[tool.mutmut]`` only, so a focused run on one module
(a few fast test files instead of the whole core selection) sets it from
``$MUTMUT_TESTS`` before the CLI starts (mutmut notices the changed
selection and re-collects its test-to-function map).

``python scripts/mutmut_run.py score GLOB`` reads ``mutmut results --all true``
on stdin and prints killed/total per module of the mutants matching ``GLOB``,
then every survivor.
"""

from __future__ import annotations

import collections
import fnmatch
import os
import sys

CAUGHT = ("killed",)
"""Only a failing test counts: a timeout may be a fork deadlock rather than a caught hang, so
timeouts are listed with the survivors, to be looked at."""


def score(pattern: str, lines: list[str]) -> None:
    by_mod: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    survivors = []
    for line in lines:
        name, _, status = line.strip().rpartition(": ")
        if not name or not fnmatch.fnmatch(name, pattern) or status == "not checked":
            continue
        by_mod[name.rsplit(".", 1)[0]][status] += 1
        if status not in CAUGHT:
            survivors.append(f"{name}: {status}")
    total: collections.Counter = collections.Counter()
    print(f"{'module':40} {'killed':>7} {'total':>6} {'score':>7}")
    for mod in sorted(by_mod):
        c = by_mod[mod]
        total.update(c)
        k, n = sum(c[s] for s in CAUGHT), sum(c.values())
        print(f"{mod:40} {k:7d} {n:6d} {100 * k / n:6.1f}%")
    k, n = sum(total[s] for s in CAUGHT), sum(total.values())
    if n:
        print(f"{'all':40} {k:7d} {n:6d} {100 * k / n:6.1f}%")
    print(f"\nsurviving mutants ({len(survivors)}; `mutmut show NAME` prints one):")
    print("\n".join(survivors) or "none")


if __name__ == "__main__":
    if sys.argv[1:2] == ["score"]:
        score(sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else "*", sys.stdin.readlines())
        sys.exit(0)
    from mutmut import configuration

    tests = os.environ.get("MUTMUT_TESTS", "").split()
    if tests:
        configuration.config().pytest_add_cli_args_test_selection = tests
    from mutmut.__main__ import cli

    sys.exit(cli())
