"""The controller and ghost hill climbing as node policies (``controller/policy.py``), over a
recording ghost and controller (issue 16, item 4).

The ghost, its gains and the observation function are replaced by stand-ins that record what
they are handed; each decision is checked against the rule written out by hand: hill climbing
steps toward the direction whose ghost gain saves more time (and only when it saves any), the
controller policy hands the controller the observation of the window just served.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from controller_fixtures import recording_ghost

from helm_plan.cache.ghost import NO_GAINS, GhostGains
from helm_plan.controller import policy as P
from helm_plan.controller.policy import ControllerPolicy, HillClimbPolicy
from helm_plan.errors import ConfigError
from helm_plan.sim import NodeConfig
from helm_plan.sim.policy import Observation

CTX = SimpleNamespace(workload="WL", pool_bytes=321, model=SimpleNamespace(kv_bytes_per_token=6),
                      latency=SimpleNamespace(h2d_bw_Bps=200.0))  # fmt: skip
CFG = NodeConfig(window_s=5.0, slo_ms=8.0)
NET = {"up": 0.0, "down": 0.0}


@pytest.fixture
def log(monkeypatch):
    log = SimpleNamespace(calls=[])

    Ghost = recording_ghost(log.calls)

    def gains(c, r, delta, eb, kt):
        log.calls.append(("gains", c, r, delta, eb, kt))
        return GhostGains(0.01, 0.02, 0.03, 0.04, NET["up"], NET["down"])

    monkeypatch.setattr(P, "Ghost", Ghost)
    monkeypatch.setattr(P, "gains", gains)
    monkeypatch.setattr(P, "cost_coefficients", lambda ctx: (0.25, 0.75) if ctx is CTX else None)
    monkeypatch.setattr(P, "observation", lambda raw: dict(raw))
    NET.update(up=0.0, down=0.0)
    return log


def _res(requests=4, first=10, ratio=0.4):
    return SimpleNamespace(requests=requests, first=first, n_computed="NC", ratio=ratio,
                           emb_hit_rate=0.6, kv_reuse_rate=0.3, miss_bytes=400.0, start_s=10.0,
                           end_s=15.0, p99_ms=4.0)  # fmt: skip


def _obs(last=None, ratio=0.4, features=None):
    return Observation(window=3, ratio=ratio, last=last, features=features or {})


class RecController:
    def __init__(self):
        self.xs, self.resets = [], 0

    def step(self, x):
        self.xs.append(x)
        return 0.37

    def reset(self):
        self.resets += 1


# ---- the shared plumbing -------------------------------------------------------------------


def test_ghost_policy_init_and_gains(log):
    pol = HillClimbPolicy(CTX, CFG, step=0.1)
    assert log.calls == [("ghost", "WL", 321, 6)]
    assert pol.ctx is CTX and pol.cfg is CFG and pol.delta == 0.1 and pol.costs == (0.25, 0.75)
    log.calls.clear()
    g = pol._gains(_obs(_res(requests=4, first=10, ratio=0.45)))
    assert log.calls == [("observe", 10, 14, "NC"), ("gains", "CURVES10", 0.45, 0.1, 0.25, 0.75)]
    assert g == GhostGains(0.01, 0.02, 0.03, 0.04, 0.0, 0.0)
    log.calls.clear()
    pol._gains(_obs(_res(requests=2, first=0)))  # the trace's first request is contiguous
    assert log.calls[0] == ("observe", 0, 2, "NC")
    # the default delta is the environments' own
    assert ControllerPolicy(CTX, CFG, RecController(), "c").delta == 0.05 == P.GHOST_DELTA


def test_ghost_policy_no_gains(log):
    pol = HillClimbPolicy(CTX, CFG)
    log.calls.clear()
    for obs in (_obs(None), _obs(_res(requests=0)), _obs(_res(first=-1))):
        assert pol._gains(obs) is NO_GAINS
    assert log.calls == []


# ---- ControllerPolicy ----------------------------------------------------------------------


def test_controller_policy_decides_from_the_served_window(log):
    ctl = RecController()
    pol = ControllerPolicy(CTX, CFG, ctl, "controller:x")
    assert pol.spec == "controller:x" and pol.controller is ctl and pol.latency_s == []
    assert pol.decide(_obs(None)) == 0.5 == P.START_RATIO and ctl.xs == []
    r = pol.decide(_obs(_res(ratio=0.4), features={"arrival_rate_rps": 3.0}))
    assert r == 0.37
    (x,) = ctl.xs
    # the window just served, measured: arrival features, ghost gains at its ratio, the result
    assert x == {"arrival_rate_rps": 3.0,
                 "ghost_emb_gain_up": 0.01, "ghost_emb_loss_down": 0.02,
                 "ghost_kv_gain_down": 0.03, "ghost_kv_loss_up": 0.04,
                 "ghost_net_up_s": 0.0, "ghost_net_down_s": 0.0,
                 "emb_hit_rate": 0.6, "kv_reuse_rate": 0.3, "h2d_util": 400.0 / (200.0 * 5.0),
                 "p99_slo": 0.5, "ratio": 0.4, "window_s": 5.0}  # fmt: skip
    assert len(pol.latency_s) == 1 and 0.0 <= pol.latency_s[0] < 1.0
    pol.decide(_obs(_res(requests=0)))  # no ghost: zero gains in the raw measurements
    assert {k: v for k, v in ctl.xs[1].items() if k.startswith("ghost_")} == dict.fromkeys(
        x_keys := [k for k in x if k.startswith("ghost_")], 0.0
    )
    assert len(x_keys) == 6 and len(pol.latency_s) == 2
    log.calls.clear()
    pol.reset()
    assert log.calls == [("ghost.reset",)] and ctl.resets == 1 and pol.latency_s == []


# ---- HillClimbPolicy -----------------------------------------------------------------------


@pytest.mark.parametrize("step", [0.0, -0.1, 0.51, 1.0])
def test_hill_climb_step_range(log, step):
    with pytest.raises(
        ConfigError, match=f"hill-climb step must be in \\(0, 0.5\\], got {step}"
    ) as e:
        HillClimbPolicy(CTX, CFG, step=step)
    assert e.value.hint == "pass 0.05"


def test_hill_climb_defaults(log):
    pol = HillClimbPolicy(CTX, CFG)
    assert pol.step == 0.05 and pol.delta == 0.05 and pol.spec == "hill-climb"
    assert HillClimbPolicy(CTX, CFG, step=0.5, name="hc").spec == "hc"


@pytest.mark.parametrize(
    ("up", "down", "want"),
    [
        (0.2, 0.1, 0.5),  # up saves more: +0.1
        (0.1, 0.2, 0.3),  # down saves more: -0.1
        (0.2, 0.2, 0.4),  # a tie: hold
        (-0.1, -0.2, 0.4),  # neither saves time: hold
        (0.0, -0.1, 0.4),  # up saves nothing: hold
        (-0.1, 0.0, 0.4),  # down saves nothing: hold
        (0.1, -0.5, 0.5),
        (-0.5, 0.1, 0.3),
    ],
)  # fmt: skip
def test_hill_climb_direction(log, up, down, want):
    pol = HillClimbPolicy(CTX, CFG, step=0.1)
    NET.update(up=up, down=down)
    got = pol.decide(_obs(_res(), ratio=0.4))
    assert got == pytest.approx(want) and isinstance(got, float)


def test_hill_climb_clips_and_starts(log):
    pol = HillClimbPolicy(CTX, CFG, step=0.3)
    assert pol.decide(_obs(None)) == 0.5
    NET.update(up=1.0, down=0.0)
    assert pol.decide(_obs(_res(), ratio=0.9)) == 1.0
    NET.update(up=0.0, down=1.0)
    assert pol.decide(_obs(_res(), ratio=0.1)) == 0.0
    # no ghost (no requests): hold where the node is
    assert pol.decide(_obs(_res(requests=0), ratio=0.6)) == 0.6
    log.calls.clear()
    pol.reset()
    assert log.calls == [("ghost.reset",)]
