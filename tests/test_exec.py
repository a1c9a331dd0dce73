"""The executor seam: item order, shared inputs sent once, errors named by task."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helm_plan import exec as executors
from helm_plan.errors import ConfigError, HelmPlanError
from helm_plan.exec import blocks, counters


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


def _count_work(shared, x):
    counters.add({"test-work": {"units": x, "calls": 1}})
    return os.getpid()


@pytest.mark.parametrize("workers", [1, 2])
def test_work_counted_in_workers_comes_back_to_the_driver(workers):
    work = counters.counter("test-work", "units", "calls")
    before = dict(work)
    pids = executors.local(workers).map(_count_work, list(range(10)), shared=None)
    assert (os.getpid() not in pids) == (workers == 2)  # the counting did happen elsewhere
    assert work["units"] - before["units"] == sum(range(10))
    assert work["calls"] - before["calls"] == 10


def test_counted_returns_only_what_the_call_added():
    counters.add({"test-other": {"n": 5}})  # before the call: not in its increments
    got, inc = counters.counted(_count_work, None, 3)
    assert got == os.getpid() and inc == {"test-work": {"units": 3, "calls": 1}}
    assert counters.counted(lambda a, b: a + b, 1, 2) == (3, {})


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


def _ids(shared, x):
    big, small = shared
    return os.getpid(), id(big), small["v"], x


def test_pool_persists_inside_with_and_big_inputs_ship_once():
    # A tuple ``shared`` is published element by element: the same big object mapped
    # again with a new small part reaches each worker once (one unpickled copy per
    # worker across all maps), while the small part changes with every map.
    big = list(range(50_000))
    seen: dict[int, set[int]] = {}
    with executors.local(2) as ex:
        for v in range(4):
            got = ex.map(_ids, list(range(6)), shared=(big, {"v": v}))
            assert [g[2] for g in got] == [v] * 6 and [g[3] for g in got] == list(range(6))
            for pid, ident, _, _ in got:
                seen.setdefault(pid, set()).add(ident)
            names = [ref[1] for _, ref, _ in ex._published.values()]
        # the pool outlives the maps (no process start-up per map): at most two workers
        assert 1 <= len(seen) <= 2
        assert all(len(ids) == 1 for ids in seen.values())
    # leaving the block frees every shared-memory block it published
    assert names and not any(os.path.exists(f"/dev/shm/{n.lstrip('/')}") for n in names)
    assert ex._pool is None and not ex._published


def test_pool_outside_with_is_stopped_after_each_map():
    ex = executors.local(2)
    assert ex.map(_square_plus, [1, 2, 3], shared={"offset": 0}) == [1, 4, 9]
    assert ex._pool is None and not ex._published


def _span(shared, x):
    import time

    t0 = time.monotonic()
    time.sleep(0.2)
    return t0, time.monotonic()


def test_trickle_keeps_one_task_in_flight_and_background_reraises():
    assert executors.SerialExecutor().trickle() is None
    assert executors.local(2).trickle() is None  # a pool living for one map lends nothing
    with executors.local(2) as ex:
        spans = ex.trickle().map(_span, list(range(4)))
        # one at a time: each task starts after the previous one ended
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:], strict=False))
        job = executors.background(ex, lambda view: view.map(_fail_on_3, [1, 3]), "test")
        with pytest.raises(executors.TaskError, match="task 1 failed: ValueError: boom"):
            job.result()
        ok = executors.background(
            ex, lambda view: view.map(_square_plus, [2], shared={"offset": 1}), "t"
        )
        assert ok.result() == [5]


_ORPHAN = """
import os, signal, sys
from helm_plan import exec as executors
from helm_plan.exec import blocks, counters

def pid(shared, x):
    return os.getpid()

if __name__ == "__main__":
    with executors.local(2) as ex:
        pids = sorted(set(ex.map(pid, list(range(8)))))
        print(" ".join(map(str, pids)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the driver dies without shutting the pool
"""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its (gone) parent is dead
        return f.read().split()[2] != "Z"


def test_workers_exit_when_the_driver_is_killed(tmp_path):
    import subprocess
    import sys
    import time

    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN)
    import helm_plan

    # the script imports this checkout's helm_plan, as the tests do
    env = {**os.environ, "PYTHONPATH": str(Path(helm_plan.__file__).parents[1])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=env)  # fmt: skip
    assert out.returncode == -9, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert pids
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "pool workers outlived the killed driver"


def _describe(shared, x):
    import numpy as np

    arrays, big = shared
    out = []
    for a in arrays:
        base = a.base
        while isinstance(base, np.ndarray):
            base = base.base
        holder = type(getattr(base, "obj", base)).__name__
        out.append((a.tobytes(), str(a.dtype), a.shape, a.flags.writeable, holder,
                    a.ctypes.data % 64))  # fmt: skip
    return out, _private_kib(), int(big.sum(dtype=np.int64)), _private_kib()


def _private_kib():
    with open("/proc/self/smaps_rollup") as f:
        rows = dict(line.split()[:2] for line in f if line.startswith("Private_"))
    return sum(int(v) for v in rows.values())


def test_shared_arrays_are_views_of_one_block_not_copies():
    import numpy as np

    rng = np.random.default_rng(5)
    c = rng.integers(0, 1 << 40, 1001)
    ro = np.arange(7, dtype=np.int32)
    ro.flags.writeable = False
    arrays = [c, np.asfortranarray(rng.random((5, 3))), ro, c[::3], np.zeros(0, np.int8),
              np.array([True, False, True])]  # fmt: skip
    big = np.ones(32 << 20, np.uint8)  # 32 MiB, summed (every page read) in the worker
    with executors.local(2) as ex:
        got = ex.map(_describe, [0, 1], shared=(arrays, big))
    for desc, before, total, after in got:
        for a, (raw, dtype, shape, writeable, holder, align) in zip(arrays, desc, strict=True):
            assert (raw, dtype, shape) == (a.tobytes(), str(a.dtype), a.shape)
            assert writeable == a.flags.writeable  # a read-only array stays read-only
            if a.flags.forc:
                # contiguous arrays are views of the mapped block, aligned for numba
                assert holder == "mmap" and (align == 0 or not a.size)
            else:  # a strided view travels inside the pickle (a copy of its elements)
                assert holder != "mmap"
        assert total == big.size
        # reading the 32 MiB array added no private pages: the worker maps the driver's copy
        assert after - before < 4 << 10, (before, after)


def _token_sum(shared, x):
    return int(shared.sum())


_KEPT: list = []


def _keep_sum(shared, x):
    _KEPT.append(shared)  # outlives the worker's cache entry: its block cannot close yet
    return int(shared.sum())


def test_evicted_blocks_are_unmapped_and_results_stay_right():
    import numpy as np

    # more distinct shared arrays than a worker caches: the oldest are evicted (and their
    # blocks closed) while later maps still read the right data
    for fn in (_token_sum, _keep_sum):
        with executors.local(2) as ex:
            for k in range(12):
                arr = np.full(1000, k, dtype=np.int64)
                assert ex.map(fn, [0, 1, 2], shared=arr) == [1000 * k] * 3


def test_too_little_shared_memory_is_a_clear_error_not_a_bus_error(monkeypatch):
    import numpy as np

    # a tmpfs smaller than the block would let the block be created and then kill the
    # driver with SIGBUS on the first write past its room (Docker's default is 64 MiB)
    monkeypatch.setattr(blocks, "shm_free", lambda: 1 << 20)
    ex = executors.local(2)
    with pytest.raises(executors.ExecutorError) as e:
        ex.map(_token_sum, [0, 1], shared=np.ones(1 << 19, np.int64))  # 4 MiB
    assert e.value.one_line() == (
        "the workers' shared inputs need 4 MiB of shared memory but /dev/shm has 1 MiB free; "
        "run with --workers 1, or give the machine more shared memory (docker run --shm-size=8g)"
    )
    assert ex._pool is None and not ex._published
    # with room (a block of its exact size fits) the same map runs
    monkeypatch.setattr(blocks, "shm_free", lambda: (1 << 22) + 4096)
    assert ex.map(_token_sum, [0, 1], shared=np.ones(1 << 19, np.int64)) == [1 << 19] * 2


def _first(shared, x):
    return int(shared["a"][x])


def test_share_hands_the_driver_a_view_of_the_published_block():
    import numpy as np

    obj = {"a": np.arange(1 << 20, dtype=np.int64), "name": "trace"}
    assert executors.SerialExecutor().share(obj) is obj
    assert executors.local(2).share(obj) is obj  # a pool for one map frees its blocks after it
    with executors.local(2) as ex:
        view = ex.share(obj)
        assert view is not obj and view["name"] == "trace"
        assert ex.share(view) is view  # a view is shared already: no second view or block
        np.testing.assert_array_equal(view["a"], obj["a"])
        assert view["a"].ctypes.data % 64 == 0
        blocks = [ref[1] for _, ref, _ in ex._published.values()]
        assert len(blocks) == 1  # the driver holds no private copy: the block is remembered
        # by the view, and ``obj`` (no longer referenced by the executor) can be freed
        assert all(o is not obj for o, _, _ in ex._published.values())
        # one copy: what the driver writes into the view, the workers read (no republish)
        view["a"][:3] = [7, 8, 9]
        assert ex.map(_first, [0, 1, 2], shared=view) == [7, 8, 9]
        assert ex.map(_first, [2], shared=view) == [9]
        assert [ref[1] for _, ref, _ in ex._published.values()] == blocks
        # a view is never evicted by later publications while the pool lives
        for k in range(12):
            assert ex.map(_token_sum, [0, 1], shared=np.full(10, k)) == [10 * k] * 2
        assert blocks[0] in [ref[1] for _, ref, _ in ex._published.values()]
    # closing unlinks the block, yet the driver's view (its own mapping) still reads
    assert not os.path.exists(f"/dev/shm/{blocks[0].lstrip('/')}")
    assert int(view["a"][:4].sum()) == 7 + 8 + 9 + 3


def test_share_keeps_the_object_where_shared_memory_is_short(monkeypatch):
    import numpy as np

    monkeypatch.setattr(blocks, "shm_free", lambda: 1 << 20)
    obj = np.ones(1 << 19, np.int64)
    with executors.local(2) as ex:
        assert ex.share(obj) is obj and not ex._published and not ex._pinned
        with pytest.raises(executors.ExecutorError, match="shared memory"):  # as before
            ex.map(_token_sum, [0, 1], shared=obj)


def _sums(shared, x):
    return [int(a.sum()) for a in shared["arrays"]], [int(a[0]) for a in shared["arrays"]]


def test_a_view_s_arrays_are_referenced_by_later_publications_not_copied():
    import numpy as np

    obj = {"a": np.arange(1 << 20, dtype=np.int64)}
    with executors.local(2) as ex:
        view = ex.share(obj)
        (view_block,) = [ref[1] for _, ref, _ in ex._published.values()]
        # an object built over the view (a scaled trace keeps the trace's token arrays):
        # the view's array and a slice of it are spans of the view's block, only the new
        # array is copied
        own = np.full(10, 3, np.int64)
        derived = {"arrays": [view["a"], view["a"][1000:2000], own]}
        got = ex.map(_sums, [0, 1], shared=derived)
        a = np.arange(1 << 20, dtype=np.int64)
        assert got == [([int(a.sum()), int(a[1000:2000].sum()), 30], [0, 1000, 3])] * 2
        _, ref, block = ex._published[id(derived)]
        assert [(s, o, n) for s, o, n in ref[3][:2]] == [(view_block, ref[3][0][1], 8 << 20),
                                                         (view_block, ref[3][0][1] + 8000, 8000)]  # fmt: skip
        assert ref[3][2][0] == "" and block.size < 1 << 12  # the pickle and ten int64s
        # the workers read the view's block itself: a write by the driver shows through
        view["a"][1000] = -5
        again = {"arrays": [view["a"][1000:2000]]}
        assert ex.map(_sums, [0, 1], shared=again)[0][1] == [-5]
    assert int(view["a"][999]) == 999  # the driver's view outlives the pool
