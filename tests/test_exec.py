"""The executor seam: item order, shared inputs sent once, errors named by task."""

from __future__ import annotations

import os

import pytest

from helm_plan import exec as executors
from helm_plan.errors import ConfigError, HelmPlanError


def _square_plus(shared, x):
    return x * x + shared["offset"]


def _pid(shared, x):
    return os.getpid(), id(shared)


def _fail_on_3(shared, x):
    if x == 3:
        raise ValueError("boom")
    if x == 4:
        raise ConfigError("bad value 4", hint="use another")
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_results_in_item_order_and_progress(workers):
    seen = []
    ex = executors.local(workers)
    got = ex.map(_square_plus, list(range(7)), shared={"offset": 1},
                 progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert got == [x * x + 1 for x in range(7)]
    assert seen[0] == (0, 7) and seen[-1] == (7, 7)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_process_pool_sends_shared_once_per_worker():
    got = executors.local(2).map(_pid, list(range(12)), shared=list(range(1000)))
    pids = {p for p, _ in got}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    # one unpickled copy per worker process: every task of a worker sees the same object
    by_pid = {}
    for p, ident in got:
        by_pid.setdefault(p, set()).add(ident)
    assert all(len(ids) == 1 for ids in by_pid.values())


@pytest.mark.parametrize("workers", [1, 2])
def test_failures_name_the_task(workers):
    ex = executors.local(workers)
    with pytest.raises(executors.TaskError, match=r"item 3 failed: ValueError: boom"):
        ex.map(_fail_on_3, [0, 1, 2, 3], label=lambda x: f"item {x}")
    with pytest.raises(ConfigError) as e:
        ex.map(_fail_on_3, [4], label=lambda x: f"item {x}")
    assert e.value.one_line() == "item 4: bad value 4; use another"
    assert isinstance(e.value, HelmPlanError)


def test_worker_count_validation():
    assert isinstance(executors.local(1), executors.SerialExecutor)
    assert isinstance(executors.local(0), executors.Executor)
    with pytest.raises(ConfigError, match="workers must be an integer >= 0, got -1"):
        executors.local(-1)
