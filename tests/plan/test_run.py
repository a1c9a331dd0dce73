"""The plan's driver (``plan/run.py``) with every heavy step replaced by a recording stand-in
(issue 16, item 4).

``_combo`` runs the real fleet-size search over a stand-in ``meets`` that passes from four
nodes on, so the sizes it visits (3, 4, then 5), the hint each one gets and the per-window
counts are worked out by hand. ``plan`` and ``_scaled`` are checked for what they hand to the
scaling, the contexts, the load curves, the executor and ``build_result``: every argument is
written out from the module's contract.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from helm_plan.errors import ConfigError
from helm_plan.exec import SerialExecutor
from helm_plan.oracle import OracleConfig
from helm_plan.plan import evaluate, run
from helm_plan.plan.config import PlanConfig
from helm_plan.plan.search import Point
from helm_plan.sim import NodeConfig

# ---- the planned traffic ---------------------------------------------------------------------


@pytest.fixture
def scaling_calls(monkeypatch):
    seen = []

    def solve_factor(ts, users, target, *, by, window_s, seed):
        seen.append(("solve", ts, users, target, by, window_s, seed))
        return 2.75

    def scale_arrays(arrays, k, *, by, window_s, seed, spill_dir, peak_qps_target):
        seen.append(("scale", arrays, k, by, window_s, seed, spill_dir, peak_qps_target))
        return "OUT"

    monkeypatch.setattr(run, "solve_factor", solve_factor)
    monkeypatch.setattr(run, "scale_arrays", scale_arrays)
    return seen


T = SimpleNamespace(ts_s="TS", user_ids=np.array([10, 20]), user=np.array([1, 0, 1]))


def test_planned_by_peak_qps_solves_the_factor(scaling_calls):
    cfg = PlanConfig(peak_qps=500.0, scale_by="time", seed=4, spill_dir="/scratch")
    assert run.planned_trace(T, cfg, 7.0) == "OUT"
    (solve, scale) = scaling_calls
    assert solve[0] == "solve" and solve[1] == "TS" and solve[2].tolist() == [20, 10, 20]
    assert solve[3:] == (500.0, "time", 7.0, 4)
    assert scale == ("scale", T, 2.75, "time", 7.0, 4, "/scratch", 500.0)


def test_planned_by_factor_or_not_at_all(scaling_calls):
    run.planned_trace(T, PlanConfig(scale=3.0, seed=2), 5.0)
    run.planned_trace(T, PlanConfig(), 5.0)
    assert scaling_calls == [
        ("scale", T, 3.0, "users", 5.0, 2, None, None),
        ("scale", T, 1.0, "users", 5.0, 0, None, None),
    ]


# ---- _combos ---------------------------------------------------------------------------------

SLO_MS = 20.0
# per size: (window of each request, sojourn s, p99 ms, attainment); 0.02 s is exactly the SLO
REQS = {
    3: ([0, 0, 2, 2, 2], [0.01, 0.02, 0.03, 0.0200001, 0.005], 30.0, 0.6),
    4: ([1, 1, 2], [0.02, 0.019, 0.5], 19.0, 0.95),
    5: ([0], [0.001], 1.0, 1.0),
    6: ([0], [0.001], 1.0, 1.0),
}


@pytest.fixture
def meets_calls(monkeypatch):
    seen = []

    def meets(ctx, ccfg, spec, oracle, attainment, hint=0.5):
        seen.append(SimpleNamespace(ctx=ctx, ccfg=ccfg, spec=spec, oracle=oracle,
                                    attainment=attainment, hint=hint))  # fmt: skip
        idx, soj, p99, att = REQS[ccfg.nodes]
        ok = ccfg.nodes >= 4
        ratio = {"best-static": ccfg.nodes / 10, "nan-at-4": math.nan if ccfg.nodes == 4 else 0.9}
        return SimpleNamespace(passes=ok, p99_ms=p99, slo_attainment=att,
                               sojourn_s=np.array(soj), window_idx=np.array(idx),
                               ratio=ratio.get(spec, math.nan))  # fmt: skip

    monkeypatch.setattr(evaluate, "meets", meets)
    return seen


def _ctx(n_windows=4, window_s=5.0, pool=100, foot=50):
    def nw(w):
        assert w == window_s
        return n_windows

    return SimpleNamespace(n_windows=nw, pool_bytes=pool, footprint_bytes=foot,
                           arrays=f"ARRAYS-{pool}")  # fmt: skip


def _shared(starts_r=None, max_nodes=6):
    ncfg = NodeConfig(window_s=5.0, slo_ms=SLO_MS)
    cfg = PlanConfig(gpus=("g",), routers=("jsq",), max_nodes=max_nodes, attainment=0.9, seed=3,
                     oracle=OracleConfig(coarse_step=0.25))  # fmt: skip
    ctxs = [_ctx(n_windows=99), _ctx()]
    starts = {(1, p): 3 for p in ("best-static", "emb-max", "nan-at-4")}
    r = {(1, "best-static"): 0.75, (1, "nan-at-4"): 0.6} if starts_r is None else starts_r
    return (ctxs, ncfg, cfg, starts, r, {})


def _one(shared, gi, spec, router):
    (combo,) = run._combos(shared, (gi, spec, (router,)))
    return combo


def test_combo_search_counts_and_cluster_config(meets_calls):
    shared = _shared()
    combo = _one(shared, 1, "best-static", "jsq")
    ctxs, ncfg, cfg, *_ = shared
    assert (combo.gpu, combo.policy, combo.router) == (1, "best-static", "jsq")
    # start 3 fails, 4 passes: N = 4, then 5 is checked
    assert combo.search.nodes == 4 and not combo.search.non_monotone
    assert combo.search.evaluated == (Point(3, False, 30.0, 0.6, 0.3),
                                      Point(4, True, 19.0, 0.95, 0.4))  # fmt: skip
    assert [c.ccfg.nodes for c in meets_calls] == [3, 4]
    for c in meets_calls:
        assert c.ctx is ctxs[1] and c.spec == "best-static" and c.oracle is cfg.oracle
        assert c.attainment == 0.9
        assert (c.ccfg.router, c.ccfg.node, c.ccfg.seed) == ("jsq", ncfg, 3)
    # the stored hint first; a passing size's r is the next size's hint
    assert [c.hint for c in meets_calls] == [0.75, 0.75]
    # requests and within-SLO (sojourn <= 0.02 s) per window, four windows each
    want = {3: ([2, 0, 3, 0], [2, 0, 1, 0], 0.3), 4: ([0, 2, 1, 0], [0, 2, 0, 0], 0.4)}
    assert sorted(combo.counts) == [3, 4]
    for n, (size, met, r) in want.items():
        got = combo.counts[n]
        assert got[0].tolist() == size and got[1].tolist() == met and got[2] == r
        assert got[0].dtype == np.int64 and got[1].dtype == np.int64


def test_combo_checks_n_plus_one_when_asked(meets_calls):
    ctxs, ncfg, cfg, starts, r, ceil = _shared()
    shared = (ctxs, ncfg, dataclasses.replace(cfg, check_monotone=True), starts, r, ceil)
    combo = _one(shared, 1, "best-static", "jsq")
    assert [c.ccfg.nodes for c in meets_calls] == [3, 4, 5]
    assert [c.hint for c in meets_calls] == [0.75, 0.75, 0.4]
    assert combo.counts[5][0].tolist() == [1, 0, 0, 0] and combo.counts[5][2] == 0.5


def test_combo_hint_kept_when_no_ratio(meets_calls):
    _one(_shared(), 1, "nan-at-4", "jsq")
    assert [c.hint for c in meets_calls] == [0.6, 0.6]  # 4 passes with r NaN: kept
    meets_calls.clear()
    _one(_shared(starts_r={}), 1, "emb-max", "jsq")
    assert [c.hint for c in meets_calls] == [0.5, 0.5]  # no stored r: 0.5


def test_combo_max_nodes_from_the_config(meets_calls):
    combo = _one(_shared(max_nodes=4), 1, "best-static", "jsq")
    assert combo.search.nodes == 4 and [c.ccfg.nodes for c in meets_calls] == [3, 4]
    meets_calls.clear()
    combo = _one(_shared(max_nodes=3), 1, "best-static", "jsq")
    assert combo.search.nodes is None and [c.ccfg.nodes for c in meets_calls] == [3]


def test_routers_start_from_the_last_routers_answer(meets_calls):
    # jsq searches from the first guess (3: fails, 4 passes); helm starts at 4 with the r that
    # passed there, so it costs its two confirming sizes
    got = run._combos(_shared(), (1, "best-static", ("jsq", "helm")))
    assert [(c.router, c.search.nodes) for c in got] == [("jsq", 4), ("helm", 4)]
    assert [(c.ccfg.router, c.ccfg.nodes, c.hint) for c in meets_calls] == [
        ("jsq", 3, 0.75), ("jsq", 4, 0.75), ("helm", 4, 0.4), ("helm", 3, 0.4)]  # fmt: skip


def test_a_capped_curve_s_guess_is_a_ceiling_for_the_first_router_only(meets_calls):
    # every size from 4 passes (REQS); with a ceiling of 6 (a curve stopped at its request
    # budget: one node's capacity a lower bound) jsq bisects [1, 6] from below: 3 fails, 4
    # passes, and 6 and 5 are never simulated; helm starts from jsq's answer, galloping down
    ctxs, ncfg, cfg, _, r, _ = _shared()
    shared = (ctxs, ncfg, cfg, {(1, "best-static"): 6}, r, {(1, "best-static"): True})
    got = run._combos(shared, (1, "best-static", ("jsq", "helm")))
    assert [(c.router, c.search.nodes) for c in got] == [("jsq", 4), ("helm", 4)]
    assert [(c.ccfg.router, c.ccfg.nodes) for c in meets_calls] == [
        ("jsq", 3), ("jsq", 4), ("helm", 4), ("helm", 3)]  # fmt: skip
    # the same guess as an estimate: 6 and 5 pass, 3 fails, then 4
    meets_calls.clear()
    got = run._combos(shared[:5] + ({},), (1, "best-static", ("jsq",)))
    assert [c.ccfg.nodes for c in meets_calls] == [6, 5, 3, 4] and got[0].search.nodes == 4


def test_a_one_node_fleet_is_evaluated_once_for_all_routers(monkeypatch):
    # every size from 2 passes; each router's search confirms N = 2 with N - 1 = 1, which is
    # the same fleet behind every router: simulated once per hint, shared by the others
    seen = []

    def meets(ctx, ccfg, spec, oracle, attainment, hint=0.5):
        seen.append((ccfg.router, ccfg.nodes, hint))
        n = ccfg.nodes
        return SimpleNamespace(passes=n >= 2, p99_ms=40.0 / n, slo_attainment=0.5 * n,
                               sojourn_s=np.array([0.01 * n]), window_idx=np.array([n]),
                               ratio=0.2 if n >= 2 else 0.1)  # fmt: skip

    monkeypatch.setattr(evaluate, "meets", meets)
    ctxs, ncfg, cfg, starts, _, ceil = _shared()
    starts = {(1, "best-static"): 2}
    shared = (ctxs, ncfg, cfg, starts, {(1, "best-static"): 0.2}, ceil)
    got = run._combos(shared, (1, "best-static", ("jsq", "helm", "affinity")))
    assert seen == [("jsq", 2, 0.2), ("jsq", 1, 0.2), ("helm", 2, 0.2), ("affinity", 2, 0.2)]
    first = got[0]
    for c in got:  # every router's search saw N - 1 = 1 fail with the one evaluation's figures
        assert c.search.nodes == 2
        assert c.search.at[1] == first.search.at[1] == Point(1, False, 40.0, 0.5, 0.1)
        assert [a.tolist() for a in c.counts[1][:2]] == [[0, 1, 0, 0], [0, 1, 0, 0]]
    # a different first r is another best-static search: evaluated again
    seen.clear()
    run._combos((ctxs, ncfg, cfg, {(1, "best-static"): 1}, {(1, "best-static"): 0.7}, ceil),
                (1, "best-static", ("jsq", "helm")))  # fmt: skip
    assert seen == [("jsq", 1, 0.7), ("jsq", 2, 0.7), ("helm", 2, 0.2), ("helm", 1, 0.2)]


# ---- plan ------------------------------------------------------------------------------------


class RecordingExecutor:
    def __init__(self):
        self.calls = []
        self.views = []

    def share(self, obj):
        # an equal copy, as a process pool's view, whose arrays say they are the view's
        view = [SimpleNamespace(**{**vars(c), "arrays": f"VIEW-{c.arrays}"}) for c in obj]
        self.views.append((obj, view))
        return view

    def map(self, fn, items, *, shared=None, progress=None, label=None):
        self.calls.append(SimpleNamespace(fn=fn, items=list(items), shared=shared,
                                          progress=progress, label=label))  # fmt: skip
        return [fn(shared, it) for it in items]


SCALING = SimpleNamespace(qps_after=100.0)
MAX_QPS = {"emb-max": 30.0, "best-static": 12.5, "kv-max": math.nan, "static:0.3": 1000.0}
RATIO = {"best-static": 0.25, "kv-max": math.nan}


@pytest.fixture
def stubs(monkeypatch):
    log = SimpleNamespace(calls=[], ls=[], lc=[], lc_calls=0, combos=[], built=None)
    model = SimpleNamespace(name="M", default_slo_ms=42.0)

    def rec(name, ret):
        def f(*a, **kw):
            log.calls.append((name, a, kw))
            return ret(*a, **kw) if callable(ret) else ret

        return f

    monkeypatch.setattr(run, "load_model", rec("load_model", model))
    monkeypatch.setattr(run, "gpu_setups", rec("gpu_setups", lambda cfg, m: [_gs("auto", 1.0)]))
    monkeypatch.setattr(run, "default_policies", lambda: ("best-static", "kv-max"))
    monkeypatch.setattr(run, "planned_trace", rec("planned_trace", ("SCALED", SCALING)))
    monkeypatch.setattr(run, "gpu_pools", rec("gpu_pools", lambda t, c, m, s: [
        f"POOL-{x.gpu.name}" for x in s]))  # fmt: skip
    monkeypatch.setattr(run, "from_table", rec("from_table", "ARRAYS"))
    monkeypatch.setattr(run, "require_rate", rec("require_rate", None))
    pools = iter([111, 222, 333])
    monkeypatch.setattr(run, "prepare_context",
                        rec("prepare_context", lambda *a, **kw: _ctx(pool=next(pools))))  # fmt: skip

    def start_factor(ls):
        log.ls.append(ls)
        return {"g0": 4.0, "g1": 8.0, "auto": 1.0}[ls.gpu.name]

    def load_curves(lss, policies, factors, *, refine_steps, executor, progress):
        log.lc_calls += 1  # every GPU's curve in one call (its steps share the workers)
        out = []
        for ls, fs in zip(lss, factors, strict=True):
            log.lc.append((ls, policies, fs, refine_steps, executor, progress))
            out.append(SimpleNamespace(max_qps={p: MAX_QPS[p] for p in policies},
                                       ratio_at_max={p: RATIO[p] for p in policies
                                                     if p in RATIO},
                                       capped={p: p == "emb-max" for p in policies}))  # fmt: skip
        return out

    def combos(shared, item):
        gi, p, routers = item
        log.combos += [(shared, (gi, p, r)) for r in routers]
        return [("COMBO", gi, p, r) for r in routers]

    def build_result(*a):
        log.built = a
        return "RESULT"

    monkeypatch.setattr(run, "start_factor", start_factor)
    monkeypatch.setattr(run, "load_curves", load_curves)
    monkeypatch.setattr(run, "_combos", combos)
    monkeypatch.setattr(run, "build_result", build_result)
    log.model = model
    return log


def _gs(name, price):
    return SimpleNamespace(gpu=SimpleNamespace(name=name), latency=f"lat-{name}",
                           latency_profile=f"prof-{name}", price_per_hour=price)  # fmt: skip


def _plan_cfg(**kw):
    base = {"gpus": ("g0", "g1"), "model": "some-model", "policies": ("emb-max", "best-static", "emb-max"),
            "routers": ("helm", "jsq", "helm"), "baseline_router": "jsq", "max_nodes": 9,
            "pool_bytes": 1000, "pool_fraction": None, "attainment": 0.97, "seed": 5,
            "load_refine_steps": 3, "load_max_requests": 777, "scale_by": "time",
            "node": NodeConfig(window_s=5.0), "oracle": OracleConfig(coarse_step=0.25),
            "frontier": False, "headroom_steps": 0}  # fmt: skip
    return PlanConfig(**(base | kw))


def test_plan_hands_every_step_its_arguments(stubs):
    cfg = _plan_cfg()
    setups = [_gs("g0", 2.0), _gs("g1", 3.0)]
    ex, prog = RecordingExecutor(), object()
    assert run.plan("TABLE", cfg, setups=setups, executor=ex, progress=prog) == "RESULT"
    names = [c[0] for c in stubs.calls]
    assert "gpu_setups" not in names  # the given setups replace cfg's GPUs
    assert stubs.calls[0] == ("load_model", ("some-model",), {})
    (_, (table, cfg_seen, window_s), _) = next(c for c in stubs.calls if c[0] == "planned_trace")
    assert (table, cfg_seen, window_s) == ("TABLE", cfg, 5.0)
    assert "from_table" not in names  # arrays are scaled as they are
    # the pools come from the trace as given, before the scaling (the one pool rule)
    assert names.index("gpu_pools") < names.index("planned_trace")
    assert next(c for c in stubs.calls if c[0] == "gpu_pools")[1] == ("TABLE", cfg, stubs.model,
                                                                        setups)  # fmt: skip
    # the arrays are checked for an arrival rate before they are scaled
    assert names.index("require_rate") < names.index("planned_trace")
    assert next(c for c in stubs.calls if c[0] == "require_rate")[1] == ("TABLE",)
    pcs = [c for c in stubs.calls if c[0] == "prepare_context"]
    assert [c[1:] for c in pcs] == [
        (("SCALED", s.gpu, stubs.model, s.latency),
         {"pool": f"POOL-{s.gpu.name}", "latency_profile": s.latency_profile})
        for s in setups
    ]  # fmt: skip
    # the node config: the config's node with the model's default SLO
    ncfg = stubs.lc[0][0].node
    assert ncfg.slo_ms == 42.0 and ncfg.window_s == 5.0
    # one load setup per GPU, with that GPU's context pool
    for ls, s, pool in zip(stubs.ls, setups, (111, 222), strict=True):
        # the shared view's arrays: a load point ships them by reference, not a copy
        assert ls.trace == f"VIEW-ARRAYS-{pool}"
        assert ls.gpu is s.gpu and ls.model is stubs.model
        assert ls.latency == s.latency and ls.latency_profile == s.latency_profile
        assert ls.pool_bytes == pool and ls.node == ncfg and ls.oracle is cfg.oracle
        assert (ls.scale_by, ls.attainment, ls.seed, ls.max_requests) == ("time", 0.97, 5, 777)
    # the load curves: policies deduplicated in order; factors around the start factor
    assert [(lc[0].gpu.name, lc[1], lc[2], lc[3]) for lc in stubs.lc] == [
        ("g0", ["emb-max", "best-static"], [2.0, 4.0, 8.0], 3),
        ("g1", ["emb-max", "best-static"], [4.0, 8.0, 16.0], 3),
    ]
    assert all(lc[4] is ex and lc[5] is prog for lc in stubs.lc) and stubs.lc_calls == 1
    # the combos: every GPU x policy, each over the routers (deduplicated in order)
    (call,) = ex.calls
    assert call.items == [(g, p, ("helm", "jsq")) for g in (0, 1)
                          for p in ("emb-max", "best-static")]  # fmt: skip
    assert call.progress is prog and call.label((1, "emb-max", ("helm",))) == "g1 emb-max"
    ctxs, ncfg2, cfg2, starts, starts_r, ceilings = call.shared
    # the contexts are shared before the combos, and the shared view is what is used after
    ((given, view),) = ex.views
    assert ctxs is view and [c.pool_bytes for c in given] == [111, 222]
    assert [c.pool_bytes for c in ctxs] == [111, 222] and ncfg2 == ncfg and cfg2 is cfg
    # first guesses: ceil(100 / 30) = 4 for emb-max, ceil(100 / 12.5) = 8 for best-static
    assert starts == {(0, "emb-max"): 4, (0, "best-static"): 8, (1, "emb-max"): 4,
                      (1, "best-static"): 8}  # fmt: skip
    # best-static's r at its maximum load; NaN or none -> 0.5
    assert starts_r == {(0, "emb-max"): 0.5, (0, "best-static"): 0.25, (1, "emb-max"): 0.5,
                        (1, "best-static"): 0.25}  # fmt: skip
    # a curve stopped at its request budget (emb-max's here): its guess is a ceiling
    assert ceilings == {(0, "emb-max"): True, (0, "best-static"): False, (1, "emb-max"): True,
                        (1, "best-static"): False}  # fmt: skip
    assert [it for _, it in stubs.combos] == [(g, p, r) for g, p, rs in call.items for r in rs]
    built = stubs.built
    assert built[0] is cfg and built[1] == ncfg and built[2] is SCALING and built[3] == setups
    assert (
        built[4] is ctxs
        and [lc.max_qps for lc in built[5]] == [{"emb-max": 30.0, "best-static": 12.5}] * 2
    )
    assert built[6] == [("COMBO", *it) for _, it in stubs.combos]
    assert built[7:] == (("emb-max", "best-static"), ("helm", "jsq"), [])


def test_plan_densifies_a_table_with_the_plan_seed_first(stubs):
    table = pa.table({"ts_s": [0.0, 1.0]})
    run.plan(table, _plan_cfg(), setups=[_gs("g0", 2.0)])
    names = [c[0] for c in stubs.calls]
    assert names.index("from_table") < names.index("planned_trace")
    assert next(c for c in stubs.calls if c[0] == "from_table")[1:] == ((table,), {"seed": 5})
    assert next(c for c in stubs.calls if c[0] == "planned_trace")[1][0] == "ARRAYS"


def test_plan_slo_max_nodes_and_no_load_curve(stubs):
    cfg = _plan_cfg(slo_ms=9.0, max_nodes=5, load_curve=False, policies=("emb-max", "kv-max"),
                    routers=("jsq",), pool_bytes=None, pool_fraction=0.25)  # fmt: skip
    run.plan("TABLE", cfg, setups=[_gs("g0", 2.0)])
    (pc,) = [c for c in stubs.calls if c[0] == "prepare_context"]
    assert pc[2]["pool"] == "POOL-g0"
    ls, pols, factors, steps, ex, prog = stubs.lc[0]
    assert ls.node.slo_ms == 9.0
    assert factors == [4.0] and steps == 2  # the start factor alone, two bisections
    assert isinstance(ex, SerialExecutor) and prog is None
    # the baseline (best static behind jsq) is planned too, starting where the first policy does
    assert [it for _, it in stubs.combos] == [(0, "emb-max", "jsq"), (0, "kv-max", "jsq"),
                                              (0, "best-static", "jsq")]  # fmt: skip
    _, _, _, starts, starts_r, _ = stubs.combos[0][0]
    # emb-max: ceil(100 / 30) = 4, capped at 5; kv-max: NaN max QPS -> 1
    assert starts == {(0, "emb-max"): 4, (0, "kv-max"): 1, (0, "best-static"): 4}
    assert starts_r == {(0, "emb-max"): 0.5, (0, "kv-max"): 0.5}


def test_plan_caps_the_first_guess_and_uses_default_policies(stubs):
    cfg = _plan_cfg(max_nodes=3, policies=None, routers=("jsq",), slo_ms=None)
    run.plan("TABLE", cfg)
    assert ("gpu_setups", (cfg, stubs.model), {}) in stubs.calls
    assert stubs.lc[0][0].gpu.name == "auto" and stubs.lc[0][1] == ["best-static", "kv-max"]
    _, _, _, starts, *_ = stubs.combos[0][0]
    assert starts == {(0, "best-static"): 3, (0, "kv-max"): 1}  # ceil(100 / 12.5) = 8 -> 3
    # the baseline is planned already: nothing added
    assert [it for _, it in stubs.combos] == [(0, "best-static", "jsq"), (0, "kv-max", "jsq")]


def test_plan_baseline_router_added_for_every_gpu(stubs):
    # the baseline router is not planned: best static behind it is added on each GPU
    cfg = _plan_cfg(routers=("helm",), baseline_router="jsq", policies=("static:0.3",))
    run.plan("TABLE", cfg, setups=[_gs("g0", 2.0), _gs("g1", 3.0)])
    items = [it for _, it in stubs.combos]
    assert items == [(0, "static:0.3", "helm"), (1, "static:0.3", "helm"),
                     (0, "best-static", "jsq"), (1, "best-static", "jsq")]  # fmt: skip
    _, _, _, starts, *_ = stubs.combos[0][0]
    # static:0.3: ceil(100 / 1000) = 1, and the baseline starts there too
    assert starts == {(0, "static:0.3"): 1, (1, "static:0.3"): 1, (0, "best-static"): 1,
                      (1, "best-static"): 1}  # fmt: skip


def test_plan_spells_an_aliased_policy_by_its_name_once(stubs):
    cfg = _plan_cfg(routers=("jsq",), policies=("emb_max", "kv-max", "kv_max", "best_static"))
    run.plan("TABLE", cfg, setups=[_gs("g0", 2.0)])
    assert stubs.lc[0][1] == ["emb-max", "kv-max", "best-static"]
    # best_static is the baseline by its canonical name: planned once, nothing added
    assert [it for _, it in stubs.combos] == [(0, "emb-max", "jsq"), (0, "kv-max", "jsq"),
                                              (0, "best-static", "jsq")]  # fmt: skip


def test_plan_rejects_an_unknown_policy_before_any_work(stubs):
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        run.plan("TABLE", _plan_cfg(policies=("emb-max", "nope")), setups=[_gs("g0", 1.0)])
    assert [c[0] for c in stubs.calls] == ["load_model"] and not stubs.lc
