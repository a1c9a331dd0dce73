"""The carry oracle against the node simulator run on the labelled schedule.

The carry oracle's bookkeeping (oracle/carry.py) with a stand-in node: a made-up "P99"
that depends on the window, the ratio and the ratio the carried node ran at before, so a
brute-force walk (every grid ratio from the carried node, best kept, in order) gives the
schedule to expect. Pins: each window searched from the node the labels leave behind, the
search seed per window, prev_r, empty windows at the kept ratio, the first points mapped over
a multi-worker executor (and only then), r* never replayed, progress and the final run.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
from brute import coeff_latency
from conftest import small_table, spy_search_seeds

import helm_plan.oracle.carry as carry
from helm_plan import arrays as A
from helm_plan.errors import ConfigError
from helm_plan.exec.base import Executor
from helm_plan.oracle import OracleConfig, label_windows
from helm_plan.oracle.labels import grid_suffix
from helm_plan.oracle.search import first_points, rank_key
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, prepare_context, simulate_node


@pytest.fixture(scope="module")
def ctx():
    t = small_table(2400, n_users=150, n_items=4000, max_new=10, n_candidates=24, rate_qps=40.0)
    g, m = load_gpu("a100-80g"), load_model("gr-small")
    return prepare_context(A.from_table(t), g, m, coeff_latency(), pool_fraction=0.15)


def test_carry_labels_equal_simulate_node_on_the_schedule(ctx):
    ncfg = NodeConfig(slo_ms=1.0, window_s=10.0, refill="lazy", warmup_windows=0)
    ocfg = OracleConfig(grid_step=0.25, coarse_step=0.25, warmup="carry")
    lab = label_windows(ctx, ncfg, ocfg)
    r_star = lab.r_star
    n_w = len(r_star)
    assert n_w >= 5 and np.all(np.isfinite(r_star))
    np.testing.assert_array_equal(lab.table["warmup_start_s"].to_numpy(), np.zeros(n_w))
    for w in (0, 2, n_w - 1):
        for r in (0.0, 0.5, 1.0):
            sched = np.concatenate([r_star[:w], [r], np.full(n_w - w - 1, r)])
            res = simulate_node(ctx, sched, ncfg)
            want = res.windows["p99_ms"][w]
            got = lab.table[f"p99_ms_{grid_suffix(r)}"][w]
            assert got == pytest.approx(want, rel=1e-12), (w, r)
    # the oracle's own run on its schedule is simulate_node with lazy refill on it
    run = simulate_node(ctx, r_star, ncfg)
    np.testing.assert_array_equal(lab.schedule_run.sojourn_s, run.sojourn_s)
    assert lab.schedule_run.p99_ms == run.p99_ms
    # r* is the grid argmin of the carried P99 in every window
    grid = [0.0, 0.25, 0.5, 0.75, 1.0]
    p99 = np.stack([lab.table[f"p99_ms_{grid_suffix(r)}"].to_numpy() for r in grid], axis=1)
    np.testing.assert_allclose(lab.table["p99_ms"].to_numpy(), p99.min(axis=1))


def test_carry_is_deterministic_and_validated(ctx):
    ncfg = NodeConfig(slo_ms=1.0, window_s=10.0)
    ocfg = OracleConfig(trials=4, warmup="carry", seed=3)
    a = label_windows(ctx, ncfg, ocfg).table
    b = label_windows(ctx, ncfg, ocfg).table
    assert a.equals(b)
    with pytest.raises(ConfigError, match="unknown warmup 'forever'"):
        OracleConfig(warmup="forever")


def test_a_local_pool_steps_the_forks_on_threads_with_the_same_labels_and_replays(ctx, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from helm_plan.cache import core
    from helm_plan.exec import local
    from helm_plan.oracle import carry

    pools, groups = [], []

    class Recording(ThreadPoolExecutor):
        def __init__(self, n, **kw):
            pools.append(n)
            super().__init__(n, **kw)

        def map(self, fn, rs):
            groups.append(len(rs))
            return super().map(fn, rs)

    monkeypatch.setattr(carry, "ThreadPoolExecutor", Recording)
    ncfg = NodeConfig(slo_ms=1.0, window_s=10.0)
    ocfg = OracleConfig(trials=6, trial_batch=2, seed=5)

    def run(executor):
        before = core.REPLAYED["requests"]
        lab = label_windows(ctx, ncfg, ocfg, executor=executor)
        return lab, core.REPLAYED["requests"] - before

    serial, n_serial = run(None)
    assert pools == [] and groups == []
    with local(2) as ex:
        threaded, n_threaded = run(ex)
    assert pools == [2]
    n_w = int((threaded.table["requests"].to_numpy() > 0).sum())
    assert n_w >= 5
    # per window: the first points as one group, then each batch of 2 new ratios (a single
    # new ratio is stepped in this thread)
    n_first = len(first_points(ocfg))
    assert groups.count(n_first) == n_w and set(groups) == {n_first, 2}
    assert threaded.table.equals(serial.table)
    np.testing.assert_array_equal(threaded.schedule_run.sojourn_s, serial.schedule_run.sojourn_s)
    # the fork that served r* carries on in this process: no window is replayed again
    assert n_threaded == n_serial


GRID = [0.0, 0.02, 0.25, 0.5, 0.75, 0.98, 1.0]  # coarse 0.5, grid 0.25, edge points
OCFG = OracleConfig(grid_step=0.25, coarse_step=0.5, seed=5)
NCFG = NodeConfig(window_s=1.0, refill="eager")
TARGET = [0.25, 0.75, 0.5, 0.0, 1.0]


def p99(w: int, r: float, prev: float) -> float:
    """Made-up P99: best near TARGET[w], plus a cost of moving from the carried ratio."""
    move = 0.0 if math.isnan(prev) else 0.3 * abs(r - prev)
    return 10.0 + (r - TARGET[w % len(TARGET)]) ** 2 + move


@dataclasses.dataclass
class Res:
    window: int
    r: float
    p99_ms: float
    slo_attainment: float = 1.0
    mean_ms: float = 1.0


class Ctx:
    def __init__(self, edges):
        self._edges = np.asarray(edges)
        self.asked = []

    def edges(self, window_s):
        self.asked.append(window_s)
        return self._edges


class FakeRunner:
    made: list = []
    steps = 0
    p99 = staticmethod(p99)

    def __init__(self, ctx, cfg):
        self.ctx, self.cfg = ctx, cfg
        self.edges = ctx.edges(cfg.window_s)
        self.n_windows = len(self.edges) - 1
        self.window = 0
        self.ratio = float("nan")
        self.history: list[float] = []
        FakeRunner.made.append(self)

    def fork(self):
        other = copy.copy(self)
        other.history = list(self.history)
        return other

    def step(self, r):
        assert self.ctx is not None, "a node stepped without its trace"
        FakeRunner.steps += 1
        res = Res(self.window, r, FakeRunner.p99(self.window, r, self.ratio))
        self.history.append(r)
        self.ratio = r
        self.window += 1
        return res


class Collected:
    def __init__(self, served, cfg):
        self.served, self.cfg = served, cfg

    def compact(self):
        return ("compact", self)


@pytest.fixture
def fake(monkeypatch):
    FakeRunner.made = []
    FakeRunner.steps = 0
    FakeRunner.p99 = staticmethod(p99)
    monkeypatch.setattr(carry, "NodeRunner", FakeRunner)
    monkeypatch.setattr(carry, "collect", Collected)
    return spy_search_seeds(monkeypatch, carry)


def _label_row(calls):
    def label_row(w, evals, full, prev_r):
        calls.append((w, dict(evals), dict(full), prev_r))
        r_star = min(evals, key=lambda r: rank_key(r, evals[r], prev_r))
        return {"window": w, "r_star": r_star, "p99_ms": evals[r_star][0]}

    return label_row


def _empty_row(w):
    return {"window": w, "r_star": float("nan"), "empty": True}


def _brute(edges):
    """Walk the windows in order: the best grid ratio from the carried ratio (ties: lower r,
    then nearer the carried one); an empty window keeps the ratio (0 before any)."""
    prev = float("nan")
    sched, bests = [], []
    for w in range(len(edges) - 1):
        if edges[w + 1] == edges[w]:
            r = 0.0 if math.isnan(prev) else prev
            sched.append(r)
            bests.append(None)
        else:
            vals = {r: p99(w, r, prev) for r in GRID}
            best = min(vals.values())
            ties = [r for r in GRID if vals[r] == best]
            r = min(ties, key=lambda x: (0.0 if math.isnan(prev) else abs(x - prev), x))
            sched.append(r)
            bests.append(best)
        prev = r
    return sched, bests


def _run(edges, executor=None, progress=None):
    calls = []
    ctx = Ctx(edges)
    rows, run = carry.carry_rows(ctx, NCFG, OCFG, _label_row(calls), _empty_row, progress,
                                 executor)  # fmt: skip
    return ctx, calls, rows, run


def test_carry_rows_follow_the_brute_force_walk(fake):
    edges = [0, 4, 9, 12, 20]
    seen = []
    ctx, calls, rows, run = _run(edges, progress=lambda d, t: seen.append((d, t)))
    sched, bests = _brute(edges)
    assert [row["r_star"] for row in rows] == sched
    assert [row["p99_ms"] for row in rows] == pytest.approx(bests, rel=1e-15)
    assert [row["window"] for row in rows] == [0, 1, 2, 3]
    # one node, made on the lazy-refill config; the served windows are the schedule's
    node = FakeRunner.made[0]
    assert len(FakeRunner.made) == 1 and node.cfg == dataclasses.replace(NCFG, refill="lazy")
    assert ctx.asked == [1.0]
    tag, col = run
    assert tag == "compact" and col.cfg.refill == "lazy"
    assert [(s.window, s.r) for s in col.served] == list(enumerate(sched))
    assert [s.p99_ms for s in col.served] == pytest.approx(bests, rel=1e-15)
    # every window searched once per grid ratio, r* never replayed
    assert FakeRunner.steps == len(GRID) * 4
    assert [len(c[1]) for c in calls] == [len(GRID)] * 4
    assert sorted(calls[2][2]) == GRID and calls[2][2][sched[2]] is col.served[2]
    # prev_r: None in window 0, then the ratio the node runs at
    assert [c[3] for c in calls] == [None, *sched[:-1]]
    # the search seed of window w is SeedSequence([seed, w])'s first word
    want = [int(np.random.SeedSequence([5, w]).generate_state(1)[0]) for w in range(4)]
    assert fake == want
    assert seen == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]


def test_carry_rows_empty_windows_keep_the_ratio(fake):
    edges = [0, 0, 5, 5, 5, 9]  # windows 0, 2 and 3 are empty
    _, calls, rows, run = _run(edges)
    sched, _ = _brute(edges)
    assert sched[0] == 0.0 and sched[2] == sched[3] == sched[1]
    assert [row.get("empty", False) for row in rows] == [True, False, True, True, False]
    assert [row["window"] for row in rows] == [0, 1, 2, 3, 4]
    assert [row["r_star"] for i, row in enumerate(rows) if i in (1, 4)] == [sched[1], sched[4]]
    _, col = run
    assert [(s.window, s.r) for s in col.served] == list(enumerate(sched))
    assert [c[0] for c in calls] == [1, 4]
    assert calls[0][3] == 0.0  # window 1's prev_r is the ratio window 0 ran at
    assert FakeRunner.steps == 2 * len(GRID) + 3
    assert fake == [int(np.random.SeedSequence([5, w]).generate_state(1)[0]) for w in (1, 4)]


def test_carry_rows_without_progress(fake):
    _, _, rows, _ = _run([0, 3, 6])
    assert len(rows) == 2


def test_keep_is_the_current_ratio_or_zero():
    node = FakeRunner(Ctx([0, 1]), NCFG)
    assert carry._keep(node) == 0.0
    node.ratio = 0.4
    assert carry._keep(node) == 0.4


class Recording(Executor):
    """In-process executor with a configurable worker count; records every map."""

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self.maps: list[dict] = []

    @property
    def workers(self) -> int:
        return self._workers

    def map(self, fn, items, *, shared=None, progress=None, label=None):
        self.maps.append({"items": list(items), "shared": shared, "label": label})
        # a worker gets a pickled copy of the shared objects
        return [fn(copy.deepcopy(shared), it) for it in items]


def test_first_points_are_mapped_over_a_multi_worker_executor(fake):
    edges = [0, 4, 9, 12, 20]
    ex = Recording(2)
    ctx, calls, rows, run = _run(edges, executor=ex)
    sched, bests = _brute(edges)
    assert [row["r_star"] for row in rows] == sched
    _, col = run
    assert [(s.window, s.r) for s in col.served] == list(enumerate(sched))
    assert [s.p99_ms for s in col.served] == pytest.approx(bests, rel=1e-15)
    assert len(ex.maps) == 4
    m = ex.maps[3]
    assert m["items"] == GRID
    assert m["label"](0.5) == "window 3 at r=0.5"
    sctx, detached = m["shared"]
    assert isinstance(sctx, Ctx) and detached.ctx is None and detached.window == 3
    # the workers' windows reach the label row: each grid point's result from the carried node
    for w in (0, 2):
        prev = float("nan") if w == 0 else sched[w - 1]
        assert sorted(calls[w][2]) == GRID
        assert all(calls[w][2][r].p99_ms == p99(w, r, prev) for r in GRID)
    # every grid point came from a worker: the carried node steps once more, to r*
    assert FakeRunner.steps == 4 * len(GRID) + 4
    assert FakeRunner.made[0].ctx is ctx  # the carried node keeps its trace
    assert [c[3] for c in calls] == [None, *sched[:-1]]


def test_a_one_worker_executor_is_not_used(fake):
    ex = Recording(1)
    _, _, rows, _ = _run([0, 4, 9], executor=ex)
    assert ex.maps == [] and FakeRunner.steps == 2 * len(GRID)
    assert [row["r_star"] for row in rows] == _brute([0, 4, 9])[0]


def test_step_task_steps_a_fork_and_leaves_the_detached_node(fake):
    ctx = Ctx([0, 2, 4])
    node = FakeRunner(ctx, NCFG)
    node.step(0.5)
    detached = copy.copy(node)
    detached.ctx = None
    res = carry._step_task((ctx, detached), 0.25)
    assert (res.window, res.r) == (1, 0.25)
    assert res.p99_ms == p99(1, 0.25, 0.5)
    assert detached.ctx is None and detached.window == 1 and detached.history == [0.5]


def test_a_tie_goes_to_the_ratio_the_node_runs_at_without_a_replay(fake):
    # window 0 is best at 1.0; window 1 is flat: every r ties, so r* stays at 1.0, which
    # the search also kept as its best fork (ranked with prev_r), so nothing is replayed
    FakeRunner.p99 = staticmethod(lambda w, r, prev: (r - 1.0) ** 2 if w == 0 else 10.0)
    _, calls, rows, run = _run([0, 3, 6])
    assert [row["r_star"] for row in rows] == [1.0, 1.0]
    assert calls[1][3] == 1.0
    assert FakeRunner.steps == 2 * len(GRID)
    assert [s.r for s in run[1].served] == [1.0, 1.0]


def test_the_thread_evaluator_names_its_threads_and_ends_cleanly_on_an_error():
    import contextlib
    import threading
    import time

    started, finished, names = [], [], set()

    def objective(r):
        started.append(r)
        names.add(threading.current_thread().name)
        if r == 0.0:
            raise ValueError("boom")
        time.sleep(0.05)
        finished.append(r)
        return (r, 1.0, r)

    with contextlib.ExitStack() as stack:  # in order and named, without an error
        assert carry._threaded(2, stack)(objective, [0.1, 0.2, 0.3]) == [
            (r, 1.0, r) for r in (0.1, 0.2, 0.3)
        ]
    assert names and all(n.startswith("helm-plan trial") for n in names)
    started.clear(), finished.clear()
    rs = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    with pytest.raises(ValueError, match="boom"), contextlib.ExitStack() as stack:
        carry._threaded(2, stack)(objective, rs)
    # leaving the block waited for every step already running ...
    assert sorted(finished) == sorted(set(started) - {0.0})
    # ... and dropped the queued ones: they never start
    n = len(started)
    time.sleep(0.2)
    assert len(started) == n < len(rs)
