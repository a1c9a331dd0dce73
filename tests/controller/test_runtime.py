"""The numpy runtime: no torch, the step burst, the adapter's bound, files.

The numpy controller runtime, window by window against hand-worked numbers (issue 16, item 4).

The detector's inputs are dyadic (multiples of 1/8 with a deviation floor of 1/4 and an EWMA
weight of 1/2), so every z-score, CUSUM value, EWMA mean and variance below is exact and was
worked out by hand in the comments; the thresholds are hit exactly to pin strict against
non-strict comparisons. The actors are fixed logits (zero weights, one biased action), so
layer 1's shift is known and layers 2 and 3 alone are under test.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from helm_plan.controller.env import SHIFTS
from helm_plan.controller.features import (
    BURST_INDEX,
    COLD_INDEX,
    FEATURE_VERSION,
    N_FEATURES,
    NET_DOWN_INDEX,
    NET_UP_INDEX,
    OPT_INDEX,
    RATIO_INDEX,
)
from helm_plan.controller.runtime import (
    DEFAULT_PATH,
    Controller,
    RuntimeConfig,
    config_dict,
    config_fields,
    save,
)
from helm_plan.errors import ConfigError, InputFileError


def test_runtime_loads_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['gymnasium'] = None\n"
        "from helm_plan.controller.runtime import Controller, DEFAULT_PATH\n"
        "from helm_plan.controller.features import observation\n"
        "c = Controller.load(DEFAULT_PATH)\n"
        "r = c.step(observation({'ratio': 0.5, 'arrival_rate_rps': 100.0}))\n"
        "assert 0.0 <= r <= 1.0\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _hold_controller(cfg: RuntimeConfig | None = None) -> Controller:
    """An actor that always holds (logits favour the zero shift): layers 2 and 3 alone act."""
    n = len(SHIFTS)
    b1 = np.zeros(n)
    b1[SHIFTS.index(0.0)] = 1.0
    w = {"W0": np.zeros((4, N_FEATURES)), "b0": np.zeros(4), "W1": np.zeros((n, 4)), "b1": b1}
    return Controller(w, np.array(SHIFTS), cfg)


def _push_up_controller(cfg: RuntimeConfig) -> Controller:
    n = len(SHIFTS)
    b1 = np.zeros(n)
    b1[SHIFTS.index(0.2)] = 1.0
    w = {"W0": np.zeros((4, N_FEATURES)), "b0": np.zeros(4), "W1": np.zeros((n, 4)), "b1": b1}
    return Controller(w, np.array(SHIFTS), cfg)


def _obs(rate: float, cold: float, r: float, rng: np.random.Generator) -> np.ndarray:
    x = np.zeros(N_FEATURES)
    x[BURST_INDEX] = np.log(rate / 100.0 * (1 + 0.02 * rng.standard_normal()))  # burst score
    x[COLD_INDEX] = cold + 0.01 * rng.standard_normal()
    x[RATIO_INDEX] = r
    return x


def test_step_burst_detected_capped_and_recovered():
    cfg = RuntimeConfig(recovery_windows=3, burst_max_shift=0.05, guard=False)
    c = _push_up_controller(cfg)
    rng = np.random.default_rng(0)
    # the actor pushes r up 0.2 a window; before the burst hold it down by resetting
    c.reset()
    r = 0.3
    c.cfg = RuntimeConfig(adapter=False, guard=False)
    hold = _hold_controller(RuntimeConfig(adapter=False, recovery_windows=3, guard=False))
    hold.reset()
    rs, flags = [], []
    for w in range(40):
        burst = 20 <= w < 26
        x = _obs(400.0 if burst else 100.0, 0.7 if burst else 0.08, r, rng)
        r = hold.step(x)
        rs.append(r)
        flags.append(hold.in_burst)
    onset = flags.index(True)
    assert 20 <= onset <= 21, "detected within 2 windows of the step"
    assert hold.bursts == 1, "one burst, no flapping"
    assert not any(flags[30:]), "the burst ends"
    assert rs[-1] == pytest.approx(0.3), "back at the last stable ratio"
    # with the pushing actor, shifts are capped during the burst
    c2 = _push_up_controller(RuntimeConfig(adapter=False, burst_max_shift=0.05, guard=False))
    rng = np.random.default_rng(0)
    r, prev, steps = 0.0, None, []
    for w in range(30):
        burst = w >= 20
        x = _obs(400.0 if burst else 100.0, 0.7 if burst else 0.08, r, rng)
        r = c2.step(x)
        if c2.in_burst and prev is not None:
            steps.append(abs(r - prev))
        prev = r
    assert steps and max(steps) <= 0.05 + 1e-12


def test_adapter_is_bounded_and_frozen_in_bursts():
    c = _hold_controller(RuntimeConfig(adapter_cap=0.07, adapter_lr=0.05, burst=False, guard=False))
    x = np.zeros(N_FEATURES)
    x[RATIO_INDEX] = 0.5
    x[NET_UP_INDEX] = 3.0
    for _ in range(50):
        r = c.step(x)
    assert c.correction == pytest.approx(0.07)
    assert r == pytest.approx(0.57)


def test_save_load_roundtrip(tmp_path):
    c = _hold_controller()
    c.card["seed"] = 1
    p = save(c, tmp_path / "c.npz")
    d = Controller.load(p)
    assert d.card == {"seed": 1}
    x = np.zeros(N_FEATURES)
    assert d.step(x) == c.step(x)
    with pytest.raises(InputFileError, match="not found"):
        Controller.load(tmp_path / "nope.npz")


def test_shipped_default_and_card():
    import json

    c = Controller.load(DEFAULT_PATH)
    card = json.loads((DEFAULT_PATH.parent / "card.json").read_text())
    assert card["feature_version"] == c.card["feature_version"]
    assert card["training_set"] and "seed" in card


def test_unsure_actor_holds():
    # the +0.2 logit beats holding by 0.3: under the margin the controller holds, above it moves
    n = len(SHIFTS)
    b1 = np.zeros(n)
    b1[SHIFTS.index(0.0)], b1[SHIFTS.index(0.2)] = 1.0, 1.3
    w = {"W0": np.zeros((4, N_FEATURES)), "b0": np.zeros(4), "W1": np.zeros((n, 4)), "b1": b1}
    x = np.zeros(N_FEATURES)
    x[RATIO_INDEX] = 0.5
    plain = RuntimeConfig(hold_margin=0.0, adapter=False, burst=False, guard=False)
    assert Controller(w, np.array(SHIFTS), plain).step(x) == pytest.approx(0.7)
    unsure = RuntimeConfig(hold_margin=0.5, adapter=False, burst=False, guard=False)
    assert Controller(w, np.array(SHIFTS), unsure).step(x) == pytest.approx(0.5)


def test_a_lasting_step_is_a_level_shift_not_a_burst():
    c = _push_up_controller(RuntimeConfig(adapter=False, max_burst_windows=5, guard=False))
    rng = np.random.default_rng(1)
    r, flags = 0.0, []
    for w in range(30):
        x = _obs(400.0 if w >= 10 else 100.0, 0.08, r, rng)
        r = c.step(x)
        flags.append(c.in_burst)
    assert flags[10] and sum(flags) == 5 and c.bursts == 1
    assert r == pytest.approx(1.0), "after the level is adopted the base policy moves freely"


def _actor(shift: float, logit: float = 1.0) -> dict[str, np.ndarray]:
    """Zero weights; the bias favours ``shift`` by ``logit`` over every other action."""
    b1 = np.zeros(len(SHIFTS))
    b1[SHIFTS.index(shift)] = logit
    return {"W0": np.zeros((4, N_FEATURES)), "b0": np.zeros(4), "W1": np.zeros((len(SHIFTS), 4)),
            "b1": b1}  # fmt: skip


def _ctrl(shift: float = 0.0, **cfg) -> Controller:
    return Controller(_actor(shift), np.array(SHIFTS), RuntimeConfig(**{"guard": False, **cfg}))


def _x(v0: float = 1.0, v1: float = 0.0, r: float = 0.5, up: float = 0.0, down: float = 0.0):
    """An observation whose log1p(rate) is ``v0`` and cold share ``v1``."""
    x = np.zeros(N_FEATURES)
    x[BURST_INDEX], x[COLD_INDEX], x[RATIO_INDEX] = v0, v1, r
    x[NET_UP_INDEX], x[NET_DOWN_INDEX] = up, down
    return x


DET = {"ewma_alpha": 0.5, "min_sd": 0.25, "cusum_k": 1.0, "cusum_h": 4.0, "z_enter": 4.0,
       "z_exit": 2.0, "calm_windows": 2, "adapter": False}  # fmt: skip


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("name", ["hold_margin", "adapter_cap", "adapter_lr", "burst_max_shift",
                                  "min_sd", "enter_margin", "exit_margin", "risk_margin",
                                  "risk_cap"])  # fmt: skip
def test_config_nonnegative_fields(name):
    assert getattr(RuntimeConfig(**{name: 0.0}), name) == 0.0  # 0 is allowed
    for bad in (-0.01, math.inf, math.nan):
        with pytest.raises(ConfigError, match=f"{name} must be finite and >= 0") as e:
            RuntimeConfig(**{name: bad})
        assert e.value.hint == f"pass {name} >= 0"


@pytest.mark.parametrize("name", ["adapter_decay", "ewma_alpha"])
def test_config_unit_fields(name):
    for ok in (0.0, 1.0):
        assert getattr(RuntimeConfig(**{name: ok}), name) == ok
    for bad in (-0.01, 1.01):
        with pytest.raises(ConfigError, match=f"{name} must be in \\[0, 1\\]") as e:
            RuntimeConfig(**{name: bad})
        assert e.value.hint == "pass 0..1"


@pytest.mark.parametrize(
    "name", ["calm_windows", "recovery_windows", "max_burst_windows", "regime_windows"]
)
def test_config_count_fields(name):
    assert getattr(RuntimeConfig(**{name: 1}), name) == 1
    with pytest.raises(ConfigError, match=f"{name} must be >= 1, got 0") as e:
        RuntimeConfig(**{name: 0})
    assert e.value.hint == f"pass {name} >= 1"


def test_config_fields_and_dict():
    names = config_fields()
    assert names[:3] == ("hold_margin", "adapter", "adapter_cap") and len(names) == 25
    d = config_dict(RuntimeConfig(z_exit=1.5))
    assert list(d) == list(names) and d["z_exit"] == 1.5 and d["calm_windows"] == 2


# ---------------------------------------------------------------- construction and files


def test_shape_errors():
    w = _actor(0.0)
    with pytest.raises(ConfigError, match=f"the actor takes 3 features, feature version "
                                          f"{FEATURE_VERSION} has {N_FEATURES}"):  # fmt: skip
        Controller(w | {"W0": np.zeros((4, 3))}, np.array(SHIFTS), source="src")
    with pytest.raises(ConfigError, match="takes 0 features") as e:
        Controller({}, np.array(SHIFTS))
    assert "helm-plan train" in e.value.hint
    with pytest.raises(ConfigError, match="src: the actor has 10 actions for 3 shifts") as e:
        Controller(w, np.array([-0.1, 0.0, 0.1]), source="src")
    assert "helm-plan train" in e.value.hint


def test_hold_is_the_zero_shift_and_arrays():
    shifts = np.array([0.3, -0.2, 0.0, 0.1])
    b1 = np.array([0.0, 0.0, 1.0, 0.0])
    w = {"W0": np.zeros((4, N_FEATURES)), "b0": np.zeros(4), "W1": np.zeros((4, 4)), "b1": b1}
    c = Controller(w, shifts, card={"a": 1})
    assert c._hold == 2
    a = c.arrays()
    assert sorted(a) == ["W0", "W1", "b0", "b1", "card", "feature_version", "shifts"]
    assert json.loads(str(a["card"])) == {"a": 1} and str(a["feature_version"]) == FEATURE_VERSION
    np.testing.assert_array_equal(a["b1"], b1)
    np.testing.assert_array_equal(a["shifts"], shifts)
    assert c.card == {"a": 1} and c.source == "controller"
    assert Controller(w, shifts).card == {}


def test_load_errors(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputFileError, match=f"cannot read {bad} as a controller") as e:
        Controller.load(bad)
    assert "helm-plan train" in e.value.hint
    none = tmp_path / "none.npz"
    np.savez(none, shifts=np.zeros(2))
    with pytest.raises(InputFileError, match="not a helm-plan controller") as e:
        Controller.load(none)
    assert "helm-plan train" in e.value.hint
    nos = tmp_path / "nos.npz"
    np.savez(nos, feature_version=np.array(FEATURE_VERSION))
    with pytest.raises(InputFileError, match="not a helm-plan controller"):
        Controller.load(nos)
    with pytest.raises(InputFileError, match="not found") as e:
        Controller.load(tmp_path / "nope.npz")
    assert "helm-plan train TRACE... -o FILE" in e.value.hint


def test_load_keeps_config_card_weights_and_source(tmp_path):
    c = _ctrl(0.2)
    c.card["seed"] = 7
    p = save(c, tmp_path / "c.npz")
    cfg = RuntimeConfig(hold_margin=0.0, adapter=False, burst=False, guard=False)
    d = Controller.load(p, cfg)
    assert d.cfg is cfg and d.card == {"seed": 7} and d.source == str(p)
    assert d.step(_x(r=0.5)) == pytest.approx(0.7)
    # without a card the card is empty; extra arrays are not weights
    q = tmp_path / "q.npz"
    a = c.arrays()
    del a["card"]
    np.savez(q, **a, extra=np.zeros(3))
    e = Controller.load(q, cfg)
    assert e.card == {} and len(e._W) == 2
    assert e.step(_x(r=0.1)) == pytest.approx(0.3)


def test_with_config_is_fresh_and_keeps_the_actor():
    c = _ctrl(0.2, hold_margin=0.0, adapter=False, burst=False)
    c.card["k"] = 1
    c.step(_x(r=0.5))
    cfg = RuntimeConfig(hold_margin=0.0, adapter=False, burst=False, guard=False, z_exit=1.0)
    d = c.with_config(cfg)
    assert d.cfg is cfg and d.card == {"k": 1} and d.source == "controller"
    assert math.isnan(d.ratio) and d.step(_x(r=0.25)) == pytest.approx(0.45)


def test_reset_state():
    c = _ctrl()
    c.reset(0.4)
    assert (c.base, c.ratio, c.stable_ratio, c.correction) == (0.4, 0.4, 0.4, 0.0)
    assert not c.in_burst and c.bursts == 0 and c._cusum == 0.0
    assert math.isnan(c._m0) and math.isnan(c._m1) and c._v0 == 0.0 and c._v1 == 0.0
    assert c._calm == 0 and c._burst_len == 0 and c._recover_left == 0
    c.reset()
    assert math.isnan(c.ratio) and math.isnan(c.base) and math.isnan(c.stable_ratio)


# ---------------------------------------------------------------- layer 1


def test_hold_margin_boundary():
    # the +0.2 logit beats holding by exactly 0.5 (dyadic): at the margin the controller holds
    b1 = np.zeros(len(SHIFTS))
    b1[SHIFTS.index(0.0)], b1[SHIFTS.index(0.2)] = 1.0, 1.5
    w = _actor(0.0) | {"b1": b1}
    at = Controller(w, np.array(SHIFTS), RuntimeConfig(hold_margin=0.5, guard=False))
    assert at.base_shift(_x()) == 0.0
    under = Controller(w, np.array(SHIFTS), RuntimeConfig(hold_margin=0.25, guard=False))
    assert under.base_shift(_x()) == 0.2
    # a margin of 0 is the plain argmax (a tie at the top also picks the first maximum)
    plain = Controller(_actor(-0.1), np.array(SHIFTS), RuntimeConfig(hold_margin=0.0, guard=False))
    assert plain.base_shift(_x()) == -0.1


def test_hidden_layer_is_tanh_of_the_inputs():
    # W0 copies the log burst score into hidden unit 0; W1 reads tanh(h0) into the +0.1 action
    w = _actor(0.0, logit=0.0)
    w["W0"][0, BURST_INDEX] = 1.0
    w["W1"][SHIFTS.index(0.1), 0] = 1.0
    w["b1"][SHIFTS.index(-0.1)] = math.tanh(0.5) - 0.125  # loses to tanh(h0) iff h0 = 0.5
    c = Controller(w, np.array(SHIFTS), RuntimeConfig(hold_margin=0.0, guard=False))
    assert c.base_shift(_x(v0=0.5)) == 0.1  # h0 = 0.5
    w["b0"][0] = -0.5  # h0 = 0: the -0.1 action wins
    c = Controller(w, np.array(SHIFTS), RuntimeConfig(hold_margin=0.0, guard=False))
    assert c.base_shift(_x(v0=0.5)) == -0.1


# ---------------------------------------------------------------- layer 3: the detector


def test_detector_band_and_cusum_by_hand():
    c = _ctrl(**DET)
    assert c._detect(_x(1.0, 0.0)) is False  # first window: the band starts at (1, 0)
    assert (c._m0, c._m1, c._v0, c._v1, c._cusum) == (1.0, 0.0, 0.0, 0.0, 0.0)
    # z0 = 0.5 / max(0, 0.25) = 2, z1 = 0: CUSUM 0 + 2 - 1 = 1; m0 = 1 + 0.5 * 0.5 = 1.25,
    # v0 = 0.5 * (0 + 0.5 * 0.25) = 0.0625
    assert c._detect(_x(1.5, 0.0)) is False
    assert (c._m0, c._m1, c._v0, c._v1, c._cusum) == (1.25, 0.0, 0.0625, 0.0, 1.0)
    # z0 = 0, z1 = 0.75 / 0.25 = 3: CUSUM 1 + 3 - 1 = 3; m1 = 0.375,
    # v1 = 0.5 * (0 + 0.5 * 0.5625) = 0.140625, v0 = 0.5 * 0.0625 = 0.03125
    assert c._detect(_x(1.25, 0.75)) is False
    assert (c._m0, c._m1, c._v0, c._v1, c._cusum) == (1.25, 0.375, 0.03125, 0.140625, 3.0)
    # z1 = 0.75 / sqrt(0.140625) = 0.75 / 0.375 = 2: CUSUM 3 + 2 - 1 = 4, exactly h: no burst;
    # m1 = 0.75, v1 = 0.5 * (0.140625 + 0.28125) = 0.2109375, v0 = 0.015625
    assert c._detect(_x(1.25, 1.125)) is False
    assert (c._m0, c._m1, c._v0, c._v1, c._cusum) == (1.25, 0.75, 0.015625, 0.2109375, 4.0)
    # z0 = 0.375 / max(0.125, 0.25) = 1.5, z1 = 0: CUSUM 4.5 > 4, a burst; the band is frozen
    assert c._detect(_x(1.625, 0.75)) is True
    assert c.in_burst and c.bursts == 1 and c._cusum == 4.5
    assert (c._m0, c._m1, c._v0, c._v1) == (1.25, 0.75, 0.015625, 0.2109375)
    assert c._calm == 0 and c._burst_len == 0
    # during the burst the band stays frozen; z0 = 0.5 / 0.25 = 2 = z_exit is not calm
    assert c._detect(_x(1.75, 0.75)) is True
    assert (c._m0, c._v0, c._calm, c._burst_len, c._cusum) == (1.25, 0.015625, 0, 1, 5.5)
    # z = 0 twice: calm, calm -> the burst ends, CUSUM cleared, recovery armed
    assert c._detect(_x(1.25, 0.75)) is True
    assert (c._calm, c._burst_len, c._cusum) == (1, 2, 4.5)
    assert c._detect(_x(1.25, 0.75)) is False
    assert not c.in_burst and c._cusum == 0.0 and c._recover_left == 3 and c.bursts == 1
    assert (c._m0, c._v0, c._burst_len) == (1.25, 0.015625, 3)


def test_detector_z_enter_is_strict_and_cusum_floors_at_zero():
    c = _ctrl(**DET)
    c._detect(_x(1.0, 0.0))
    # z0 = 1 / 0.25 = 4 = z_enter: no burst (CUSUM 3)
    assert c._detect(_x(2.0, 0.0)) is False and c._cusum == 3.0
    # m0 = 1.5, v0 = 0.5 * 0.5 = 0.25 (sd 0.5): z0 = -1 / 0.5 = -2, z1 = 0, z = max = 0:
    # CUSUM 3 + 0 - 1 = 2; m0 = 1.0, v0 = 0.5 * (0.25 + 0.5 * 1) = 0.375
    assert (c._m0, c._v0) == (1.5, 0.25)
    assert c._detect(_x(0.5, 0.0)) is False and c._cusum == 2.0
    assert (c._m0, c._v0) == (1.0, 0.375)
    # z = 0 at the mean: the CUSUM drains by k a window and stops at 0, not below
    assert [(c._detect(_x(1.0, 0.0)), c._cusum)[1] for _ in range(3)] == [1.0, 0.0, 0.0]
    d = _ctrl(**DET)
    d._detect(_x(1.0, 0.0))
    # z1 = 1.0625 / 0.25 = 4.25 > 4: a burst at once although the CUSUM (3.25) is under h
    assert d._detect(_x(1.0, 1.0625)) is True and d._cusum == 3.25 and d.bursts == 1


def test_detector_level_shift_adopts_the_new_level():
    c = _ctrl(**(DET | {"max_burst_windows": 3}))
    c._detect(_x(1.0, 0.0))
    assert c._detect(_x(3.0, 0.0)) is True  # z0 = 8
    c.ratio = 0.625
    assert c._detect(_x(3.0, 0.5)) is True and c._burst_len == 1
    assert c._detect(_x(3.0, 0.5)) is True and c._burst_len == 2
    # the third window reaches max_burst_windows: the band adopts (3, 0.5) and forgets the spread
    assert c._detect(_x(3.0, 0.5)) is False
    assert (c._m0, c._m1, c._v0, c._v1, c._cusum) == (3.0, 0.5, 0.0, 0.0, 0.0)
    assert c.stable_ratio == 0.625 and c._recover_left == 0 and c.bursts == 1


# ---------------------------------------------------------------- step: the three layers


def test_first_step_starts_from_the_node_ratio():
    c = _ctrl(0.0, adapter=False, burst=False)
    assert c.step(_x(r=0.375)) == 0.375
    assert (c.base, c.ratio, c.stable_ratio) == (0.375, 0.375, 0.375)
    assert c.step(_x(r=0.9)) == 0.375  # later windows follow the controller's own ratio


def test_base_policy_moves_and_clips():
    c = _ctrl(0.2, hold_margin=0.0, adapter=False, burst=False)
    assert [c.step(_x(r=0.5)) for _ in range(4)] == pytest.approx([0.7, 0.9, 1.0, 1.0])
    assert c.base == 1.0 and c.stable_ratio == 1.0
    d = _ctrl(-0.2, hold_margin=0.0, adapter=False, burst=False)
    assert [d.step(_x(r=0.3)) for _ in range(3)] == pytest.approx([0.1, 0.0, 0.0])
    assert d.base == 0.0


def test_adapter_by_hand():
    # g = tanh(up - down) = 0.5; c_{t+1} = 0.5 c_t + 0.1 * 0.5: 0.05, 0.075, 0.0875, then the cap
    cfg = {"adapter_decay": 0.5, "adapter_lr": 0.1, "adapter_cap": 0.09, "burst": False}
    c = _ctrl(**cfg)
    up, down = 1.0 + math.atanh(0.5), 1.0
    got = [c.step(_x(r=0.5, up=up, down=down)) for _ in range(4)]
    assert got == pytest.approx([0.55, 0.575, 0.5875, 0.59])
    assert c.correction == pytest.approx(0.09) and c.base == 0.5
    # the other sign, and the lower cap
    d = _ctrl(**cfg)
    got = [d.step(_x(r=0.5, up=down, down=up)) for _ in range(4)]
    assert got == pytest.approx([0.45, 0.425, 0.4125, 0.41])
    # the ratio is clipped to [0, 1] but the correction is not
    e = _ctrl(**cfg)
    assert e.step(_x(r=0.98, up=up, down=down)) == 1.0 and e.correction == pytest.approx(0.05)
    f = _ctrl(**cfg)
    assert f.step(_x(r=0.02, up=down, down=up)) == 0.0 and f.correction == pytest.approx(-0.05)
    # adapter off: no correction at all
    g = _ctrl(adapter=False, burst=False)
    assert g.step(_x(r=0.5, up=up, down=down)) == 0.5 and g.correction == 0.0


def test_burst_caps_the_shift_and_recovers_in_equal_steps():
    cfg = DET | {"hold_margin": 0.0, "burst_max_shift": 0.0625, "recovery_windows": 2}
    c = _ctrl(0.2, **cfg)
    assert c.step(_x(1.0, r=0.25)) == pytest.approx(0.45)  # first window: no burst yet
    # z0 = 8: a burst; the +0.2 shift is capped at 0.0625; the stable ratio is the pre-burst one
    assert c.step(_x(3.0)) == pytest.approx(0.5125)
    assert c.in_burst and c.stable_ratio == pytest.approx(0.45) and c.base == pytest.approx(0.5125)
    assert c.step(_x(1.0)) == pytest.approx(0.575)  # calm 1
    assert c.stable_ratio == pytest.approx(0.45)
    # calm 2 ends the burst: recovery in 2 equal steps from 0.575 to 0.45, no base move
    assert c.step(_x(1.0)) == pytest.approx(0.5125) and c._recover_left == 1
    assert c.base == pytest.approx(0.5125) and c.correction == 0.0
    assert c.step(_x(1.0)) == pytest.approx(0.45) and c._recover_left == 0
    # then the base policy resumes from the stable ratio
    assert c.step(_x(1.0)) == pytest.approx(0.65)
    # the cap holds on the negative side, and the ratio is clipped at 0
    d = _ctrl(-0.2, **cfg)
    assert d.step(_x(1.0, r=0.25)) == pytest.approx(0.05)
    assert d.step(_x(3.0)) == 0.0 and d.base == 0.0


def test_burst_cap_clips_ratio_and_base_at_one():
    c = _ctrl(0.2, **(DET | {"hold_margin": 0.0, "burst_max_shift": 0.0625}))
    c.step(_x(1.0, r=0.8))  # 1.0
    assert c.step(_x(3.0)) == 1.0 and c.base == 1.0
    # the burst keeps the adapter frozen (no correction change)
    e = _ctrl(0.0, **(DET | {"adapter": True}))
    e.step(_x(1.0, r=0.5))
    e.correction = 0.03
    e.step(_x(3.0, up=5.0))
    assert e.correction == 0.03


def test_burst_off_never_detects():
    c = _ctrl(0.0, **(DET | {"burst": False}))
    c.step(_x(1.0, r=0.5))
    assert c.step(_x(3.0)) == 0.5 and not c.in_burst and math.isnan(c._m0)


# ---------------------------------------------------------------- written after the mutation run


def test_load_hints_are_exact(tmp_path):
    with pytest.raises(InputFileError) as e:
        Controller.load(tmp_path / "nope.npz")
    assert e.value.hint == "train one with `helm-plan train TRACE... -o FILE`"
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputFileError) as e:
        Controller.load(bad)
    assert e.value.hint == "pass a .npz written by `helm-plan train`"
    none = tmp_path / "none.npz"
    np.savez(none, shifts=np.zeros(2))
    with pytest.raises(InputFileError) as e:
        Controller.load(none)
    assert e.value.hint == "pass a .npz written by `helm-plan train`"


def test_load_reads_only_numbered_weights(tmp_path):
    # "Wx" starts like a weight but is not one: the actor still has two layers
    p = tmp_path / "w.npz"
    np.savez(p, **_ctrl(0.2).arrays(), Wx=np.zeros((2, 2)))
    c = Controller.load(p, RuntimeConfig(hold_margin=0.0, adapter=False, burst=False, guard=False))
    assert len(c._W) == 2 and c.step(_x(r=0.5)) == pytest.approx(0.7)


def test_card_is_stored_sorted_and_as_text(tmp_path):
    c = _ctrl()
    c.card.update({"b": 1, "a": tmp_path})
    assert str(c.arrays()["card"]) == '{"a": "' + str(tmp_path) + '", "b": 1}'


def test_with_config_keeps_the_source(tmp_path):
    p = save(_ctrl(), tmp_path / "c.npz")
    d = Controller.load(p).with_config(RuntimeConfig())
    assert d.source == str(p)


# ---------------------------------------------------------------- the full run's survivors


def test_version_error_names_the_source():
    with pytest.raises(ConfigError, match="^ctl.npz was trained on feature version v0,"):
        Controller(_actor(0.0), np.array(SHIFTS), feature_version="v0", source="ctl.npz")


def test_weights_and_shifts_are_kept_as_float64():
    w = {k: v.astype(np.float32) for k, v in _actor(0.1).items()}
    a = Controller(w, np.array(SHIFTS, np.float32)).arrays()
    assert {k: str(a[k].dtype) for k in ("W0", "b0", "W1", "b1", "shifts")} == dict.fromkeys(
        ("W0", "b0", "W1", "b1", "shifts"), "float64"
    )


def _three_layers(rng, h1: int = 6, h2: int = 7, n_act: int = len(SHIFTS)):
    return {"W0": rng.normal(size=(h1, N_FEATURES)), "b0": rng.normal(size=h1),
            "W1": rng.normal(size=(h2, h1)), "b1": rng.normal(size=h2),
            "W2": rng.normal(size=(n_act, h2)), "b2": rng.normal(size=n_act)}  # fmt: skip


def test_shape_error_hints_are_exact_and_count_the_output_layer():
    hint = "retrain the controller with `helm-plan train`"
    with pytest.raises(ConfigError) as e:
        Controller(_actor(0.0) | {"W0": np.zeros((4, 3))}, np.array(SHIFTS))
    assert e.value.hint == hint
    # three layers of 6, 7 and 5 outputs: the action count is the last layer's
    w = _three_layers(np.random.default_rng(0), n_act=5)
    with pytest.raises(ConfigError, match="src: the actor has 5 actions for 10 shifts") as e:
        Controller(w, np.array(SHIFTS), source="src")
    assert e.value.hint == hint


def test_three_layer_forward_matches_numpy():
    # two hidden layers of other widths than the input: each layer reads the previous one's
    # output, and the logits come from the last layer
    rng = np.random.default_rng(1)
    w = _three_layers(rng)
    c = Controller(w, np.array(SHIFTS), RuntimeConfig(hold_margin=0.0, guard=False))
    c.reset(0.5)
    for _ in range(50):
        x = rng.normal(size=N_FEATURES)
        h = np.tanh(w["W1"] @ np.tanh(w["W0"] @ x + w["b0"]) + w["b1"])
        d = SHIFTS[int(np.argmax(w["W2"] @ h + w["b2"]))]
        # the curve action (NaN) shifts the base ratio to the curve's optimum
        assert c.base_shift(x) == (x[OPT_INDEX] - 0.5 if d != d else d)


def test_plain_argmax_breaks_a_tie_with_hold_towards_the_first_action():
    # every logit equal: with hold_margin 0 the first maximum (-0.5) wins, not the hold
    c = Controller(
        _actor(0.0, logit=0.0), np.array(SHIFTS), RuntimeConfig(hold_margin=0.0, guard=False)
    )
    assert c.base_shift(_x()) == SHIFTS[0] == -0.5


def test_bursts_are_counted():
    c = _ctrl(**(DET | {"recovery_windows": 1}))
    seq = [1.0, 3.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 3.0]  # z0 = (3 − 1) / 0.25 = 8 > 4: a burst
    counts = []
    for v0 in seq:
        c.step(_x(v0))
        counts.append(c.bursts)
    assert counts == [0, 1, 1, 1, 1, 2, 2, 2, 3]
