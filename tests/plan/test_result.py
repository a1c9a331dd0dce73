"""The plan's answer (``plan/result.py``) from hand-made searches, against hand-worked tables,
a brute-force bootstrap and hand-written sentences.

Every figure here is worked out by hand or recomputed by plain Python loops over the per-window
counts: a replicate's minimal size is the smallest evaluated size from which every evaluated
size passes "within-SLO share >= need" (exact integer arithmetic), one past the largest when
none does; a row's cost is N · price · 24 USD per day; the sentences are written out in full.
"""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from helm_plan.plan import result as R
from helm_plan.plan.config import PlanConfig
from helm_plan.plan.frontier import Headroom, headroom_table
from helm_plan.plan.loadcurve import LoadCurve
from helm_plan.plan.result import Combo, PlanResult
from helm_plan.plan.scale import Scaling
from helm_plan.plan.search import Point, Search
from helm_plan.policies import is_static
from helm_plan.sim import NodeConfig

# ---- helpers ---------------------------------------------------------------------------------


def _combo(counts, nodes=None, gpu=0, policy="p", router="r", evaluated=(), non_monotone=False):
    """A combo whose counts are {n: (requests per window, within-SLO per window, r)}."""
    c = {
        n: (np.asarray(s, np.int64), np.asarray(m, np.int64), r) for n, (s, m, r) in counts.items()
    }
    return Combo(gpu, policy, router, Search(nodes, tuple(evaluated), non_monotone), c)


def _brute_nodes(counts, weights, num, den):
    """Minimal size of one replicate (window multiplicities ``weights``), need = num/den."""
    ns = sorted(counts)
    ok = {}
    for n in ns:
        req = sum(int(w) * int(s) for w, s in zip(weights, counts[n][0], strict=True))
        met = sum(int(w) * int(m) for w, m in zip(weights, counts[n][1], strict=True))
        ok[n] = met * den >= num * req
    for n in ns:
        if all(ok[k] for k in ns if k >= n):
            return n
    return ns[-1] + 1


def _step(nodes, sizes, per_window, r=math.nan):
    """Counts where size n passes (every request within the SLO) iff n >= nodes."""
    out = {}
    for n in sizes:
        met = per_window if nodes is not None and n >= nodes else [0] * len(per_window)
        out[n] = (np.asarray(per_window), np.asarray(met), r)
    return out


# ---- _replicate_nodes ------------------------------------------------------------------------

# three windows, sizes 1..3: need 0.9. Size 1 meets window 0 only, size 2 misses 2 in window 1.
HAND = {1: ([10, 10, 10], [10, 0, 10], 0.0), 2: ([10, 10, 10], [10, 8, 10], 0.0),
        3: ([10, 10, 10], [10, 10, 10], 0.0)}  # fmt: skip


def test_replicate_nodes_hand_worked():
    combo = _combo(HAND)
    mult = np.array([[1, 1, 1],  # 1: 20/30 fails; 2: 28/30 = 0.933 passes -> 2
                     [2, 0, 0],  # window 0 alone: size 1 passes -> 1
                     [0, 2, 0],  # 1: 0/20; 2: 16/20 = 0.8 fails; 3 passes -> 3
                     [1, 3, 0],  # 2: 34/40 = 0.85 fails -> 3
                     [0, 0, 0]],  # no request at all: 0 >= 0 passes everywhere -> 1
                    dtype=float)  # fmt: skip
    got = R._replicate_nodes(combo, mult, 0.9)
    assert got.tolist() == [2, 1, 3, 3, 1]


def test_replicate_nodes_tail_rule_and_none_passing():
    # sizes inserted out of order; 2 passes, 5 fails, 9 passes: the tail rule gives 9
    counts = {9: ([4, 4], [4, 4], 0.0), 2: ([4, 4], [4, 4], 0.0), 5: ([4, 4], [0, 4], 0.0)}
    one = np.ones((1, 2))
    assert R._replicate_nodes(_combo(counts), one, 0.99).tolist() == [9]
    # only window 1 drawn: every size passes -> the smallest evaluated, 2
    assert R._replicate_nodes(_combo(counts), np.array([[0.0, 3.0]]), 0.99).tolist() == [2]
    # nothing passes: one past the largest evaluated size
    none = {3: ([5, 5], [0, 1], 0.0), 7: ([5, 5], [1, 0], 0.0)}
    assert R._replicate_nodes(_combo(none), np.ones((2, 2)), 0.99).tolist() == [8, 8]
    # the largest passes alone
    last = {3: ([5, 5], [0, 1], 0.0), 7: ([5, 5], [5, 5], 0.0)}
    assert R._replicate_nodes(_combo(last), np.ones((1, 2)), 0.99).tolist() == [7]


def test_replicate_nodes_exact_share_passes():
    # 0.55 * 100 is 55.00000000000001 in floating point: 55 of 100 meets 0.55 exactly
    counts = {1: ([100], [55], 0.0), 2: ([100], [100], 0.0)}
    assert R._replicate_nodes(_combo(counts), np.ones((1, 1)), 0.55).tolist() == [1]
    # one request short fails, even at need 1 (a tolerance of a whole request would pass it)
    short = {1: ([100], [99], 0.0), 2: ([100], [100], 0.0)}
    assert R._replicate_nodes(_combo(short), np.ones((1, 1)), 1.0).tolist() == [2]
    # every request within at need 1 passes
    full = {1: ([100], [100], 0.0)}
    assert R._replicate_nodes(_combo(full), np.ones((1, 1)), 1.0).tolist() == [1]
    # the tolerance is inclusive: a shortfall of exactly 1e-9 request still passes
    tiny = {1: ([1], [0], 0.0), 2: ([1], [1], 0.0)}
    assert R._replicate_nodes(_combo(tiny), np.ones((1, 1)), 1e-9).tolist() == [1]
    assert R._replicate_nodes(_combo(tiny), np.ones((1, 1)), 2e-9).tolist() == [2]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_replicate_nodes_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_w = 5
    counts = {}
    for n in rng.choice(np.arange(1, 12), size=5, replace=False):
        size = rng.integers(0, 20, n_w)
        counts[int(n)] = (size, np.minimum(size, rng.integers(0, 22, n_w)), 0.0)
    mult = rng.integers(0, 4, (30, n_w)).astype(float)
    for num, den in ((9, 10), (99, 100), (1, 2)):
        got = R._replicate_nodes(_combo(counts), mult, num / den)
        want = [_brute_nodes(counts, row, num, den) for row in mult]
        assert got.tolist() == want


# ---- nodes_saved_ci --------------------------------------------------------------------------


def _cfg(**kw) -> PlanConfig:
    base = {"gpus": ("g0",), "routers": ("jsq", "helm"), "n_boot": 40, "seed": 7}
    return PlanConfig(**(base | kw))


def _brute_ci(a, b, cfg, n_windows):
    """The paired window bootstrap by loops: the same seeded draws of the non-empty windows."""
    w = [i for i in range(n_windows)
         if sum(int(c.counts[n][0][i]) for c in (a, b) for n in c.counts) > 0]  # fmt: skip
    rng = np.random.default_rng(cfg.seed)
    picks = rng.integers(0, len(w), (cfg.n_boot, len(w)))
    need = max(cfg.attainment, 0.99)
    num, den = round(need * 1000), 1000
    diffs = []
    for row in picks:
        cnt = Counter(w[j] for j in row)
        weights = [cnt.get(i, 0) for i in range(n_windows)]
        diffs.append(_brute_nodes(b.counts, weights, num, den)
                     - _brute_nodes(a.counts, weights, num, den))  # fmt: skip
    alpha = (1 - cfg.ci_level) / 2
    return tuple(float(q) for q in np.quantile(diffs, [alpha, 1 - alpha]))


def test_nodes_saved_ci_no_counts_or_no_requests_is_nan():
    full = _combo(_step(2, [1, 2, 3], [5, 5]))
    for a, b in ((_combo({}), full), (full, _combo({})), (_combo({}), _combo({}))):
        lo, hi = R.nodes_saved_ci(a, b, _cfg(), 2)
        assert math.isnan(lo) and math.isnan(hi)
    empty = _combo(_step(2, [1, 2, 3], [0, 0]))
    lo, hi = R.nodes_saved_ci(empty, empty, _cfg(), 2)
    assert math.isnan(lo) and math.isnan(hi)


def test_nodes_saved_ci_constant_difference():
    # a passes from 2 nodes in every window, b from 5: every replicate says N_b - N_a = 3
    a = _combo(_step(2, [1, 2, 3], [5, 0, 7, 3]))
    b = _combo(_step(5, [4, 5, 6], [5, 0, 7, 3]))
    assert R.nodes_saved_ci(a, b, _cfg(), 4) == (3.0, 3.0)
    assert R.nodes_saved_ci(b, a, _cfg(), 4) == (-3.0, -3.0)


def _mixed():
    """Two combos whose answers differ by window; window 2 and 5 have no request, window 4
    has requests on b's side only."""
    a = _combo({1: ([10, 10, 0, 10, 0, 0], [10, 5, 0, 10, 0, 0], 0.0),
                2: ([10, 10, 0, 10, 0, 0], [10, 10, 0, 9, 0, 0], 0.0),
                3: ([10, 10, 0, 10, 0, 0], [10, 10, 0, 10, 0, 0], 0.0)})  # fmt: skip
    b = _combo({2: ([10, 0, 0, 10, 6, 0], [10, 0, 0, 3, 6, 0], 0.0),
                4: ([10, 0, 0, 10, 6, 0], [10, 0, 0, 10, 0, 0], 0.0),
                6: ([10, 0, 0, 10, 6, 0], [10, 0, 0, 10, 6, 0], 0.0)})  # fmt: skip
    return a, b


def _masked():
    """Window 1 holds a single request (a's, at one size), window 2 requests that no size ever
    serves within the SLO, window 3 nothing: only window 3 is never drawn."""
    a = _combo({1: ([10, 1, 4, 0, 10], [10, 0, 0, 0, 5], 0.0),
                2: ([10, 0, 4, 0, 10], [10, 0, 0, 0, 10], 0.0),
                3: ([10, 0, 4, 0, 10], [10, 0, 0, 0, 10], 0.0)})  # fmt: skip
    b = _combo({2: ([10, 0, 4, 0, 10], [5, 0, 0, 0, 10], 0.0),
                4: ([10, 0, 4, 0, 10], [10, 0, 0, 0, 10], 0.0)})  # fmt: skip
    return a, b


@pytest.mark.parametrize(
    "kw",
    [{}, {"seed": 3, "n_boot": 60, "ci_level": 0.5}, {"attainment": 0.5, "ci_level": 0.8},
     {"attainment": 1.0, "seed": 11}],
)  # fmt: skip
@pytest.mark.parametrize("pair", [_mixed, _masked])
def test_nodes_saved_ci_brute_force(kw, pair):
    a, b = pair()
    n_w = len(next(iter(a.counts.values()))[0])
    cfg = _cfg(**kw)
    got = R.nodes_saved_ci(a, b, cfg, n_w)
    assert got == pytest.approx(_brute_ci(a, b, cfg, n_w))
    assert got[0] <= got[1]


def test_nodes_saved_ci_interval_is_not_degenerate_here():
    # the brute force is worth something only if the replicates disagree: check they do
    a, b = _mixed()
    lo, hi = R.nodes_saved_ci(a, b, _cfg(n_boot=200, ci_level=0.99), 6)
    assert lo < hi


# ---- _is_static ------------------------------------------------------------------------------


def test_is_static():
    # the plan's split of static and adaptive policies reads the registry's kinds
    for p in ("best-static", "emb-max", "kv-max", "static", "static:0.3", "best-static:x"):
        assert is_static(p)
    for p in ("hill-climb", "controller", "statics", "controller:static", "x:static"):
        assert not is_static(p)


# ---- build_result ----------------------------------------------------------------------------

N_W = 3
PW = [4, 0, 6]  # requests per window of every size below


def _ctx(pool, foot, n_windows):
    def nw(window_s):
        assert window_s == 2.0  # the node config's window
        return n_windows

    return SimpleNamespace(pool_bytes=pool, footprint_bytes=foot, n_windows=nw)


def _setup(name, price):
    return SimpleNamespace(gpu=SimpleNamespace(name=name), price_per_hour=price)


def _pts(*spec):
    return tuple(Point(n, ok, p99, att) for n, ok, p99, att in spec)


def _counts(nodes, sizes, rs):
    return {n: (np.array(PW), np.array(PW if nodes is not None and n >= nodes else [0, 0, 0]),
                rs.get(n, math.nan)) for n in sizes}  # fmt: skip


def _build_inputs():
    cfg = PlanConfig(gpus=("g0", "g1"), routers=("jsq", "helm"), n_boot=20, ci_level=0.9,
                     attainment=0.95, max_nodes=9)  # fmt: skip
    ncfg = NodeConfig(window_s=2.0, slo_ms=7.5)
    scaling = Scaling("users", 2.5, 40.0, 100.0, 60.0, 150.0, 10, 25, 500)
    setups = [_setup("g0", 2.0), _setup("g1", 3.5)]
    ctxs = [_ctx(100, 100, N_W), _ctx(100, 101, N_W + 1)]
    combos = [
        Combo(0, "best-static", "jsq",
              Search(4, _pts((4, True, 5.0, 0.995), (3, False, 9.0, 0.9), (5, True, 4.0, 0.999))),
              _counts(4, [3, 4, 5], {3: 0.5, 4: 0.25, 5: 0.75})),
        Combo(0, "hill-climb", "jsq",
              Search(3, _pts((3, True, 6.0, 0.99), (2, False, 8.0, 0.8), (4, False, 7.9, 0.97)),
                     non_monotone=True),
              _counts(3, [2, 3, 4], {})),
        Combo(0, "best-static", "helm",
              Search(1, _pts((1, True, 3.0, 1.0), (2, True, 2.0, 1.0))),
              _counts(1, [1, 2], {1: 0.0, 2: 1.0})),
        Combo(0, "hill-climb", "helm", Search(None, _pts((9, False, 50.0, 0.2))), _counts(None, [9], {})),
        Combo(1, "best-static", "jsq", Search(None, _pts((9, False, 40.0, 0.3))),
              _counts(None, [9], {9: 0.5})),
        Combo(1, "hill-climb", "jsq", Search(2, _pts((2, True, 6.5, 0.96), (1, False, 20.0, 0.5))),
              _counts(2, [1, 2], {})),
        Combo(1, "best-static", "helm", Search(None, ()), {}),
        Combo(1, "hill-climb", "helm", Search(2, _pts((2, True, 6.0, 0.99))), _counts(2, [2], {})),
    ]  # fmt: skip
    curves = [
        LoadCurve(pl.DataFrame({"policy": ["best-static", "hill-climb"], "factor": [1.0, 2.0],
                                "qps": [10.0, 20.0]}),
                  {"best-static": 10.0, "hill-climb": 20.0}, 10.0, {"hill-climb": True}),
        LoadCurve(pl.DataFrame({"policy": ["hill-climb"], "factor": [0.5], "qps": [5.0]}),
                  {"hill-climb": 5.0}, 10.0, {"hill-climb": False}),
    ]  # fmt: skip
    return cfg, ncfg, scaling, setups, ctxs, curves, combos


def _build():
    cfg, ncfg, scaling, setups, ctxs, curves, combos = _build_inputs()
    res = R.build_result(cfg, ncfg, scaling, setups, ctxs, curves, combos,
                         ("best-static", "hill-climb"), ("jsq", "helm"))  # fmt: skip
    return res, cfg, scaling


NONE_ROW = {"p99_ms": None, "slo_attainment": None, "p99_ms_one_less": None,
            "best_static_r": None, "gpu_hours_per_day": None, "usd_per_day": None,
            "usd_per_million_requests": None, "nodes_saved": None, "usd_saved_per_day": None}  # fmt: skip


def test_build_result_capacity_by_hand():
    res, _, _ = _build()
    rows = res.capacity.to_dicts()
    assert len(rows) == 8
    qh = 100.0 * 3600 / 1e6  # millions of requests per hour at 100 req/s
    want = [
        {"gpu": "g0", "policy": "best-static", "router": "jsq", "baseline": True, "nodes": 4,
         "p99_ms": 5.0, "slo_attainment": 0.995, "p99_ms_one_less": 9.0, "best_static_r": 0.25,
         "non_monotone": False, "sizes_evaluated": 3, "usd_per_gpu_hour": 2.0,
         "gpu_hours_per_day": 96.0, "usd_per_day": 192.0, "usd_per_million_requests": 8.0 / qh,
         "nodes_saved": 0, "usd_saved_per_day": 0.0},
        {"gpu": "g0", "policy": "hill-climb", "router": "jsq", "baseline": False, "nodes": 3,
         "p99_ms": 6.0, "slo_attainment": 0.99, "p99_ms_one_less": 8.0, "best_static_r": None,
         "non_monotone": True, "sizes_evaluated": 3, "usd_per_gpu_hour": 2.0,
         "gpu_hours_per_day": 72.0, "usd_per_day": 144.0, "usd_per_million_requests": 6.0 / qh,
         "nodes_saved": 1, "usd_saved_per_day": 48.0},
        # best static behind helm is not the baseline (that is behind jsq); N = 1: no N - 1
        {"gpu": "g0", "policy": "best-static", "router": "helm", "baseline": False, "nodes": 1,
         "p99_ms": 3.0, "slo_attainment": 1.0, "p99_ms_one_less": None, "best_static_r": 0.0,
         "non_monotone": False, "sizes_evaluated": 2, "usd_per_gpu_hour": 2.0,
         "gpu_hours_per_day": 24.0, "usd_per_day": 48.0, "usd_per_million_requests": 2.0 / qh,
         "nodes_saved": 3, "usd_saved_per_day": 144.0},
        {"gpu": "g0", "policy": "hill-climb", "router": "helm", "baseline": False, "nodes": None,
         "non_monotone": False, "sizes_evaluated": 1, "usd_per_gpu_hour": 2.0} | NONE_ROW,
        # g1's baseline passes nowhere: nothing is saved against it
        {"gpu": "g1", "policy": "best-static", "router": "jsq", "baseline": True, "nodes": None,
         "non_monotone": False, "sizes_evaluated": 1, "usd_per_gpu_hour": 3.5} | NONE_ROW,
        {"gpu": "g1", "policy": "hill-climb", "router": "jsq", "baseline": False, "nodes": 2,
         "p99_ms": 6.5, "slo_attainment": 0.96, "p99_ms_one_less": 20.0, "best_static_r": None,
         "non_monotone": False, "sizes_evaluated": 2, "usd_per_gpu_hour": 3.5,
         "gpu_hours_per_day": 48.0, "usd_per_day": 168.0, "usd_per_million_requests": 7.0 / qh,
         "nodes_saved": None, "usd_saved_per_day": None},
        {"gpu": "g1", "policy": "best-static", "router": "helm", "baseline": False, "nodes": None,
         "non_monotone": False, "sizes_evaluated": 0, "usd_per_gpu_hour": 3.5} | NONE_ROW,
        # N = 2 evaluated alone: N - 1 was not evaluated
        {"gpu": "g1", "policy": "hill-climb", "router": "helm", "baseline": False, "nodes": 2,
         "p99_ms": 6.0, "slo_attainment": 0.99, "p99_ms_one_less": None, "best_static_r": None,
         "non_monotone": False, "sizes_evaluated": 1, "usd_per_gpu_hour": 3.5,
         "gpu_hours_per_day": 48.0, "usd_per_day": 168.0, "usd_per_million_requests": 7.0 / qh,
         "nodes_saved": None, "usd_saved_per_day": None},
    ]  # fmt: skip
    for got, exp in zip(rows, want, strict=True):
        assert set(got) == set(exp)
        for k, v in exp.items():
            assert got[k] == (pytest.approx(v) if isinstance(v, float) else v), (exp, k)
    assert res.capacity.columns[:3] == ["gpu", "policy", "router"]


def test_build_result_tables_by_hand():
    res, cfg, scaling = _build()
    assert res.config is cfg and res.scaling is scaling and res.slo_ms == 7.5
    assert res.gpus.to_dicts() == [
        {"gpu": "g0", "usd_per_hour": 2.0, "pool_bytes": 100, "footprint_bytes": 100, "fits": True},
        {"gpu": "g1", "usd_per_hour": 3.5, "pool_bytes": 100, "footprint_bytes": 101,
         "fits": False},
    ]  # fmt: skip
    ev = res.evaluated.to_dicts()
    assert [(e["gpu"], e["policy"], e["router"], e["nodes"], e["passes"]) for e in ev] == [
        ("g0", "best-static", "jsq", 4, True), ("g0", "best-static", "jsq", 3, False),
        ("g0", "best-static", "jsq", 5, True), ("g0", "hill-climb", "jsq", 3, True),
        ("g0", "hill-climb", "jsq", 2, False), ("g0", "hill-climb", "jsq", 4, False),
        ("g0", "best-static", "helm", 1, True), ("g0", "best-static", "helm", 2, True),
        ("g0", "hill-climb", "helm", 9, False), ("g1", "best-static", "jsq", 9, False),
        ("g1", "hill-climb", "jsq", 2, True), ("g1", "hill-climb", "jsq", 1, False),
        ("g1", "hill-climb", "helm", 2, True),
    ]  # fmt: skip
    assert ev[1]["p99_ms"] == 9.0 and ev[1]["slo_attainment"] == 0.9
    assert res.load_curve.columns == ["gpu", "policy", "factor", "qps"]
    assert res.load_curve.rows() == [("g0", "best-static", 1.0, 10.0), ("g0", "hill-climb", 2.0, 20.0),
                                     ("g1", "hill-climb", 0.5, 5.0)]  # fmt: skip
    assert res.max_qps.to_dicts() == [
        {"gpu": "g0", "policy": "best-static", "max_qps": 10.0, "lower_bound": False},
        {"gpu": "g0", "policy": "hill-climb", "max_qps": 20.0, "lower_bound": True},
        {"gpu": "g1", "policy": "hill-climb", "max_qps": 5.0, "lower_bound": False},
    ]
    assert isinstance(res.answer, tuple)
    assert res.answer[0].startswith("Planned traffic: 150 req/s in the busiest 10 s window, 100 "
                                    "req/s mean; the trace scaled x2.5 by users: ")  # fmt: skip
    assert res.answer[0].endswith(
        "Target: P99 <= 7.5 ms for 95.0% of requests (the model's default SLO)."
    )
    assert res.answer[1] == ("Cheapest: 1 x g0 with best-static behind helm: $48/day, $5.56 per "
                             "million requests at the planned mean of 100 req/s (the fleet is "
                             "sized for the busiest window, 150 req/s).")  # fmt: skip


def test_build_result_savings_by_hand():
    res, _, _ = _build()
    rows = res.savings.to_dicts()
    # g0 adaptive: hill-climb against best-static, behind jsq (3 vs 4); behind helm hill-climb never
    # passes. Routing: helm against jsq for best-static (1 vs 4) and hill-climb (None vs 3).
    # g1 adaptive jsq: 2 vs None; helm: 2 vs None. Routing: best-static None vs None (skipped:
    # jsq never passes), hill-climb: helm 2 vs jsq 2. g0 routing hill-climb: helm never passes.
    got = [(r["gpu"], r["kind"], r["scope"], r["a"], r["b"], r["nodes_a"], r["nodes_b"],
            r["nodes_saved"], r["usd_saved_per_day"]) for r in rows]  # fmt: skip
    assert got == [
        ("g0", "adaptive", "jsq", "hill-climb", "best-static", 3, 4, 1, 48.0),
        ("g0", "routing", "best-static", "helm", "jsq", 1, 4, 3, 144.0),
        ("g0", "routing", "hill-climb", "helm", "jsq", None, 3, None, None),
        ("g1", "adaptive", "jsq", "hill-climb", "best-static", 2, None, None, None),
        ("g1", "adaptive", "helm", "hill-climb", "best-static", 2, None, None, None),
        ("g1", "routing", "hill-climb", "helm", "jsq", 2, 2, 0, 0.0),
    ]
    # every size's pass/fail is the same in every window: the intervals are points. A side that
    # never passes counts one past its largest evaluated size (g1 best-static: 9 -> 10; behind
    # helm nothing was evaluated: no interval)
    assert [(r["lo"], r["hi"]) for r in rows[:4]] == [(1.0, 1.0), (3.0, 3.0), (-7.0, -7.0),
                                                      (8.0, 8.0)]  # fmt: skip
    assert math.isnan(rows[4]["lo"]) and math.isnan(rows[4]["hi"])
    assert (rows[5]["lo"], rows[5]["hi"]) == (0.0, 0.0)


def test_build_result_types_columns_from_every_row():
    # 101 rows without a passing size before the one that has one: the capacity table's
    # columns take their types from every row, not the first hundred
    cfg = PlanConfig(gpus=("g0",), routers=("jsq",), n_boot=10)
    none = [Combo(0, p, "jsq", Search(None, ()), {}) for p in
            ["best-static", *(f"p{i}" for i in range(100))]]  # fmt: skip
    last = Combo(0, "emb-max", "jsq", Search(2, _pts((2, True, 6.5, 0.96))), _counts(2, [2], {}))
    curve = LoadCurve(pl.DataFrame({"policy": ["emb-max"], "qps": [1.0]}), {}, 1.0)
    res = R.build_result(cfg, NodeConfig(window_s=2.0, slo_ms=100.0), Scaling("users", 1, 1, 1, 1, 1, 1, 1, 1),
                         [_setup("g0", 2.0)], [_ctx(1, 1, N_W)], [curve], [*none, last], (),
                         ())  # fmt: skip
    assert res.capacity.height == 102 and res.capacity["p99_ms"][0] is None
    row = res.capacity.row(101, named=True)
    assert (row["nodes"], row["p99_ms"], row["usd_per_day"]) == (2, 6.5, 96.0)


# ---- _savings --------------------------------------------------------------------------------


def _sv(policies, routers, table, n_gpus=1):
    """_savings over hand-made combos: table[(policy, router)] = (nodes, p99 at nodes)."""
    by = {}
    for gi in range(n_gpus):
        for (p, r), (n, p99) in table.items():
            ev = _pts((n, True, p99, 1.0)) if n is not None else ()
            by[(gi, p, r)] = Combo(gi, p, r, Search(n, ev),
                                   _step(n, [n] if n else [], [3, 1]))  # fmt: skip
    setups = [_setup(f"g{i}", 1.5 + i) for i in range(n_gpus)]
    names = [s.gpu.name for s in setups]
    return R._savings(_cfg(n_boot=10), names, by, setups, policies, routers, 2)


TABLE = {("best-static", "jsq"): (5, 6.0), ("best-static", "affinity"): (5, 5.0),
         ("best-static", "helm"): (4, 9.0),
         ("static:0.3", "jsq"): (6, 1.0), ("static:0.3", "affinity"): (7, 1.0),
         ("static:0.3", "helm"): (None, 0.0),
         ("controller", "jsq"): (3, 5.0), ("controller", "affinity"): (2, 1.0),
         ("controller", "helm"): (None, 0.0),
         ("hill-climb", "jsq"): (3, 4.0), ("hill-climb", "affinity"): (None, 0.0),
         ("hill-climb", "helm"): (None, 0.0)}  # fmt: skip
POLS = ("best-static", "static:0.3", "controller", "hill-climb")
ROUTS = ("jsq", "affinity", "helm")


def test_savings_best_adaptive_and_best_other_router():
    df = _sv(POLS, ROUTS, TABLE, n_gpus=2)
    got = [(r["gpu"], r["kind"], r["scope"], r["a"], r["b"], r["nodes_a"], r["nodes_b"],
            r["nodes_saved"]) for r in df.to_dicts()]  # fmt: skip
    per_gpu = [
        # jsq: controller and hill-climb both need 3; hill-climb has the lower P99 there
        ("adaptive", "jsq", "hill-climb", "best-static", 3, 5, 2),
        ("adaptive", "affinity", "controller", "best-static", 2, 5, 3),
        # helm: no adaptive policy passes: no row
        # routing: best-static's best other router is affinity (5 nodes, lower P99 than jsq)
        ("routing", "best-static", "helm", "affinity", 4, 5, 1),
        ("routing", "static:0.3", "helm", "jsq", None, 6, None),
        ("routing", "controller", "helm", "affinity", None, 2, None),
        ("routing", "hill-climb", "helm", "jsq", None, 3, None),
    ]
    assert got == [(g, *row) for g in ("g0", "g1") for row in per_gpu]
    usd = df["usd_saved_per_day"].to_list()
    assert usd[:3] == [2 * 1.5 * 24, 3 * 1.5 * 24, 1 * 1.5 * 24]
    assert usd[6:9] == [2 * 2.5 * 24, 3 * 2.5 * 24, 1 * 2.5 * 24]
    assert usd[3:6] == [None] * 3
    # one evaluated size each, passing: a replicate's answer is that size
    assert df["lo"].to_list()[:3] == [2.0, 3.0, 1.0] and df["hi"].to_list()[:3] == [2.0, 3.0, 1.0]


SAV_COLS = {"gpu": pl.String, "kind": pl.String, "scope": pl.String, "a": pl.String,
            "b": pl.String, "nodes_a": pl.Int64, "nodes_b": pl.Int64, "nodes_saved": pl.Int64,
            "lo": pl.Float64, "hi": pl.Float64, "usd_saved_per_day": pl.Float64}  # fmt: skip


def test_savings_comparisons_need_their_reference():
    cols = SAV_COLS
    # no best-static: no adaptive row; no helm: no routing row -> the empty, typed table
    df = _sv(("controller", "hill-climb"), ("jsq", "affinity"), TABLE)
    assert df.height == 0 and dict(df.schema) == cols
    # only static policies: no adaptive row; helm alone: no other router
    assert _sv(("best-static", "static:0.3"), ("helm",), TABLE).height == 0
    # best-static and one adaptive policy, helm and jsq: the controller fails behind helm (no
    # adaptive row there); helm against jsq for both policies
    df = _sv(("best-static", "controller"), ("helm", "jsq"), TABLE)
    assert df["kind"].to_list() == ["adaptive", "routing", "routing"]
    assert df["scope"].to_list() == ["jsq", "best-static", "controller"]
    assert df["nodes_saved"].to_list() == [2, 1, None]
    assert dict(df.schema) == cols


# ---- answer_sentences ------------------------------------------------------------------------


def _res(capacity, gpus, savings, room=(), **cfg_kw):
    cfg = _cfg(max_nodes=16, ci_level=0.9, attainment=0.99, slo_ms=7.5, **cfg_kw)
    scaling = Scaling("users", 2.5, 500.0, 1234.6, 900.0, 2000.0, 10, 25, 500, jitter_s=1.0)
    cap = pl.DataFrame(capacity, infer_schema_length=None)
    return PlanResult(
        cfg,
        7.5,
        scaling,
        pl.DataFrame(gpus),
        cap,
        pl.DataFrame(),
        pl.DataFrame(savings, schema=SAV_COLS),
        pl.DataFrame(),
        pl.DataFrame(),
        pl.DataFrame(),
        headroom_table(list(room), 2000.0),
        (),
    )


def _cap(gpu, policy, router, nodes, usd, p99, per_m=0.123456, non_monotone=False):
    return {
        "gpu": gpu,
        "policy": policy,
        "router": router,
        "nodes": nodes,
        "usd_per_day": usd,
        "p99_ms": p99,
        "usd_per_million_requests": per_m,
        "non_monotone": non_monotone,
    }


HEAD = ("Planned traffic: 2,000 req/s in the busiest 10 s window, 1,235 req/s mean; the trace "
        "scaled x2.5 by users: the trace's users cloned K times on the trace's own timeline (each "
        "clone offset by under 1 s): at every instant the planned rate is K times the trace's, so "
        "its bursts are planned at full height. Target: P99 <= 7.5 ms for 99.0% of requests.")  # fmt: skip
CHEAP = ("at the planned mean of 1,235 req/s (the fleet is sized for the busiest window, 2,000 "
         "req/s).")  # fmt: skip


def test_answer_nothing_meets_the_slo():
    cap = [_cap("g0", "emb-max", "jsq", None, None, None, None, non_monotone=True)]
    res = _res(cap, [{"gpu": "g0", "fits": True}], [])
    assert R.answer_sentences(res) == [
        HEAD,
        "No combination meets the SLO within 16 nodes per GPU kind: the traffic overloads every "
        "fleet considered; raise --max-nodes or relax --slo-ms.",
    ]


def _sav(gpu, kind, scope, a, b, saved, lo, hi):
    return {
        "gpu": gpu,
        "kind": kind,
        "scope": scope,
        "a": a,
        "b": b,
        "nodes_a": 1,
        "nodes_b": 1,
        "nodes_saved": saved,
        "lo": lo,
        "hi": hi,
        "usd_saved_per_day": 0.0,
    }


def test_answer_sentences_in_full():
    cap = [
        _cap("g0", "best-static", "jsq", 4, 2400.0, 2.0),
        _cap("g0", "emb-max", "jsq", 3, 2400.0, 6.0),
        _cap("g0", "emb-max", "helm", 3, 2400.0, 5.0),  # cheapest: same $, fewer nodes, lower P99
        _cap("g0", "kv-max", "helm", 9, 2500.0, 1.0, non_monotone=True),
        _cap("g1", "best-static", "jsq", 1, 2500.0, 1.0),
        _cap("g1", "emb-max", "jsq", None, None, None, None, non_monotone=True),
        _cap("g2", "best-static", "jsq", 2, 9000.0, 1.0),
        _cap("g2", "emb-max", "jsq", 2, 9000.0, 1.0),
        _cap("g3", "emb-max", "jsq", None, None, None, None),
    ]  # fmt: skip
    gpus = [{"gpu": "g0", "fits": True}, {"gpu": "g1", "fits": False},
            {"gpu": "g2", "fits": False}, {"gpu": "g3", "fits": True}]  # fmt: skip
    sav = [
        _sav("g0", "adaptive", "jsq", "emb-max", "best-static", 1, -1.0, 2.0),
        _sav("g0", "adaptive", "helm", "emb-max", "best-static", None, math.nan, math.nan),
        _sav("g0", "routing", "emb-max", "helm", "jsq", 0, math.nan, math.nan),
        _sav("g1", "routing", "best-static", "helm", "affinity", -2, -3.0, -1.0),
    ]  # fmt: skip
    got = R.answer_sentences(_res(cap, gpus, sav))
    fits = ("the whole EMB+KV footprint of the planned traffic fits one pool: a split that gives "
            "each cache its footprint serves every hit.")  # fmt: skip
    assert got == [
        HEAD,
        "Cheapest: 3 x g0 with emb-max behind helm: $2,400/day, $0.123 per million requests "
        + CHEAP,
        # g0 plans best static, emb-max and kv-max, but kv-max only behind helm: no split claim
        "On g0: " + fits,
        "On g3: " + fits,
        "g0: emb-max over best-static behind jsq saves +1 node (90% CI -1 to +2).",
        "g0: helm routing over jsq with emb-max saves +0 nodes.",
        "g1: helm routing over affinity with best-static saves -2 nodes (90% CI -3 to -1).",
        "Some rows are non-monotone in fleet size (a larger fleet failed): see 'non_monotone' and "
        "the evaluated sizes.",
    ]


def test_answer_the_split_and_the_fleet_size():
    # g0 sizes all three static splits behind jsq alike; g1's extremes need more nodes
    cap = [
        _cap("g0", "best-static", "jsq", 2, 100.0, 1.0), _cap("g0", "emb-max", "jsq", 2, 100.0, 1.0),
        _cap("g0", "kv-max", "jsq", 2, 100.0, 1.0), _cap("g0", "kv-max", "helm", 3, 150.0, 1.0),
        _cap("g1", "best-static", "jsq", 3, 300.0, 1.0), _cap("g1", "emb-max", "jsq", 5, 500.0, 1.0),
        _cap("g1", "kv-max", "jsq", None, None, None, None),
    ]  # fmt: skip
    got = R.answer_sentences(_res(cap, [{"gpu": "g0", "fits": False},
                                        {"gpu": "g1", "fits": False}], []))  # fmt: skip
    assert got[2:] == [
        "On g0: behind jsq, the split does not change the fleet size: best static, emb-max and "
        "kv-max all need 2 nodes.",
        "On g1: behind jsq, the split changes the fleet size: best-static 3, emb-max 5, kv-max "
        "none nodes.",
    ]


def test_null_savings_collapse_into_one_sentence():
    cap = [_cap("g0", "best-static", "jsq", 1, 100.0, 1.0)]
    nulls = [_sav(g, "adaptive", r, "controller", "best-static", 0, 0.0, 0.0)
             for g in ("g0", "g1") for r in ("jsq", "helm")]  # fmt: skip
    nulls.append(_sav("g0", "routing", "best-static", "helm", "jsq", 0, 0.0, 0.0))
    got = R.answer_sentences(_res(cap, [{"gpu": "g0", "fits": False}], nulls))
    assert got[2:] == ["No saving from adaptivity or helm routing in all 5 comparisons on g0, "
                       "g1: each saves 0 nodes (90% CI 0 to 0)."]  # fmt: skip
    real = _sav("g1", "adaptive", "jsq", "controller", "best-static", 1, 0.0, 2.0)
    got = R.answer_sentences(_res(cap, [{"gpu": "g0", "fits": False}], [*nulls, real]))
    assert got[2:] == [
        "g1: controller over best-static behind jsq saves +1 node (90% CI +0 to +2).",
        "No saving from adaptivity or helm routing in the other 5 comparisons on g0, g1: each "
        "saves 0 nodes (90% CI 0 to 0).",
    ]


def test_answer_non_monotone_only_counts_planned_rows():
    cap = [_cap("g0", "emb-max", "jsq", 2, 100.0, 1.0),
           _cap("g0", "kv-max", "jsq", None, None, None, None, non_monotone=True)]  # fmt: skip
    got = R.answer_sentences(_res(cap, [{"gpu": "g0", "fits": False}], []))
    assert got == [
        HEAD,
        "Cheapest: 2 x g0 with emb-max behind jsq: $100/day, $0.123 per million requests " + CHEAP,
    ]


def test_the_headroom_sentence_names_the_split_best_static_holds():
    # best static's headroom keeps the split planned at N (plan.frontier): the sentence says so
    cap = [{**_cap("g0", "best-static", "jsq", 2, 100.0, 1.0), "best_static_r": 0.15},
           {**_cap("g1", "emb-max", "jsq", 2, 200.0, 1.0), "best_static_r": None}]  # fmt: skip
    gpus = [{"gpu": "g0", "fits": False}, {"gpu": "g1", "fits": False}]
    room = [Headroom("g0", "best-static", "jsq", 2, 0.25, 0.375, 3),
            Headroom("g1", "emb-max", "jsq", 2, 1.0, math.nan, 1)]  # fmt: skip
    cheap = "Cheapest: 2 x {} with {} behind jsq: ${}/day, $0.123 per million requests "
    got = R.answer_sentences(_res(cap, gpus, [], room=room))
    assert got[1] == (
        cheap.format("g0", "best-static", 100) + CHEAP[:-1] + "; headroom at "
        "r = 0.15: +25% traffic before it needs one more node (fails at +38%)."
    )
    got = R.answer_sentences(_res(cap[1:], gpus[1:], [], room=room))
    assert got[1] == (cheap.format("g1", "emb-max", 200) + CHEAP[:-1]
                      + "; headroom: still holds at +100% traffic.")  # fmt: skip


# ---- plan_doc --------------------------------------------------------------------------------


def test_plan_doc_by_hand():
    res, cfg, scaling = _build()
    doc = R.plan_doc(res)
    assert list(doc) == ["schema_version", "config", "slo_ms", "scaling", "gpus", "capacity",
                         "savings", "load_curve", "max_qps", "frontier", "headroom", "evaluated",
                         "answer"]  # fmt: skip
    assert doc["schema_version"] == 1 and R.SCHEMA_VERSION == 1
    assert doc["config"]["gpus"] == ("g0", "g1") and doc["config"]["max_nodes"] == 9
    assert doc["config"]["node"]["window_s"] == 10.0  # the config's own node, a nested dict
    assert doc["slo_ms"] == 7.5
    assert doc["scaling"]["factor"] == 2.5 and doc["scaling"]["qps_after"] == 100.0
    assert doc["gpus"][1] == {"gpu": "g1", "usd_per_hour": 3.5, "pool_bytes": 100,
                              "footprint_bytes": 101, "fits": False}  # fmt: skip
    assert len(doc["capacity"]) == 8 and doc["capacity"][1]["nodes_saved"] == 1
    assert len(doc["savings"]) == 6 and doc["savings"][1]["scope"] == "best-static"
    assert doc["load_curve"][2] == {"gpu": "g1", "policy": "hill-climb", "factor": 0.5, "qps": 5.0}
    assert doc["max_qps"][1]["lower_bound"] is True
    assert len(doc["evaluated"]) == 13 and doc["evaluated"][0]["p99_ms"] == 5.0
    assert isinstance(doc["answer"], list) and doc["answer"][1].startswith("Cheapest: 1 x g0")
    assert len(doc["answer"]) == len(res.answer)


def test_the_traffic_sentence_says_when_nothing_was_scaled():
    # x1 with no peak asked: the trace as given, the model named for the headroom's growth
    one = Scaling("users", 1.0, 40.0, 40.0, 60.0, 60.0, 10, 10, 500, jitter_s=0.5)
    text = R.traffic_sentence(one, 5.0)
    assert text.startswith("Planned traffic: 60 req/s in the busiest 5 s window, 40 req/s mean; "
                           "the trace as given (x1); the headroom grows it by users: ")  # fmt: skip
    assert "scaled" not in text.split(";")[1]
    # a peak asked for that K = 1 happens to meet is still a scaling the planner asked for
    asked = Scaling("users", 1.0, 40.0, 40.0, 60.0, 60.0, 10, 10, 500, peak_qps_target=60.0)
    assert "the trace scaled x1 by users" in R.traffic_sentence(asked, 5.0)
    # any other factor: scaled, with the model's assumption
    k = Scaling("time", 2.0, 40.0, 80.0, 60.0, 120.0, 10, 10, 500)
    assert "the trace scaled x2 by time: " in R.traffic_sentence(k, 5.0)
