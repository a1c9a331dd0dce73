"""The guard: a losing base policy is pulled back to the anchor, on one node and in a cluster."""

from __future__ import annotations

import time

import numpy as np
import pytest
from controller_fixtures import NODE, small_ctx

from helm_plan.controller.env import SHIFTS
from helm_plan.controller.features import CURVE_POINTS, N_FEATURES, RATIO_INDEX, CurveState
from helm_plan.controller.guard import Guard
from helm_plan.controller.policy import ControllerPolicy
from helm_plan.controller.runtime import Controller, RuntimeConfig
from helm_plan.sim import simulate_node

GRID = np.linspace(0.0, 1.0, CURVE_POINTS)


def _actor(shift: float) -> Controller:
    """An actor that always picks ``shift`` (zero weights, one biased action)."""
    b1 = np.zeros(len(SHIFTS))
    b1[SHIFTS.index(shift)] = 1.0
    w = {"W0": np.zeros((4, N_FEATURES)), "b0": np.zeros(4),
         "W1": np.zeros((len(SHIFTS), 4)), "b1": b1}  # fmt: skip
    return Controller(w, np.array(SHIFTS), RuntimeConfig(adapter=False, burst=False))


def _curve(values: dict[float, float]) -> np.ndarray:
    """A gain curve: piecewise linear through ``values`` (ratio -> log P99 gain)."""
    xs = sorted(values)
    return np.interp(GRID, xs, [values[x] for x in xs])


def _smoothed(c: np.ndarray) -> CurveState:
    s = CurveState()
    s.update(c)
    return s


def test_prediction_gate_serves_the_anchor_unless_the_curve_backs_the_move():
    g = Guard(anchor=0.3, enter_margin=0.01)
    flat = np.zeros(CURVE_POINTS)
    # the curve says 0.8 beats 0.3 by 0.5%: under the margin, the anchor is served
    c = _smoothed(_curve({0.0: 0.0, 0.3: 0.0, 0.8: 0.005, 1.0: 0.0}))
    assert g.step(0.8, 0.3, flat, c) == 0.3 and g.overrides == 1
    # by 5%: the move is served
    c = _smoothed(_curve({0.0: 0.0, 0.3: 0.0, 0.8: 0.05, 1.0: 0.0}))
    assert g.step(0.8, 0.3, flat, c) == 0.8 and g.overrides == 1
    # a proposal at the anchor is never an override
    assert g.step(0.3, 0.8, None, c) == 0.3 and g.overrides == 1


def test_evidence_falls_back_with_hysteresis():
    g = Guard(anchor=0.3, enter_margin=0.01, exit_margin=0.01, evidence_alpha=0.5,
              hold_windows=3, rearm_windows=2)  # fmt: skip
    backs = _smoothed(_curve({0.0: 0.0, 0.3: 0.0, 0.8: 0.05, 1.0: 0.0}))
    # window served at 0.8: its own counterfactual says the anchor would have been 3% faster
    lost = _curve({0.0: 0.0, 0.3: 0.03, 0.8: 0.0, 1.0: 0.0})
    out = [g.step(0.8, 0.3, np.zeros(CURVE_POINTS), backs)]  # engaged: the move is served
    assert out == [0.8] and g.evidence == 0.0
    out.append(g.step(0.8, 0.8, lost, backs))  # evidence 0.5·0.03 = 0.015 > 0.01: fall back
    assert g.fallback and g.evidence == pytest.approx(0.015)
    # held for 3 windows even though the prediction backs the move, then re-armed after 2
    # windows in a row whose prediction clears the margin (here every one)
    for _ in range(4):
        out.append(g.step(0.8, out[-1], np.zeros(CURVE_POINTS), backs))
    assert out == [0.8, 0.3, 0.3, 0.3, 0.8, 0.8]
    assert g.fallback_windows == 3 and not g.fallback
    # a prediction that stops backing the move keeps it from re-arming
    g2 = Guard(anchor=0.3, enter_margin=0.01, exit_margin=0.01, hold_windows=1, rearm_windows=2)
    g2.step(0.8, 0.8, lost, backs)
    flat = _smoothed(np.zeros(CURVE_POINTS))
    seq = [g2.step(0.8, 0.3, None, c) for c in (flat, backs, backs)]
    assert seq == [0.3, 0.3, 0.8]


def test_risk_refuses_a_ratio_that_lost_badly_in_a_window_seen_before():
    """Hand-worked: regime B's window says 0.8 would have been 40% slower than the anchor 0.3
    (log-ratio -0.4 < -0.1); in regime A the curve backs 0.8 by 5%, and 0.5 by 5% too, but 0.5
    lost only 5% in B (-0.05 >= -0.1): 0.8 is refused, 0.5 served. Refused, 0.8 is not
    replaced by the anchor but by the safe part of the move: the ratio nearest 0.8 on the way
    to the anchor that A's curve backs and that lost at most 10% in B, 0.54 (B: -0.05 - 0.35 *
    0.04 / 0.3 = -0.0967; 0.55 lost 0.108)."""
    g = Guard(anchor=0.3, enter_margin=0.01, risk_margin=0.1)
    assert g.risk_margin == 0.1
    b = _curve({0.0: 0.0, 0.3: 0.0, 0.5: -0.05, 0.8: -0.4, 1.0: -0.4})
    a = _curve({0.0: 0.0, 0.3: 0.0, 0.5: 0.05, 0.8: 0.05, 1.0: 0.0})
    assert g.step(0.3, 0.3, b, _smoothed(b)) == 0.3  # B: the anchor (no move proposed)
    assert g.step(0.8, 0.3, a, _smoothed(a)) == 0.54 and g.overrides == 1  # risky: refused
    assert g.step(0.5, 0.3, a, _smoothed(a)) == 0.5 and g.overrides == 1  # within the risk
    np.testing.assert_allclose(g._worst, np.minimum(b - b[30], a - a[30]))
    # without the B window (a fresh guard), 0.8 is served: the risk is what refused it
    g2 = Guard(anchor=0.3, enter_margin=0.01, risk_margin=0.1)
    assert g2.step(0.8, 0.3, a, _smoothed(a)) == 0.8
    # a larger margin lets 0.8 through after B as well
    g3 = Guard(anchor=0.3, enter_margin=0.01, risk_margin=0.5)
    g3.step(0.3, 0.3, b, _smoothed(b))
    assert g3.step(0.8, 0.3, a, _smoothed(a)) == 0.8
    # reset forgets the worst curve
    g.reset()
    assert g.step(0.8, 0.3, a, _smoothed(a)) == 0.8


def test_risky_move_waits_for_regimes_that_last_and_the_cap_never_moves():
    """Hand-worked, anchor 0.3, regime_windows 3: in B, 0.8 is 40% slower than the anchor
    (risky, under the cap 1.0) and 0.0 is e^1.5 slower (over the cap); in A both are backed by
    5%. After two B windows, 0.8 is refused in A (B lasted 2 < 3); after three it is served,
    0.0 never; back in B, 0.8 is losing now and refused even where the curve still backs it.
    A backed move refused as risky keeps its safe part: the ratio nearest the proposal, on the
    way to the anchor, that the curve backs by more than 1% and that is not risky: 0.42 for
    0.8 (B: -0.4 * 0.12 / 0.5 = -0.096 >= -0.1; A backs it by 0.012), 0.1 for 0.0 (B: -1.0,
    at the cap and not over it, in a regime that lasted 3 windows; A backs it by 0.033)."""
    b = _curve({0.0: -1.5, 0.3: 0.0, 0.8: -0.4, 1.0: -0.4})
    a = _curve({0.0: 0.05, 0.3: 0.0, 0.8: 0.05, 1.0: 0.0})

    def guard(b_windows: int) -> Guard:
        g = Guard(anchor=0.3, enter_margin=0.01, risk_margin=0.1, risk_cap=1.0, regime_windows=3)
        for _ in range(b_windows):
            assert g.step(0.3, 0.3, b, _smoothed(b)) == 0.3
        return g

    short = guard(2)
    assert short.step(0.8, 0.3, a, _smoothed(a)) == 0.42 and short.overrides == 1
    assert (short._run[80], short._shortest[80]) == (0.0, 2.0)  # B ended after 2
    g = guard(3)
    assert g.regime_windows == 3 and g.risk_cap == 1.0
    assert g.step(0.8, 0.3, a, _smoothed(a)) == 0.8 and g.overrides == 0
    assert g.step(0.0, 0.8, a, _smoothed(a)) == 0.1 and g.overrides == 1  # over the cap
    assert (g._run[0], g._shortest[0], g._run[80], g._shortest[80]) == (0.0, 3.0, 0.0, 3.0)
    # B again, served at the anchor: 0.8 loses now (a run of 1 under way), the stale smoothed
    # curve A still backs it, and it is refused
    assert g.step(0.8, 0.3, b, _smoothed(a)) == 0.42 and g._run[80] == 1.0
    # every risky move refused (the rule before regime_windows): a length no run reaches
    never = Guard(anchor=0.3, enter_margin=0.01, regime_windows=10**6)
    for _ in range(50):
        never.step(0.3, 0.3, b, _smoothed(b))
    assert never.step(0.8, 0.3, a, _smoothed(a)) == 0.42  # the safe part only


def test_online_anchor_restarts_the_worst_curve_when_it_moves():
    g = Guard(risk_margin=0.1)  # no anchor given
    g.reset(0.5)
    a = _curve({0.0: 0.0, 0.2: 0.04, 0.9: -0.5, 1.0: -0.5})
    g.step(0.5, 0.5, a, _smoothed(a))  # the anchor moves to 0.2; worst relative to it
    assert g.anchor == pytest.approx(0.2)
    np.testing.assert_allclose(g._worst, a - a[20])
    b = _curve({0.0: 0.0, 0.2: 0.04, 0.9: 1.0, 1.0: 0.0})
    g.step(0.2, 0.2, b, _smoothed(b))  # mean's best is now 0.9: the worst curve starts again
    assert g.anchor == pytest.approx(0.9)
    np.testing.assert_allclose(g._worst, b - b[90])


def test_online_anchor_is_the_best_of_the_mean_curve():
    g = Guard()  # no anchor given
    g.reset(0.5)
    assert g.anchor == 0.5
    a = _curve({0.0: 0.0, 0.2: 0.04, 1.0: 0.0})
    b = _curve({0.0: 0.0, 0.9: 0.02, 1.0: 0.0})
    g.step(0.5, 0.5, a, _smoothed(a))
    assert g.anchor == pytest.approx(0.2)
    g.step(0.5, 0.5, b, _smoothed(b))  # mean: 0.2 -> 0.02 + 0.2/0.9·0.01, 0.9 -> 0.01 + ...
    mean = (a + b) / 2
    assert g.anchor == pytest.approx(GRID[int(np.argmax(mean))])


def _losing_run(ctx, cfg, guard: bool, anchor: float):
    ctrl = _actor(-0.5)  # always pushes r down: toward KV only, the worst split of this trace
    if not guard:
        ctrl = ctrl.with_config(RuntimeConfig(adapter=False, burst=False, guard=False))
    return ControllerPolicy(ctx, cfg, ctrl, "losing", anchor=anchor)


def test_losing_base_policy_is_pulled_back_on_one_node():
    ctx = small_ctx()
    static = simulate_node(ctx, np.array([0.5]), NODE)
    bad = simulate_node(ctx, _losing_run(ctx, NODE, False, 0.5), NODE)
    assert bad.p99_ms > 1.3 * static.p99_ms  # the base policy alone loses badly
    pol = _losing_run(ctx, NODE, True, 0.5)
    good = simulate_node(ctx, pol, NODE)
    assert good.p99_ms <= 1.01 * static.p99_ms
    assert np.all(good.ratios[good.measured_from_window :] == 0.5)
    st = good.policy_stats
    assert st["decisions"] == len(good.ratios) - 1 and st["guard_overrides"] == st["decisions"]


def test_losing_base_policy_is_pulled_back_inside_a_cluster():
    from helm_plan.cluster import ClusterConfig, simulate_cluster

    ctx = small_ctx()
    cfg = ClusterConfig(nodes=4, router="jsq", node=NODE)
    static = simulate_cluster(ctx, 0.5, cfg)
    pols = [_losing_run(ctx, NODE, False, 0.5) for _ in range(4)]
    bad = simulate_cluster(ctx, pols, cfg)
    assert bad.p99_ms > 1.3 * static.p99_ms
    pols = [_losing_run(ctx, NODE, True, 0.5) for _ in range(4)]
    good = simulate_cluster(ctx, pols, cfg)
    assert good.p99_ms <= 1.01 * static.p99_ms
    # every node measured its own windows: the guard saw a curve each time, not nothing
    for p in pols:
        assert p.controller.guard.decisions == ctx.n_windows(NODE.window_s) - 1
        assert p.controller.curve.seen and np.ptp(p.controller.curve.curve) > 0


def test_cluster_nodes_measure_their_own_requests():
    # the old loop gave a node's policy no requests to measure (its window is not a span of the
    # trace): now every node's ghost sees exactly the requests it served
    from helm_plan.cluster import ClusterConfig, simulate_cluster

    ctx = small_ctx()
    seen: list[list[np.ndarray]] = [[] for _ in range(3)]

    class Spy(ControllerPolicy):
        def decide(self, obs):
            if obs.last is not None:
                seen[self.k].append(obs.served)
            return super().decide(obs)

    pols = []
    for k in range(3):
        p = Spy(ctx, NODE, _actor(0.0), "spy", anchor=0.5)
        p.k = k
        pols.append(p)
    res = simulate_cluster(ctx, pols, ClusterConfig(nodes=3, router="random", node=NODE))
    got = np.concatenate([np.concatenate(s) for s in seen])
    # every request of every window but the last (no decision after it), each once
    last = int(np.searchsorted(res.window_idx, res.window_idx.max()))
    assert np.array_equal(np.sort(got), np.arange(last))
    for k in range(3):
        for idx in seen[k]:
            assert np.all(res.node[idx] == k) and np.all(np.diff(idx) > 0)


def test_latency_is_the_runtime_timer_and_matches_a_manual_one():
    ctrl = _actor(0.0)
    rng = np.random.default_rng(0)
    xs = [rng.random(N_FEATURES) for _ in range(500)]
    for x in xs:
        x[RATIO_INDEX] = 0.5
    covered = []
    for _ in range(3):  # a loaded machine can preempt the loop between two steps
        ctrl.reset()
        t0 = time.perf_counter_ns()
        for x in xs:
            ctrl.step(x, None)
        total = time.perf_counter_ns() - t0
        own = np.array(ctrl.latency_ns)
        assert len(own) == len(xs) and np.all(own > 0)
        # the runtime's own timer covers each call's body: never more than the manual timer
        # around the loop, and most of it (the loop itself costs little next to a step)
        assert own.sum() <= total
        covered.append(own.sum() / total)
    assert max(covered) >= 0.5, covered
    lat = ctrl.decision_latency_us()
    assert lat["n"] == len(xs) and lat["median"] == pytest.approx(np.median(own) / 1e3)
    ctrl.reset()
    assert ctrl.latency_ns == [] and ctrl.decision_latency_us()["n"] == 0


@pytest.mark.parametrize("seed", range(40))
def test_a_refused_move_serves_its_safe_part_against_a_brute_force(seed):
    """Random regimes seen since the anchor was set, then a random proposal: the guard serves
    the proposal when the smoothed curve backs it by more than ``enter_margin`` and it is not
    risky; the anchor when the curve does not back it; when it is backed but risky, the grid
    ratio nearest it on the way to the anchor that passes both tests, else the anchor; every
    test written out here from the guard's own worst curve, runs and shortest runs (guard.py's
    rules), over every grid ratio in turn."""
    rng = np.random.default_rng(seed)
    anchor = round(float(rng.integers(0, CURVE_POINTS)) / (CURVE_POINTS - 1), 9)
    g = Guard(anchor=anchor, enter_margin=0.01, exit_margin=np.inf, risk_margin=0.1,
              risk_cap=1.0, regime_windows=3)  # fmt: skip

    def random_curve() -> np.ndarray:
        knots = np.sort(rng.uniform(0, 1, 4))
        return np.interp(GRID, [0.0, *knots, 1.0], rng.normal(0, 0.4, 6))

    measured = int(rng.integers(0, 8))
    for _ in range(measured):  # windows at the anchor, measured
        gain = random_curve()
        g.step(anchor, anchor, gain, _smoothed(gain))
    smooth = _smoothed(random_curve())
    proposal = float(rng.uniform(0, 1))
    ka, kp = round(anchor * 100), round(proposal * 100)

    def backed(k: int) -> bool:
        return bool(smooth.curve[k] - smooth.curve[ka] > 0.01)

    def ok(k: int) -> bool:
        w = g._worst[k]
        lost = measured > 0 and w < -0.1
        risky = lost and (w < -1.0 or g._run[k] > 0 or g._shortest[k] < 3)
        return backed(k) and not risky

    if proposal == anchor or (kp != ka and ok(kp)):
        want = proposal
    elif kp == ka or not backed(kp):  # a move the curve does not back: none of it
        want = anchor
    else:
        step = 1 if ka > kp else -1
        safe = [k for k in range(kp + step, ka, step) if ok(k)]
        want = safe[0] / (CURVE_POINTS - 1) if safe else anchor
    got = g.step(proposal, anchor, None, smooth)
    assert got == pytest.approx(want, abs=1e-12)
