"""The compiled decision (controller._kernel) against numpy references, and its state slots."""

from __future__ import annotations

import numpy as np
import pytest

from helm_plan.controller import _kernel as K
from helm_plan.controller import features
from helm_plan.controller.features import CURVE_POINTS, N_FEATURES, CurveState
from helm_plan.controller.guard import Guard
from helm_plan.controller.runtime import DEFAULT_PATH, Controller, RuntimeConfig


def _numpy_logits(c: Controller, x: np.ndarray) -> np.ndarray:
    """The actor as the runtime computed it before the kernel: BLAS dot of [W | b] and [h, 1]."""
    h = np.asarray(x, np.float64)
    for i, (W, b) in enumerate(zip(c._W, c._b, strict=True)):
        z = np.dot(np.hstack([W, b[:, None]]), np.append(h, 1.0))
        h = np.tanh(z) if i < len(c._W) - 1 else z
    return h


def test_feature_indices_match_the_feature_names():
    for name in ("BURST_INDEX", "COLD_INDEX", "RATIO_INDEX", "NET_UP_INDEX", "NET_DOWN_INDEX",
                 "CURVE_INDEX", "OPT_INDEX"):  # fmt: skip
        assert getattr(K, name) == getattr(features, name), name


def test_forward_matches_numpy_to_1e12_and_picks_the_same_action():
    c = Controller.load(DEFAULT_PATH)
    rng = np.random.default_rng(0)
    worst = 0.0
    for scale in (0.1, 1.0, 3.0):
        for _ in range(2000):
            x = rng.normal(0.0, scale, N_FEATURES)
            k, margin = K.forward(c._w, c._dims, x, c._buf, c._hold)
            ref = _numpy_logits(c, x)
            got = c._buf[-len(ref) :]
            worst = max(worst, float(np.max(np.abs(got - ref))))
            assert k == int(ref.argmax())
            assert margin == pytest.approx(ref[k] - ref[c._hold], abs=1e-12)
    assert worst <= 1e-12


def test_curve_kernels_match_numpy_bit_for_bit():
    rng = np.random.default_rng(1)
    for _ in range(200):
        c, s = rng.normal(0, 0.01, CURVE_POINTS), rng.normal(0, 0.01, CURVE_POINTS)
        want = c.copy()
        want -= s
        want *= 1.0 - 0.5
        want += s
        K.curve_update(c, s, 1.0 - 0.5)
        np.testing.assert_array_equal(c, want)
        st = CurveState()
        st.update(c)
        r = float(rng.uniform(-0.1, 1.1))
        k = int(c.argmax())
        kr = features._k(r)
        opt = r if c[kr] >= c[k] - st.tol else k / (CURVE_POINTS - 1)
        assert st.optimum(r) == opt
        x = np.zeros(N_FEATURES)
        x[features.RATIO_INDEX] = r
        st.fill(x)
        g = 10.0 * (c[k] - c[kr]) if opt != r else 0.0
        want_x = [opt, opt - r, min(g, 3.0), min(10.0 * (c[k] - c.min()), 3.0)]
        assert list(x[features.CURVE_INDEX :]) == want_x


def test_state_lives_in_the_arrays_the_compiled_step_reads():
    c = Controller.load(DEFAULT_PATH, RuntimeConfig(calm_windows=5))
    assert c._cf[K.CALM_WINDOWS] == 5.0 and c.ratio != c.ratio
    c.ratio, c._calm, c.in_burst = 0.25, 2, True
    assert (c._st[K.RATIO], c._st[K.CALM], c._st[K.IN_BURST]) == (0.25, 2.0, 1.0)
    assert type(c._calm) is int and type(c.in_burst) is bool and type(c.ratio) is float
    c.cfg = RuntimeConfig(guard=False)
    assert c._cf[K.GUARD] == 0.0 and c._cf[K.CALM_WINDOWS] == 2.0
    g = Guard(anchor=0.3, hold_windows=4)
    assert g.fixed == 0.3 and g.hold_windows == 4 and g._s[K.G_HOLD_WINDOWS] == 4.0
    assert Guard().fixed is None and Guard(anchor=float("nan")).fixed is None


def test_step_works_in_the_buffers_made_at_construction():
    # a decision updates the arrays made at construction in place (never rebinds them)
    c = Controller.load(DEFAULT_PATH)
    rng = np.random.default_rng(2)
    ids = [id(a) for a in (c._st, c._cf, c._w, c._buf, c.guard._s, c.guard._long, c.curve.curve)]
    for _ in range(50):
        c.step(rng.random(N_FEATURES), rng.normal(0, 0.01, CURVE_POINTS))
    assert [id(a) for a in (c._st, c._cf, c._w, c._buf, c.guard._s, c.guard._long,
                            c.curve.curve)] == ids  # fmt: skip
    assert len(c.latency_ns) == 50 and c.guard.decisions == 50


def test_a_copy_decides_in_its_own_array():
    # a cluster deep-copies the policy per node: each copy's views point into its own _mem
    import copy
    import pickle

    c = Controller.load(DEFAULT_PATH)
    rng = np.random.default_rng(3)
    steps = [(rng.random(N_FEATURES), rng.normal(0, 0.01, CURVE_POINTS)) for _ in range(30)]
    copies = [copy.deepcopy(c), pickle.loads(pickle.dumps(c))]
    for o in copies:
        assert not np.shares_memory(o._mem, c._mem)
        for view in (o._st, o._cf, o.curve.curve, o.guard._s, o.guard._long):
            assert np.shares_memory(view, o._mem)
    got = [[o.step(x.copy(), g) for x, g in steps] for o in (c, *copies)]
    assert got[0] == got[1] == got[2]
    assert c.guard.decisions == copies[0].guard.decisions == 30
    np.testing.assert_array_equal(c.curve.curve, copies[0].curve.curve)


def test_wrong_lengths_are_errors_not_reads_past_the_end():
    c = Controller.load(DEFAULT_PATH)
    with pytest.raises(ValueError, match="observation"):
        c.step(np.zeros(N_FEATURES - 1))
    with pytest.raises(ValueError, match="curve"):
        c.step(np.zeros(N_FEATURES), np.zeros(CURVE_POINTS - 1))
    with pytest.raises(ValueError, match="observation"):
        c.base_shift(np.zeros(N_FEATURES + 1))
