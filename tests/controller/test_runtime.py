"""The numpy runtime: no torch, the step burst, the adapter's bound, files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from helm_plan.controller.env import SHIFTS
from helm_plan.controller.features import (
    BURST_INDEX,
    COLD_INDEX,
    N_FEATURES,
    NET_UP_INDEX,
    RATIO_INDEX,
)
from helm_plan.controller.runtime import DEFAULT_PATH, Controller, RuntimeConfig, save
from helm_plan.errors import InputFileError


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
