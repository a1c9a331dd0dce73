"""Best static (oracle/static.py) with a stand-in for the node simulator: a whole-trace "run"
at ratio r is a made-up P99 curve, so the search, its memo, the flat band, the robust ratio,
the executor plumbing and the golden-section probes can be checked against figures worked
out by hand."""

from __future__ import annotations

import math
import threading
from unittest import mock

import numpy as np
import pytest

import helm_plan.oracle.static as st
from helm_plan.exec import SerialExecutor
from helm_plan.exec.base import Executor
from helm_plan.oracle.config import OracleConfig
from helm_plan.oracle.search import bracket
from helm_plan.sim.config import NodeConfig

NCFG = NodeConfig(window_s=1.0)


class Run:
    """A stand-in NodeResult: every figure a made-up function of r."""

    def __init__(self, r: float, p99: float, att: float = 1.0, mean: float = 0.0) -> None:
        self.r = r
        self.p99_ms = p99
        self.slo_attainment = att
        self.mean_ms = mean
        self.emb_hit_rate = r / 2
        self.kv_reuse_rate = 1 - r
        self.compacted = False

    def compact(self) -> Run:
        out = Run(self.r, self.p99_ms, self.slo_attainment, self.mean_ms)
        out.compacted = True
        return out


@pytest.fixture
def curve(monkeypatch):
    """Patch the node simulator with P99(r) = curve[0](r); record every call."""
    calls: list[tuple] = []
    box = {"f": lambda r: (r - 0.3) ** 2 + 1.0}

    def fake(ctx, ratios, ncfg):
        calls.append((ctx, ratios, ncfg))
        r = float(ratios[0])
        out = box["f"](r)
        return Run(r, *out) if isinstance(out, tuple) else Run(r, out)

    monkeypatch.setattr(st, "simulate_node", fake)
    return box, calls


class Recording(Executor):
    """Runs tasks in this process and records each map's arguments."""

    def __init__(self, view: Executor | None = None) -> None:
        self.maps: list[dict] = []
        self.view = view
        self.threads: list[str] = []

    @property
    def workers(self) -> int:
        return 2

    def trickle(self):
        return self.view

    def map(self, fn, items, *, shared=None, progress=None, label=None):
        self.maps.append(
            {"items": list(items), "shared": shared, "progress": progress, "label": label}
        )
        self.threads.append(threading.current_thread().name)
        return [fn(shared, it) for it in items]


def test_static_task_runs_the_whole_trace_at_one_ratio_and_compacts(curve):
    _, calls = curve
    ctx = object()
    res = st.static_task((ctx, NCFG), 0.25)
    assert res.compacted and res.r == 0.25 and res.p99_ms == (0.25 - 0.3) ** 2 + 1.0
    (c, ratios, ncfg), = calls  # fmt: skip
    assert c is ctx and ncfg is NCFG
    assert isinstance(ratios, np.ndarray) and ratios.tolist() == [0.25]


def test_static_runs_memo_rounds_sorts_dedups_and_maps_only_new_ratios(curve):
    _, calls = curve
    ex = Recording()
    ctx = object()
    memo = st.StaticRuns(ctx, NCFG, ex)
    seen = []
    got = memo.get([0.7, 0.1 + 0.2, 0.3, 0.7], progress=lambda d, t: seen.append((d, t)))
    # 0.1 + 0.2 = 0.30000000000000004 is the same key as 0.3
    assert [g.r for g in got] == [0.7, 0.3, 0.3, 0.7]
    assert len(ex.maps) == 1 and ex.maps[0]["items"] == [0.3, 0.7]
    assert ex.maps[0]["shared"][0] is ctx and ex.maps[0]["shared"][1] is NCFG
    assert ex.maps[0]["label"](0.3) == "static r=0.3"
    assert ex.maps[0]["progress"] is not None
    ex.maps[0]["progress"](1, 2)
    assert seen == [(1, 2)]
    assert sorted(memo.runs) == [0.3, 0.7] and memo.replays == 2
    # a second call maps only the new ratio; a call with nothing new maps nothing
    got = memo.get([0.3, 0.5])
    assert [g.r for g in got] == [0.3, 0.5] and ex.maps[1]["items"] == [0.5]
    assert ex.maps[1]["progress"] is None
    memo.get([0.5, 0.7])
    assert len(ex.maps) == 2 and memo.replays == 3 and len(calls) == 3


def test_static_runs_without_an_executor_runs_serially(curve):
    memo = st.StaticRuns(object(), NCFG)
    assert memo.executor is None and memo.runs == {}
    assert [g.r for g in memo.get([1.0, 0.0])] == [1.0, 0.0]
    assert memo.replays == 2


def _p99(r):
    # a flat band: 10 ms on [0.4, 0.6] exactly, 10.1 at 0.3 and 0.7 (within 2%), steep elsewhere
    table = {0.3: 10.1, 0.4: 10.0, 0.5: 10.0, 0.6: 10.0, 0.7: 10.1}
    return table.get(round(r, 9), 20.0 + abs(r - 0.5) * 100)


def test_best_static_on_a_grid_worked_by_hand(curve):
    box, calls = curve
    box["f"] = lambda r: (_p99(r), 0.9 if r < 0.45 else 0.8, r)
    ocfg = OracleConfig(grid_step=0.1, coarse_step=0.5)
    seen = []
    ctx = object()
    bs = st.best_static(ctx, NCFG, ocfg, progress=lambda d, t: seen.append((d, t)))
    assert all(c[0] is ctx and c[2] is NCFG for c in calls)
    # first points: the 0.1 grid, the 0.5 coarse grid and the edge points 0.02, 0.98
    rs = [0.0, 0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.98, 1.0]
    assert bs.evaluated["r"].to_list() == rs
    # P99 ties at 10 ms on 0.4, 0.5, 0.6; attainment breaks it: 0.4 has 0.9
    assert bs.ratio == 0.4 and bs.p99_ms == 10.0 and bs.slo_attainment == 0.9
    # flat band: P99 <= 10.2 -> [0.3, 0.7]
    assert (bs.flat_lo, bs.flat_hi) == (0.3, 0.7)
    assert bs.flatness == pytest.approx(0.4)
    assert bs.robust_ratio == 0.5  # the evaluated r nearest the middle (0.5) of the band
    assert bs.method == "grid 0.1"
    ev = bs.evaluated
    assert ev.columns == ["r", "p99_ms", "slo_attainment", "emb_hit_rate", "kv_reuse_rate"]
    assert ev["p99_ms"].to_list() == [_p99(r) for r in rs]
    assert ev["slo_attainment"].to_list() == [0.9 if r < 0.45 else 0.8 for r in rs]
    assert ev["emb_hit_rate"].to_list() == pytest.approx([r / 2 for r in rs])
    assert ev["kv_reuse_rate"].to_list() == pytest.approx([1 - r for r in rs])
    assert seen and seen[-1] == (13, 13)


def test_best_static_robust_ratio_tie_goes_to_the_lower_r(curve):
    box, _ = curve
    # band [0.25, 1.0] (middle 0.625): 0.5 and 0.75 are both exactly 0.125 from it; 0.5 wins
    flat = {0.25: 5.0, 0.5: 5.0, 0.75: 5.0, 1.0: 5.0}
    box["f"] = lambda r: flat.get(round(r, 9), 50.0)
    bs = st.best_static(object(), NCFG, OracleConfig(grid_step=0.25, coarse_step=0.5))
    assert (bs.flat_lo, bs.flat_hi) == (0.25, 1.0) and bs.ratio == 0.25
    assert bs.robust_ratio == 0.5


def test_best_static_robust_ratio_is_an_evaluated_ratio(curve):
    box, _ = curve
    # band [0.0, 0.3] (middle 0.15), evaluated inside: 0, 0.02, 0.1, 0.2, 0.3; 0.1 is the
    # nearest (|0.1 - 0.15| is 0.04999..., |0.2 - 0.15| is 0.05000...); 0.15 was never run
    box["f"] = lambda r: 1.0 if r <= 0.3 + 1e-9 else 9.0
    bs = st.best_static(object(), NCFG, OracleConfig(grid_step=0.1, coarse_step=0.5))
    assert bs.robust_ratio == 0.1 and bs.ratio == 0.0


def test_best_static_when_no_p99_is_finite(curve):
    box, _ = curve
    box["f"] = lambda r: (float("nan"), 0.0, float("nan"))
    bs = st.best_static(object(), NCFG, OracleConfig(grid_step=0.5, coarse_step=0.5))
    # every key ties: the smallest r is the argmin, the band is undefined, robust = argmin
    assert bs.ratio == 0.0 and math.isnan(bs.flat_lo) and math.isnan(bs.flat_hi)
    assert bs.robust_ratio == 0.0


def test_best_static_golden_uses_the_ratio_step_lattice(curve):
    box, _ = curve
    box["f"] = lambda r: (r - 0.37) ** 2
    bs = st.best_static(object(), NCFG, OracleConfig(coarse_step=0.5, ratio_step=0.1))
    assert bs.method == "golden"
    rs = bs.evaluated["r"].to_list()
    extra = sorted(set(rs) - {0.0, 0.02, 0.5, 0.98, 1.0})
    # every refinement probe is on the 0.1 lattice, and the best of it (0.4) was probed
    assert extra and all(abs(r * 10 - round(r * 10)) < 1e-9 for r in extra)
    assert bs.ratio == 0.4


def test_best_static_golden_without_a_ratio_step_uses_0_01(curve):
    box, _ = curve
    box["f"] = lambda r: (r - 0.37) ** 2
    bs = st.best_static(object(), NCFG, OracleConfig(coarse_step=0.5, ratio_step=None))
    assert bs.ratio == 0.37 and bs.method == "golden"


def test_best_static_maps_over_the_given_executor(curve):
    ex = Recording()
    bs = st.best_static(object(), NCFG, OracleConfig(grid_step=0.5, coarse_step=0.5), executor=ex)
    assert bs.ratio == 0.5 and len(ex.maps) == 1
    assert ex.maps[0]["items"] == [0.0, 0.02, 0.5, 0.98, 1.0]


def test_best_static_reuses_a_given_memo(curve):
    box, calls = curve
    memo = st.StaticRuns(object(), NCFG, SerialExecutor())
    ocfg = OracleConfig(grid_step=0.5, coarse_step=0.5)
    a = st.best_static(object(), NCFG, ocfg, runs=memo)
    n = len(calls)
    assert memo.replays == n == 5  # 0, 0.02, 0.5, 0.98, 1
    b = st.best_static(object(), NCFG, ocfg, runs=memo)
    assert len(calls) == n and a.ratio == b.ratio == 0.5
    assert calls[0][0] is memo.ctx  # the memo's trace, not the one passed


def test_background_static_without_a_spare_worker_runs_in_the_foreground(curve):
    ex = Recording(view=None)
    ctx = object()
    ocfg = OracleConfig(grid_step=0.1, coarse_step=0.5)
    bg = st.BackgroundStatic(ctx, NCFG, ocfg, ex)
    assert bg._job is None and bg.runs.ctx is ctx and bg.runs.node_cfg is NCFG
    later = SerialExecutor()
    best, runs = bg.result(later)
    assert best.ratio == 0.3 and runs is bg.runs and runs.executor is later
    assert runs.replays == 11  # analyze's search: no coarse grid, the validation grid's points
    assert ex.maps and ex.maps[0]["items"][0] == 0.0  # the memo ran on the given executor


def test_background_static_runs_on_the_trickle_view(curve):
    view = Recording()
    ex = Recording(view=view)
    ocfg = OracleConfig(grid_step=0.1, coarse_step=0.5)
    bg = st.BackgroundStatic(object(), NCFG, ocfg, ex)
    assert bg._job is not None
    best, runs = bg.result(None)
    assert best.ratio == 0.3 and best.method == "grid 0.1"
    assert runs.executor is None  # set to the executor given to result()
    assert view.maps and not ex.maps  # the search ran on the view only
    assert view.threads[0] == "helm-plan best static"


def test_refine_probes_worked_by_hand():
    calls = []

    def f(r):
        calls.append(r)
        return ((r - 0.3) ** 2, 1.0, 0.0)

    evals = {r: f(r) for r in (0.0, 0.5, 1.0)}
    calls.clear()
    st.refine(evals, f, 0.1)
    # best 0.5, gaps 0.5/0.5 -> left: 0.5 - 0.382·0.5 = 0.309 -> 0.3
    # best 0.3, gaps 0.3/0.2 -> left: 0.3 - 0.382·0.3 = 0.185 -> 0.2
    # best 0.3, gaps 0.1/0.2 -> right: 0.3 + 0.382·0.2 = 0.376 -> 0.4
    # best 0.3, gaps 0.1/0.1 -> 0.262 -> 0.3 (known); 0.3 ± 0.1 known -> stop
    assert calls == [0.3, 0.2, 0.4]
    assert sorted(evals) == [0.0, 0.2, 0.3, 0.4, 0.5, 1.0]


def test_refine_from_the_top_edge():
    calls = []

    def f(r):
        calls.append(r)
        return ((r - 0.8) ** 2, 1.0, 0.0)

    evals = {r: f(r) for r in (0.0, 0.4, 1.0)}
    calls.clear()
    st.refine(evals, f, 0.1)
    # best 1.0: left 0.4 (gap 0.6), right 1.0 (gap 0) -> 1.0 - 0.382·0.6 = 0.771 -> 0.8
    # best 0.8: gaps 0.4/0.2 -> 0.8 - 0.382·0.4 = 0.647 -> 0.6
    # best 0.8: gaps 0.2/0.2 -> 0.8 - 0.0764 = 0.724 -> 0.7
    # best 0.8: gaps 0.1/0.2 -> 0.8 + 0.0764 = 0.876 -> 0.9
    # best 0.8: gaps 0.1/0.1 -> 0.7236 -> 0.7 (known); 0.7 and 0.9 known -> stop
    assert calls == [0.8, 0.6, 0.7, 0.9]


def test_refine_falls_back_to_one_lattice_step():
    calls = []

    def f(r):
        calls.append(r)
        return (abs(r - 0.45), 1.0, 0.0)

    # best 0.4 between 0.3 and 0.6: the golden probe 0.4 + 0.382·0.2 = 0.476 -> 0.5 is new
    # then best 0.4 (0.05 vs 0.05 at 0.5: tie -> lower r), gaps 0.1/0.1 -> 0.3618 -> 0.4
    # (known), so one lattice step: 0.4 - 0.1 = 0.3 known? b - left = 0.1 is not > step,
    # so 0.4 + 0.1 = 0.5, known -> stop
    evals = {r: f(r) for r in (0.3, 0.4, 0.6)}
    calls.clear()
    st.refine(evals, f, 0.1)
    assert calls == [0.5]


def test_refine_one_step_fallback_to_the_left():
    calls = []

    def f(r):
        calls.append(r)
        return (abs(r - 0.5), 1.0, 0.0)

    # best 0.5 between 0.2 and 0.6: gaps 0.3/0.1 -> 0.5 - 0.382·0.3 = 0.385 -> 0.4
    # best 0.5: gaps 0.1/0.1 -> 0.462 -> 0.5 known; b - left = 0.1 not > 0.1 -> 0.6 known: stop
    evals = {r: f(r) for r in (0.2, 0.5, 0.6)}
    calls.clear()
    st.refine(evals, f, 0.1)
    assert calls == [0.4]


def test_refine_golden_probe_outside_the_bracket_falls_back():
    calls = []

    def f(r):
        calls.append(r)
        return (abs(r - 0.5), 1.0, 0.0)

    # best 0.5 between 0.4 and 0.8, step 0.25 lattice: golden 0.5 + 0.382·0.3 = 0.615 -> 0.5
    # (known) -> b - left = 0.1 is not > 0.25 -> 0.5 + 0.25 = 0.75, inside (0.4, 0.8): probe
    evals = {r: f(r) for r in (0.4, 0.5, 0.8)}
    calls.clear()
    st.refine(evals, f, 0.25)
    assert calls[0] == 0.75


def test_refine_one_step_to_the_left_when_the_golden_probe_leaves_the_bracket():
    calls = []

    def f(r):
        calls.append(r)
        return (abs(r - 0.98), 1.0, 0.0)

    # best 0.98 (off the 0.5 lattice) between 0.4 and 1.0: golden 0.98 - 0.382·0.58 = 0.758
    # snaps to 1.0, not inside (0.4, 1.0); b - left = 0.58 > 0.5, so one step left:
    # 0.48 -> 0.5, new: probe it. Then left 0.5: golden 0.797 -> 1.0 (outside), 0.48 is not
    # > 0.5, so one step right: 1.48 -> 1.5, outside: stop
    evals = {r: f(r) for r in (0.4, 0.98, 1.0)}
    calls.clear()
    st.refine(evals, f, 0.5)
    assert calls == [0.5]


def test_refine_from_the_bottom_edge():
    calls = []

    def f(r):
        calls.append(r)
        return ((r - 0.13) ** 2, 1.0, 0.0)

    # best 0.0 (the lowest evaluated r): left is 0.0 itself, right 0.6 -> 0.229 -> 0.2
    # best 0.2: gaps 0.2/0.4 -> right: 0.353 -> 0.4
    # best 0.2: gaps 0.2/0.2 -> left: 0.124 -> 0.1
    # best 0.1: gaps 0.1/0.1 -> 0.062 -> 0.1 (known); 0.1 - 0 is not > 0.1 -> 0.2 known: stop
    evals = {r: f(r) for r in (0.0, 0.6, 1.0)}
    calls.clear()
    st.refine(evals, f, 0.1)
    assert calls == [0.2, 0.4, 0.1]


def test_refine_one_step_right_when_the_left_gap_is_one_step():
    calls = []

    def f(r):
        calls.append(r)
        return (abs(r - 0.75), 1.0, 0.0)

    # best 0.7 between 0.6 and 0.82 (off the lattice): golden 0.7 + 0.382·0.12 = 0.746 -> 0.7
    # (known); the left gap is one step (not more), so one step right: 0.8, inside: probe
    evals = {r: f(r) for r in (0.6, 0.7, 0.82)}
    calls.clear()
    st.refine(evals, f, 0.1)
    assert calls == [0.8]


def test_static_runs_keys_are_rounded_to_nine_digits(curve):
    memo = st.StaticRuns(object(), NCFG)
    (got,) = memo.get([0.1234567891])
    assert list(memo.runs) == [0.123456789] and got.r == 0.123456789


def test_refine_snaps_to_nine_digits_below_a_nano_step():
    calls = []

    def f(r):
        calls.append(r)
        return (abs(r - 0.5), 1.0, 0.0)

    # best 0.5 between 0 and 1: 0.5 - 0.381966011·0.5 = 0.3090169944..., on the 1e-10
    # lattice, then rounded to 9 digits: 0.309016994
    evals = {r: f(r) for r in (0.0, 0.5, 1.0)}
    calls.clear()
    st.refine(evals, f, 1e-10)
    assert calls[0] == 0.309016994


def test_refine_one_step_left_needs_a_gap_above_step_plus_1e_12():
    def run(left):
        calls = []

        def f(r):
            calls.append(r)
            return (abs(r - 0.5), 1.0, 0.0)

        evals = {r: f(r) for r in (left, 0.5, 0.6)}
        calls.clear()
        st.refine(evals, f, 0.25)
        return calls

    # best 0.5, right 0.6: the golden probe into the left gap snaps back to 0.5 (known).
    # A left gap of 0.3 > 0.25 + 1e-12: one step left, 0.25, inside: probe it; then the
    # left gap is one step, one step right is 0.75, outside (0.6): stop
    assert run(0.2) == [0.25]
    # a left gap of exactly 0.25 + 1e-12 is not above it: one step right, 0.75, outside: stop
    left = 0.5 - (0.25 + 1e-12)
    assert 0.5 - left == 0.25 + 1e-12
    assert run(left) == []


# P99 (ms) of the whole 61,733-request trace of `bench_analyze.py --requests 50000` at the
# ratios its best-static search evaluated (measured 2026-12-07); linear in between
MEASURED = [(0.0, 0.8899), (0.09, 0.3849), (0.12, 0.3754), (0.14, 0.3732), (0.23, 0.3761),
            (0.38, 0.3831), (0.47, 0.3880), (0.62, 0.3959), (1.0, 0.4199)]  # fmt: skip


def test_best_static_probes_one_side_at_a_time_worked_by_hand(curve):
    """From 0, 0.38, 0.62 and 1 the best is 0.38: the left gap's convex floor (the line
    through 0.38 and 0.62 extended to 0: 0.3628) is lower than the right one's (the line
    through 0.62 and 1 meets the falling line through 0 and 0.38 at r = 0.3817: 0.3808),
    so 0.23 goes first; 0.23 is then the best, and 0.38 within 2 % of it, so the right
    side is settled and its probe (0.47, which probing both sides spends) never runs. Then
    0.14, the cliff's side 0.09 (3.1 % worse), and 0.12 between them."""
    box, calls = curve
    xs, ys = zip(*MEASURED, strict=True)
    box["f"] = lambda r: float(np.interp(r, xs, ys))
    bs = st.best_static(object(), NCFG, OracleConfig(), grid=False)
    order = [float(c[1][0]) for c in calls]
    assert order[:4] == [0.0, 0.38, 0.62, 1.0] and order[4:] == [0.23, 0.14, 0.09, 0.12]
    assert bs.ratio == 0.14 and (bs.flat_lo, bs.flat_hi) == (0.12, 0.23)


@pytest.mark.parametrize("shape", ["v", "cliff", "plateau-dip"])
@pytest.mark.parametrize("target", [0.01, 0.06, 0.17, 0.37, 0.5, 0.81, 0.99])
def test_best_static_lands_in_the_exhaustive_grids_flat_band(curve, shape, target):
    """Best static's one-side search against every ratio of the 0.01 lattice: its ratio is
    in the exhaustive grid's flat band (P99 within 2 % of the grid's minimum) on a V, on a
    slope that ends in a cliff (EMB starved below ``target``) and on a flat plateau with a
    narrow dip at ``target`` beside a cliff below it (the fleet case of
    ``search.static_search``); never more runs than probing both sides."""
    box, calls = curve

    def dip(r):
        return 0.5 if r < target + 0.005 else 1.0

    fns = {
        "v": lambda r: 1.0 + abs(r - target),
        "cliff": lambda r: 100.0 if r < target - 1e-9 else 1.0 + 0.1 * r,
        "plateau-dip": lambda r: 100.0 if r < target - 1e-9 else dip(r),
    }
    f = fns[shape]
    box["f"] = f
    grid = [(r, f(r)) for r in np.round(np.arange(101) * 0.01, 9)]
    best = min(p for _, p in grid)
    band = {r for r, p in grid if p <= best * 1.02}
    bs = st.best_static(object(), NCFG, OracleConfig(), grid=False)
    assert bs.ratio in band
    one = len(calls)

    calls.clear()
    with mock.patch.object(st, "bracket", lambda *a, one_side: bracket(*a)):  # both sides
        two = st.best_static(object(), NCFG, OracleConfig(), grid=False)
    assert two.ratio in band and one <= len(calls)
