"""The single-node load curve (``plan/loadcurve.py``) and one fleet at one load (``plan/evaluate.py``).

On a real node: monotone P99 in load, and a maximum QPS that passes while 10% more fails.

With stand-ins: The load curve's widening and bisection, ``meets``' best-static search and the start factor,
each driven by a stand-in simulation whose pass/fail edge is known.

The stand-ins replace only the simulation (a load point passes iff its factor is at most a
threshold; a static r has a fixed P99 and attainment), so every figure these tests expect is
worked out from the module's contract by hand: a policy passing at factors 1 and 2 and failing
from 3 on is widened to 4, then bisected geometrically, which after six steps brackets 3 within
a ratio of 2^(1/64); a best-static search tried nearest the hint 0.5 first on the 0.25 grid
visits 0.5, 0.25, 0.75, the edge points 0.02 and 0.98, 0, 1, then brackets the lowest P99 by
golden steps on the 0.01 lattice."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from brute import coeff_latency
from conftest import small_table

from helm_plan.arrays import from_table
from helm_plan.errors import ConfigError
from helm_plan.oracle import OracleConfig
from helm_plan.plan import evaluate, loadcurve
from helm_plan.plan.loadcurve import LoadPoint, LoadSetup, load_curve, run_point, start_factor
from helm_plan.plan.scale import MAX_FACTOR
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, simulate_node


def _setup(slo_ms=3.0):
    t = small_table(1500, n_users=120, n_items=800, max_new=4, n_candidates=8,
                    rate_qps=100.0, seed=8)  # fmt: skip
    return LoadSetup(
        trace=from_table(t, seed=0), gpu=load_gpu("a100-80g"), model=load_model("gr-small"),
        latency=coeff_latency(), latency_profile=None, pool_bytes=4_000_000,
        node=NodeConfig(slo_ms=slo_ms, window_s=2.0),
        oracle=OracleConfig(trials=0, coarse_step=0.5), attainment=0.95,
    )  # fmt: skip


def test_max_qps_passes_and_ten_percent_more_fails():
    s = _setup()
    lc = load_curve(s, ["static:0.3", "best-static"], [1.0, 4.0], refine_steps=6)
    for p in ("static:0.3", "best-static"):
        pts = lc.points.filter(lc.points["policy"] == p).sort("factor")
        # P99 grows with load (a queue gets slower as it fills)
        p99 = pts["p99_ms"].to_numpy()
        assert np.all(np.diff(p99) > -1e-9) or p99[-1] > p99[0]
        q = lc.max_qps[p]
        assert math.isfinite(q)
        best = pts.filter(pts["qps"] == q).row(0, named=True)
        assert best["passes"]
        above = run_point(s, (p, best["factor"] * 1.1))
        assert not above.passes
    # choosing the split per load never does worse than one fixed split
    assert lc.max_qps["best-static"] >= lc.max_qps["static:0.3"] * 0.999


# ---- with stand-in simulations ----------------------------------------------------------------

# ---- load_curve ---------------------------------------------------------------------------

QPS_PER_FACTOR = 7.0
THRESH = {"a": 3.0, "b": 0.3, "c": math.inf, "d": -1.0, "e": 3.0}
"""Each stand-in policy passes iff the factor is at most this (d never, c always); e also
fails below factor 1.5 (a non-monotone policy)."""


def _stand_in(n=100, span=9.9, t0=0.0, ts=None, **kw) -> LoadSetup:
    ts = np.linspace(t0, t0 + span, n) if ts is None else np.asarray(ts, np.float64)
    trace = SimpleNamespace(ts_s=ts, n_requests=len(ts))  # what the curve reads of the arrays
    base = {"gpu": None, "model": None, "latency": None, "latency_profile": None,
            "pool_bytes": 0, "node": None, "oracle": None, "max_requests": 1000}  # fmt: skip
    return LoadSetup(trace=trace, **(base | kw))


@pytest.fixture
def calls(monkeypatch):
    """Replace the one-node simulation by the thresholds above; record (policy, factor, hint)."""
    seen: list[tuple[str, float, float | None]] = []

    def fake(shared, item):
        assert isinstance(shared, LoadSetup)  # every batch gets the setup
        spec, factor, *rest = item
        if spec == "boom":
            raise ConfigError("no GPU")
        seen.append((spec, factor, rest[0] if rest else None))
        ok = factor <= THRESH[spec] and not (spec == "e" and factor < 1.5)
        ratio = math.nan if spec == "b" else factor / 100  # "b" is not a best-static search
        return LoadPoint(spec, factor, QPS_PER_FACTOR * factor, 1.0 if ok else 9.0,
                         0.99 if ok else 0.5, ok, ratio)  # fmt: skip

    monkeypatch.setattr(loadcurve, "run_point", fake)
    return seen


def _factors(calls, p):
    return [f for q, f, _ in calls if q == p]


def test_widen_then_bisect_each_edge(calls):
    s = _stand_in()  # 100 rows, max 1000 requests: the cap is factor 10
    ticks = []
    # the defaults: six bisection steps, ten widenings
    lc = load_curve(s, ["a", "b", "c", "d"], [1.0, 2.0], progress=lambda d, t: ticks.append((d, t)))
    assert ticks == [(i, 8) for i in range(9)]  # the first batch: 4 policies x 2 loads
    # a: passes 1, 2; doubling to 4 fails; six geometric bisections of (2, 4)
    fa = _factors(calls, "a")
    assert fa[:3] == [1.0, 2.0, 4.0] and len(fa) == 3 + 6
    best_a = max(f for f in fa if f <= 3.0)
    assert 3.0 / 2 ** (1 / 64) < best_a <= 3.0
    assert lc.max_qps["a"] == pytest.approx(QPS_PER_FACTOR * best_a)
    assert lc.ratio_at_max["a"] == pytest.approx(best_a / 100)
    # b: fails 1 and 2; halving to 0.5 (fails) then 0.25 (passes); bisect (0.25, 0.5)
    fb = _factors(calls, "b")
    assert fb[:4] == [1.0, 2.0, 0.5, 0.25] and len(fb) == 4 + 6
    best_b = max(f for f in fb if f <= 0.3)
    assert 0.3 / 2 ** (1 / 64) < best_b <= 0.3
    assert lc.max_qps["b"] == pytest.approx(QPS_PER_FACTOR * best_b)
    assert math.isnan(lc.ratio_at_max["b"])
    # c: always passes; doubles 4, 8, then the cap 10 (16 would pass it) and stops there
    assert _factors(calls, "c") == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert lc.max_qps["c"] == pytest.approx(QPS_PER_FACTOR * 10.0)
    assert lc.ratio_at_max["c"] == pytest.approx(0.1)
    # d: never passes; ten halvings, then no maximum
    assert _factors(calls, "d") == [1.0, 2.0] + [2.0**-k for k in range(1, 11)]
    assert math.isnan(lc.max_qps["d"]) and math.isnan(lc.ratio_at_max["d"])
    assert lc.capped == {"a": False, "b": False, "c": True, "d": False}
    assert lc.base_qps == pytest.approx(100 / 9.9)
    # one row per evaluated load, sorted by policy then factor
    pts = lc.points
    assert pts.height == len(calls)
    assert pts.columns == ["policy", "factor", "qps", "p99_ms", "slo_attainment", "passes",
                           "ratio"]  # fmt: skip
    assert pts["policy"].to_list() == sorted(pts["policy"].to_list())
    for p in "abcd":
        f = pts.filter(pts["policy"] == p)["factor"].to_list()
        assert f == sorted(_factors(calls, p))


def test_every_widening_and_bisection_step_hints_the_r_that_passed_below(calls):
    load_curve(_stand_in(), ["a", "b", "c"], [1.0, 2.0], refine_steps=6)
    for p in "ac":
        mine = [(f, h) for q, f, h in calls if q == p]
        for i, (f, h) in enumerate(mine):
            if i < 2:  # the first factors carry no hint
                assert h is None
                continue
            passed = [g for g, _ in mine[:i] if g <= THRESH[p]]
            assert h == pytest.approx(max(passed) / 100), (p, f)
    # b's r is NaN (not a best-static answer): its bisection steps get the even split
    hb = [h for q, _, h in calls if q == "b"]
    assert hb[:4] == [None] * 4 and hb[4:] == [0.5] * 6


def test_the_cap_swallows_factors_and_spreads_them_below_it(calls):
    # 200 rows, at most 800 requests: factor 4 at most; 5, 50 and 100 all clamp to it
    lc = load_curve(_stand_in(n=200, max_requests=800), ["c"], [5.0, 50.0, 100.0])
    assert _factors(calls, "c") == [1.0, 2.0, 4.0]  # 4 / 4, 4 / 2 and the cap
    assert lc.capped == {"c": True} and lc.max_qps["c"] == pytest.approx(4 * QPS_PER_FACTOR)
    calls.clear()
    # factors below the cap are kept as given
    load_curve(_stand_in(n=200, max_requests=800), ["c"], [0.5, 3.0])
    assert _factors(calls, "c") == [0.5, 3.0, 4.0]


def test_time_scaling_is_capped_only_by_max_factor(calls):
    lc = load_curve(_stand_in(scale_by="time", max_requests=10), ["a"], [1.0, 2.0],
                    refine_steps=0)  # fmt: skip
    assert _factors(calls, "a") == [1.0, 2.0, 4.0]  # not capped at 10 / 100 rows
    assert lc.max_qps["a"] == pytest.approx(2 * QPS_PER_FACTOR)
    calls.clear()
    load_curve(_stand_in(scale_by="time"), ["c"], [MAX_FACTOR * 0.75], max_widen=3)
    assert _factors(calls, "c") == [MAX_FACTOR * 0.75, MAX_FACTOR]


def test_max_widen_bounds_the_doublings(calls):
    lc = load_curve(_stand_in(), ["d"], [1.0], max_widen=3)
    assert _factors(calls, "d") == [1.0, 0.5, 0.25, 0.125]
    assert math.isnan(lc.max_qps["d"])
    calls.clear()
    lc = load_curve(_stand_in(max_requests=10**9), ["c"], [1.0], max_widen=2)
    assert _factors(calls, "c") == [1.0, 2.0, 4.0]
    assert lc.capped == {"c": False}  # stopped by max_widen, not at the cap


def test_base_qps_of_a_one_row_trace_is_nan(calls):
    lc = load_curve(_stand_in(n=1), ["c"], [1.0], max_widen=1)
    assert math.isnan(lc.base_qps)
    lc = load_curve(_stand_in(n=50, span=5.0), ["c"], [1.0], max_widen=1)
    assert lc.base_qps == pytest.approx(10.0)


class _CountingExecutor:
    """The serial executor's answers; counts its maps."""

    def __init__(self):
        self.maps = []

    def map(self, fn, items, *, shared=None, progress=None, label=None):
        self.maps.append(len(items))
        return [fn(shared, it) for it in items]


def test_several_setups_step_together_and_each_curve_is_its_own(monkeypatch):
    # two GPUs' curves in one call: every step of both in one map, and each curve the one
    # load_curve gives for its setup alone (a's edge differs per setup, b never passes on g1)
    seen = []

    def fake(shared, item):
        spec, factor, *_ = item
        g = shared.gpu
        seen.append((g, spec, factor))
        ok = factor <= {"g0": THRESH, "g1": {"a": 0.7, "b": -1.0, "c": math.inf}}[g][spec]
        return LoadPoint(spec, factor, QPS_PER_FACTOR * factor, 1.0 if ok else 9.0,
                         0.99 if ok else 0.5, ok, factor / 100)  # fmt: skip

    monkeypatch.setattr(loadcurve, "run_point", fake)
    s0, s1 = _stand_in(gpu="g0"), _stand_in(n=200, max_requests=800, gpu="g1")
    args = (["a", "b", "c"],)
    alone = []
    for s, fs in ((s0, [1.0, 2.0]), (s1, [0.5, 3.0])):
        ex = _CountingExecutor()
        alone.append((load_curve(s, *args, fs, refine_steps=3, max_widen=4, executor=ex),
                      ex.maps))  # fmt: skip
    ex = _CountingExecutor()
    seen.clear()
    both = loadcurve.load_curves([s0, s1], *args, [[1.0, 2.0], [0.5, 3.0]], refine_steps=3,
                                 max_widen=4, executor=ex)  # fmt: skip
    for got, (want, _) in zip(both, alone, strict=True):
        assert got.points.equals(want.points)
        for f in ("max_qps", "capped", "base_qps", "ratio_at_max"):  # repr: NaN equals NaN
            assert repr(getattr(got, f)) == repr(getattr(want, f)), f
    # as many maps as the longer curve alone, each holding both setups' points of that step
    assert len(ex.maps) == max(len(m) for _, m in alone)
    assert sum(ex.maps) == sum(sum(m) for _, m in alone) == len(seen)
    assert ex.maps[0] == 12 and {g for g, *_ in seen} == {"g0", "g1"}


def test_bad_loads_and_attainment_are_refused(calls):
    with pytest.raises(ConfigError, match="^load factor must be positive, got 0.0"):
        load_curve(_stand_in(), ["a"], [1.0, 0.0])
    with pytest.raises(ConfigError, match=r"^attainment must be in \[0.0, 1.0\], got 1.5"):
        load_curve(_stand_in(attainment=1.5), ["a"], [1.0])
    assert calls == []
    # a failing load point is named by its policy and factor
    with pytest.raises(ConfigError, match="^load point boom x2.5: no GPU"):
        load_curve(_stand_in(), ["boom"], [2.5])


def test_a_failure_below_a_pass_is_not_the_edge(calls):
    # e fails at 1 and passes at 2: the edge above is found by doubling to 4, then bisected
    lc = load_curve(_stand_in(), ["e"], [1.0, 2.0], refine_steps=3)
    fe = _factors(calls, "e")
    assert fe[:3] == [1.0, 2.0, 4.0] and len(fe) == 6
    assert all(2.0 < f < 4.0 for f in fe[3:])
    assert lc.max_qps["e"] == pytest.approx(QPS_PER_FACTOR * max(f for f in fe if f <= 3.0))


def test_a_load_above_a_failing_one_is_not_simulated(monkeypatch, calls):
    # the plan's three loads (f0/2, f0, 2 f0): the two lowest in one map, then 2 f0 only where
    # f0 passed; a: passes 1 and 2, so 4 runs (and fails); b: fails at 2 (passes 1), so 4 is
    # never run; e: fails at 1 but passes at 2, so 4 runs (the edge is above 2); d never passes
    monkeypatch.setitem(THRESH, "b", 1.5)  # b passes at 1 and fails at 2 here
    ex = _CountingExecutor()
    lc = load_curve(_stand_in(), ["a", "b", "e", "d"], [1.0, 2.0, 4.0], refine_steps=6,
                    max_widen=3, executor=ex)  # fmt: skip
    assert ex.maps[:2] == [8, 2]  # 4 policies x 2 loads; then 4 for a and e only
    assert _factors(calls, "a")[:3] == [1.0, 2.0, 4.0]
    assert _factors(calls, "e")[:3] == [1.0, 2.0, 4.0]
    fb = _factors(calls, "b")
    assert fb[:2] == [1.0, 2.0] and 4.0 not in fb and len(fb) == 2 + 6  # bisected (1, 2) at once
    assert _factors(calls, "d") == [1.0, 2.0, 0.5, 0.25, 0.125]  # halved from the lowest
    # the same edges, bisected to the same precision, as if every load had been run
    for p, edge in (("a", 3.0), ("b", 1.5), ("e", 3.0)):
        best = max(f for f in _factors(calls, p) if f <= edge)
        assert edge / 2 ** (1 / 64) < best <= edge, p
        assert lc.max_qps[p] == pytest.approx(QPS_PER_FACTOR * best)
    assert math.isnan(lc.max_qps["d"])
    assert lc.points.height == len(calls)


@pytest.mark.parametrize(
    ("ts", "want"),
    [
        ([5.0, 6.0], 2.0),  # two requests one second apart
        ([0.0, 0.0, 1.0], 3.0),  # a tie at the start
        ([0.0, 1.0, 1.0], 3.0),  # a tie at the end
        ([4.0, 4.0, 4.0], math.nan),  # no time passes: no rate
        ([100.0, 102.0, 103.0, 104.0], 1.0),  # measured from the first request, not from 0
    ],
)
def test_base_qps_is_requests_over_the_trace_span(calls, ts, want):
    lc = load_curve(_stand_in(ts=ts), ["c"], [1.0], max_widen=1)
    if math.isnan(want):
        assert math.isnan(lc.base_qps)
    else:
        assert lc.base_qps == pytest.approx(want)


def test_a_load_point_scales_builds_and_asks_meets(monkeypatch):
    seen: dict = {}

    def fake_scale(arrays, factor, *, by, window_s, seed):
        seen["scale"] = (arrays, factor, by, window_s, seed)
        return "SCALED", SimpleNamespace(qps_after=123.0)

    def fake_prepare(arrays, gpu, model, latency, *, pool_bytes, latency_profile):
        seen["prepare"] = (arrays, gpu, model, latency, pool_bytes, latency_profile)
        return "CTX"

    def fake_meets(ctx, cfg, spec, oracle, attainment, hint):
        seen["meets"] = (ctx, cfg, spec, oracle, attainment, hint)
        return SimpleNamespace(p99_ms=4.5, slo_attainment=0.97, passes=True, ratio=0.4)

    monkeypatch.setattr(loadcurve, "scale_arrays", fake_scale)
    monkeypatch.setattr(loadcurve, "prepare_context", fake_prepare)
    monkeypatch.setattr(loadcurve, "meets", fake_meets)
    node = NodeConfig(window_s=3.0)
    s = _stand_in(gpu="GPU", model="MODEL", latency="LAT", latency_profile="PROF", pool_bytes=77,
               node=node, oracle="ORACLE", scale_by="time", attainment=0.97, seed=5)  # fmt: skip
    pt = loadcurve.run_point(s, ("best-static", 2.5, 0.3))
    assert pt == LoadPoint("best-static", 2.5, 123.0, 4.5, 0.97, True, 0.4)
    assert seen["scale"] == (s.trace, 2.5, "time", 3.0, 5)
    assert seen["prepare"] == ("SCALED", "GPU", "MODEL", "LAT", 77, "PROF")
    ctx, cfg, spec, oracle, att, hint = seen["meets"]
    assert (ctx, spec, oracle, att, hint) == ("CTX", "best-static", "ORACLE", 0.97, 0.3)
    assert (cfg.nodes, cfg.node, cfg.seed) == (1, node, 5)
    loadcurve.run_point(s, ("emb-max", 1.0))  # no hint: an even split first
    assert seen["meets"][5] == 0.5


# ---- start_factor -------------------------------------------------------------------------


def _fake_node(monkeypatch, service_s, batch_size, window_idx):
    seen = {}

    def ctx(s, factor):
        assert isinstance(s, LoadSetup)
        seen["factor"] = factor
        return "ctx", None

    def sim(c, r, ccfg):
        assert c == "ctx" and isinstance(ccfg.node, SimpleNamespace)
        assert (ccfg.nodes, ccfg.router) == (1, loadcurve.LOAD_CURVE_ROUTER)
        seen["r"] = r
        return SimpleNamespace(service_s=np.array(service_s), batch_size=np.array(batch_size),
                               window_idx=np.array(window_idx))  # fmt: skip

    monkeypatch.setattr(loadcurve, "_context", ctx)
    monkeypatch.setattr(loadcurve, "simulate_cluster", sim)
    return seen


def test_start_factor_is_the_node_replays_figure():
    """The one-node fleet start_factor serves equals the node replay (simulate_node) it
    replaced: the same busiest window, so the same first load point."""
    s = _setup()
    ctx, _ = loadcurve._context(s, 1.0)
    res = simulate_node(ctx, 0.5, s.node)
    per_w = np.bincount(res.window_idx, weights=res.service_s / np.maximum(res.batch_size, 1))
    span = min(s.node.window_s, float(s.trace.ts_s[-1] - s.trace.ts_s[0]))
    want = min(0.8 / (per_w.max() / (span * s.node.slots)), MAX_FACTOR)
    assert 1.0 < want < MAX_FACTOR  # a load the node can take several times over
    assert start_factor(s) == want


def test_start_factor_by_hand(monkeypatch):
    # window 0: 0.4 / 2 + 0.3 = 0.5 s of work; window 1: 0.6 + 0.2 / 1 = 0.8 s (the peak);
    # a 2 s window on 2 streams is 4 slot-seconds: peak utilisation 0.2, so factor 0.8 / 0.2
    seen = _fake_node(monkeypatch, [0.4, 0.3, 0.6, 0.2], [2, 1, 1, 0], [0, 0, 1, 1])
    s = _stand_in(n=10, span=30.0, node=SimpleNamespace(window_s=2.0, slots=2))
    assert start_factor(s) == pytest.approx(4.0)
    assert start_factor(s, target_utilisation=0.5) == pytest.approx(2.5)
    assert seen == {"factor": 1.0, "r": 0.5}
    # a trace shorter than a window: utilisation over the trace's span, 0.8 s of work in
    # 0.25 s on 2 streams is 1.6; the trace starting late changes nothing
    node = SimpleNamespace(window_s=2.0, slots=2)
    assert start_factor(_stand_in(n=10, span=0.25, t0=50.0, node=node)) == pytest.approx(0.5)
    assert start_factor(_stand_in(ts=[7.0, 7.25], node=node)) == pytest.approx(0.5)


def test_start_factor_edges(monkeypatch):
    node = SimpleNamespace(window_s=2.0, slots=1)
    _fake_node(monkeypatch, [1e-9], [1], [0])  # an idle node: capped at MAX_FACTOR
    assert start_factor(_stand_in(n=10, node=node)) == MAX_FACTOR
    _fake_node(monkeypatch, [0.0, 0.0], [1, 1], [0, 0])  # no work at all: factor 1
    assert start_factor(_stand_in(n=10, node=node)) == 1.0
    # one request: its span is the window
    _fake_node(monkeypatch, [0.5], [1], [0])
    assert start_factor(_stand_in(n=1, node=node)) == pytest.approx(0.8 / (0.5 / 2.0))
    # requests all at one instant: no span to measure a rate over, factor 1
    assert start_factor(_stand_in(ts=[3.0, 3.0, 3.0], node=node)) == 1.0


# ---- meets: the best-static search --------------------------------------------------------

SLO = 10.0
ORACLE = OracleConfig(coarse_step=0.25)
CCFG = SimpleNamespace(node=SimpleNamespace(slo_ms=SLO))
CTX = SimpleNamespace(name="ctx")


def _fake_points(monkeypatch, table, oracle=ORACLE):
    """``table``: r -> (P99 ms, attainment); a spec not of the form static:r is looked up whole."""
    tried: list[str] = []
    expected_oracle = oracle

    def fake(ctx, ccfg, spec, oracle):
        assert (ctx, ccfg, oracle) == (CTX, CCFG, expected_oracle)  # passed through untouched
        tried.append(spec)
        key = float(spec.split(":")[1]) if spec.startswith("static:") else spec
        p99, att = table[key]
        # window_idx holds the call number, so an answer shows which simulation it came from
        return SimpleNamespace(overall={"p99_ms": p99, "slo_attainment": att},
                               sojourn_s=np.array([p99 / 1e3]),
                               window_idx=np.array([len(tried)]))  # fmt: skip

    monkeypatch.setattr(evaluate, "run_point", fake)
    return tried


def test_a_plain_policy_is_one_simulation(monkeypatch):
    tried = _fake_points(monkeypatch, {"emb-max": (SLO, 0.95), 0.3: (SLO + 1, 1.0)})
    ev = evaluate.meets(CTX, CCFG, "emb-max", ORACLE, 0.95)
    np.testing.assert_array_equal(ev.window_idx, [1])
    assert ev.passes and ev.p99_ms == SLO and ev.slo_attainment == 0.95  # both bounds inclusive
    assert math.isnan(ev.ratio) and ev.simulations == 1 and tried == ["emb-max"]
    assert not evaluate.meets(CTX, CCFG, "emb-max", ORACLE, 0.96).passes
    assert not evaluate.meets(CTX, CCFG, "static:0.3", ORACLE, 0.5).passes
    np.testing.assert_array_equal(ev.sojourn_s, [SLO / 1e3])


def test_best_static_tries_nearest_the_hint_and_stops_at_the_first_pass(monkeypatch):
    table = {0.0: (50, 0.5), 0.25: (20, 0.8), 0.5: (30, 0.7), 0.75: (5, 1.0), 1.0: (4, 1.0),
             0.98: (4.5, 1.0)}  # fmt: skip
    tried = _fake_points(monkeypatch, table)
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.99)
    # |r - 0.5|: 0.5, then 0.25 and 0.75 (a tie, lower r first); 0.75 passes
    assert tried == ["static:0.5", "static:0.25", "static:0.75"]
    assert ev.passes and ev.ratio == 0.75 and ev.simulations == 3
    assert ev.p99_ms == 5 and ev.slo_attainment == 1.0
    np.testing.assert_array_equal(ev.sojourn_s, [0.005])
    np.testing.assert_array_equal(ev.window_idx, [3])  # the third simulation's
    tried.clear()
    table[0.9] = (12, 0.9)
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.99, hint=0.9)
    # the hint first (off the grid, failing), then the edge point 0.98, nearer 0.9 than 1.0
    assert tried == ["static:0.9", "static:0.98"] and ev.ratio == 0.98
    assert ev.simulations == 2


def test_a_passing_hint_below_a_cliff_is_one_simulation(monkeypatch):
    # the cliff below: only r = 0.01 passes, off the grid. Hinted (it passed at the
    # neighbouring size), it answers at once; without the hint first, nine simulations
    # (the cliff test's FIRST, then 0.11 and 0.01). A hint outside [0, 1] is not simulated.
    tried = _fake_points(monkeypatch, CLIFF)
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.99, hint=0.01)
    assert tried == ["static:0.01"] and ev.passes and ev.ratio == 0.01
    assert ev.simulations == 1 and ev.p99_ms == 9
    tried.clear()
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.99, hint=-1.0)
    # the first points nearest -1, then the bracket's probes 0.01 (passes) before 0.11
    assert tried == ["static:0", "static:0.02", "static:0.25", "static:0.5", "static:0.75",
                     "static:0.98", "static:1", "static:0.01"]  # fmt: skip
    assert ev.ratio == 0.01 and ev.simulations == 8


# P99(r) with a cliff: a plateau (18-30 ms) from 0.02 up and only r = 0.01 within the SLO
CLIFF = {0.0: (50, 0.5), 0.02: (19, 0.9), 0.25: (21, 0.9), 0.5: (30, 0.7), 0.75: (20, 0.8),
         0.98: (40, 0.6), 1.0: (float("nan"), 0.0), 0.11: (18.5, 0.9), 0.01: (9, 0.995)}  # fmt: skip

# the first points on the 0.25 grid, nearest the hint 0.5 first: 0.02 and 0.98 (edge points)
# tie at 0.48 and 0 and 1 at 0.5, lower r first
FIRST = ["static:0.5", "static:0.25", "static:0.75", "static:0.02", "static:0.98", "static:0",
         "static:1"]  # fmt: skip


def test_best_static_finds_the_pass_below_a_cliff(monkeypatch):
    # A plateau (P99 18-30 ms) from 0.02 up, lowest at the edge point 0.02; r = 0 starves EMB
    # (50 ms) and only r = 0.01 meets the SLO: what a KV working set that fits below
    # r = 0.0125 does to P99(r). A grid and its half-steps never leave the plateau; an
    # exhaustive 0.01 lattice (the brute-force answer) finds 0.01, and so must the search.
    # Bracketing from 0.02: its neighbour 0 is not within flat_tol, so a golden step into
    # [0, 0.02] probes snap(0.02 - 0.382 * 0.02) = 0.01; 0.25 is 11% above the best, so
    # [0.02, 0.25] gets snap(0.02 + 0.382 * 0.23) = 0.11 beside it (0.11 first: nearer 0.5).
    table = dict(CLIFF)
    brute = [r / 100 for r in range(101) if table.get(r / 100, (99, 0))[0] <= SLO]
    assert brute == [0.01]
    tried = _fake_points(monkeypatch, table)
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.99)
    assert tried == [*FIRST, "static:0.11", "static:0.01"]
    assert ev.passes and ev.ratio == 0.01 and ev.simulations == 9 and ev.p99_ms == 9
    np.testing.assert_array_equal(ev.window_idx, [9])
    # and when nothing passes (a budget of two probes): the lowest-P99 r, failing, after all
    table[0.01] = (25, 0.9)
    two = OracleConfig(coarse_step=0.25, trials=2)
    tried = _fake_points(monkeypatch, table, two)
    ev = evaluate.meets(CTX, CCFG, "best-static", two, 0.99)
    assert tried == [*FIRST, "static:0.11", "static:0.01"] and ev.passes is False
    assert ev.ratio == 0.11 and ev.p99_ms == 18.5 and ev.slo_attainment == 0.9
    assert ev.simulations == 9
    np.testing.assert_array_equal(ev.sojourn_s, [0.0185])
    np.testing.assert_array_equal(ev.window_idx, [8])  # 0.11 was the eighth simulation


def test_best_static_brackets_inside_zero_one(monkeypatch):
    # the lowest P99 at r = 1 (a NaN P99 at 0 ranks last): the bracket probes only inside,
    # snap(1 - 0.382 * 0.02) = 0.99, after which the gap beside 1 is one lattice step
    table = {0.0: (math.nan, 0.0), 0.02: (45, 0.5), 0.25: (40, 0.5), 0.5: (30, 0.5),
             0.75: (20, 0.5), 0.98: (12, 0.5), 1.0: (11, 0.5), 0.99: (11.5, 0.5)}  # fmt: skip
    tried = _fake_points(monkeypatch, table)
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.9)
    assert tried[7:] == ["static:0.99"] and ev.simulations == 8
    assert ev.ratio == 1.0 and ev.p99_ms == 11 and not ev.passes
    # a P99 tie broken by the lower r when attainments tie too: 0 wins, and [0, 0.02] gets 0.01
    table = {0.0: (10.5, 0.5), 0.02: (13, 0.5), 0.25: (40, 0.5), 0.5: (30, 0.5),
             0.75: (20, 0.5), 0.98: (13, 0.5), 1.0: (10.5, 0.5), 0.01: (13, 0.5)}  # fmt: skip
    tried = _fake_points(monkeypatch, table)
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.9)
    assert tried[7:] == ["static:0.01"] and ev.ratio == 0.0


def test_a_nan_p99_tried_first_still_ranks_last(monkeypatch):
    # hint 0: r = 0 (NaN P99) is simulated first; the lowest P99 is still r = 1
    table = {0.0: (math.nan, 0.0), 0.02: (45, 0.5), 0.25: (40, 0.5), 0.5: (30, 0.5),
             0.75: (20, 0.5), 0.98: (12, 0.5), 1.0: (11, 0.5), 0.99: (11.5, 0.5)}  # fmt: skip
    tried = _fake_points(monkeypatch, table)
    ev = evaluate.meets(CTX, CCFG, "best-static", ORACLE, 0.9, hint=0.0)
    assert tried == ["static:0", "static:0.02", "static:0.25", "static:0.5", "static:0.75",
                     "static:0.98", "static:1", "static:0.99"]  # fmt: skip
    assert ev.ratio == 1.0 and ev.p99_ms == 11


def test_the_bracket_probes_both_sides_nearest_the_hint_first(monkeypatch):
    # step 0.4: first points 0, 0.02, 0.4, 0.8, 0.98, 1 (tried nearest the hint 0.95); the
    # lowest P99 at 0.8 with neither neighbour flat: golden steps snap(0.8 - 0.382 * 0.4) = 0.65
    # and, the hint 0.95 (simulated first, failing) being 0.8's right neighbour now,
    # snap(0.8 + 0.382 * 0.15) = 0.86, simulated first (nearer 0.95); 0.65 passes
    orc = OracleConfig(coarse_step=0.4)
    table = {0.0: (50, 0.5), 0.02: (45, 0.5), 0.4: (40, 0.5), 0.8: (20, 0.5), 0.98: (30, 0.5),
             1.0: (30, 0.5), 0.86: (25, 0.5), 0.65: (9, 1.0), 0.95: (35, 0.5)}  # fmt: skip
    tried = _fake_points(monkeypatch, table, orc)
    ev = evaluate.meets(CTX, CCFG, "best-static", orc, 0.9, hint=0.95)
    assert tried == ["static:0.95", "static:0.98", "static:1", "static:0.8", "static:0.4",
                     "static:0.02", "static:0", "static:0.86", "static:0.65"]  # fmt: skip
    assert ev.passes and ev.ratio == 0.65 and ev.simulations == 9
