"""The controller's environments (``controller/env.py``) on a hand-made label trace and a
scripted node, against hand-worked raw measurements and rewards (issue 16, item 4).

The label trace has three windows of a three-point P99 grid and linear ghost curves, so every
interpolation, ghost gain and reward below is worked out by hand. ``NodeEnv`` runs over a
scripted stand-in of the node runner and the ghost: what it hands them and what it scores is
checked against the numbers in the script. ``observation`` is replaced by the identity, so the
raw measurements themselves are compared.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from controller_fixtures import recording_ghost

from helm_plan.controller import env as E
from helm_plan.controller.dataset import ARRIVAL_KEYS, LabelTrace
from helm_plan.controller.env import SHIFTS, LabelEnv, NodeEnv, RewardConfig
from helm_plan.controller.features import N_FEATURES
from helm_plan.errors import ConfigError
from helm_plan.sim import NodeConfig

S = np.linspace(0.0, 1.0, 101)


def _trace(name="t", **kw) -> LabelTrace:
    base = dict(
        name=name, window_s=5.0, slo_ms=9.0,
        arrival=np.array([[10.0 * w + i + 0.5 for i in range(len(ARRIVAL_KEYS))] for w in range(3)]),
        grid_r=np.array([[0.0, 0.5, 1.0], [0.0, 0.3, 1.0], [0.0, 0.5, 1.0]]),
        grid_p99_ms=np.array([[10.0, 4.0, 8.0], [12.0, 3.0, 9.0], [20.0, 5.0, 7.0]]),
        grid_emb_hit=np.array([[0.0, 0.5, 0.9], [0.1, 1.0, 0.8], [0.0, 0.4, 1.0]]),
        grid_kv_reuse=np.array([[0.8, 0.4, 0.0], [0.9, 0.5, 0.1], [0.7, 0.3, 0.2]]),
        r_star=np.array([0.5, 0.3, np.nan]), p99_star_ms=np.array([4.0, 3.0, np.nan]),
        flat_lo=np.array([0.4, 0.2, np.nan]), flat_hi=np.array([0.6, 0.35, np.nan]),
        h2d_util_star=np.array([0.2, 0.3, 0.4]),
        ghost_emb=np.stack([1000.0 * S, 400.0 * S, 0.0 * S]),
        ghost_kv=np.stack([600.0 * (1 - S), 200.0 * (1 - S), 0.0 * S]),
        ghost_lookup_bytes=np.array([2000.0, 800.0, 0.0]),
        ghost_ctx_tokens=np.array([300.0, 100.0, 0.0]),
        emb_s_per_byte=1e-3, kv_s_per_token=2e-3,
    )  # fmt: skip
    return LabelTrace(**(base | kw))


@pytest.fixture
def raw_obs(monkeypatch):
    """observation() returns the raw measurements themselves."""
    monkeypatch.setattr(E, "observation", lambda raw: dict(raw))


# ---- helpers -------------------------------------------------------------------------------


def test_ratio_of_clamps():
    assert [E._ratio_of(r) for r in (-0.1, 0.0, 0.4, 1.0, 1.3)] == [0.0, 0.0, 0.4, 1.0, 1.0]


def test_shifts_and_hold():
    assert SHIFTS[E.HOLD] == 0.0 and E.HOLD == 4 and E.GHOST_DELTA == 0.05
    assert RewardConfig() == RewardConfig(1.0, 0.05, 1.0, 1.0)


def test_raw_from_window_by_hand():
    res = SimpleNamespace(emb_hit_rate=0.7, kv_reuse_rate=0.2, miss_bytes=600.0, start_s=10.0,
                          end_s=13.0, p99_ms=4.5, ratio=0.35)  # fmt: skip
    arrival = {"arrival_rate_rps": 3.0, "burst_score": 2.0}
    ghost = {"ghost_emb_gain_up": 0.1}
    raw = E.raw_from_window(res, arrival, ghost, 9.0, 100.0)
    assert raw == {"arrival_rate_rps": 3.0, "burst_score": 2.0, "ghost_emb_gain_up": 0.1,
                   "emb_hit_rate": 0.7, "kv_reuse_rate": 0.2,
                   "h2d_util": 600.0 / (100.0 * 3.0), "p99_slo": 0.5, "ratio": 0.35,
                   "window_s": 3.0}  # fmt: skip
    assert arrival == {"arrival_rate_rps": 3.0, "burst_score": 2.0}  # not written to


def test_raw_from_labels_by_hand():
    raw = E.raw_from_labels(_trace(), 0, 0.3)
    want = {k: 0.5 + i for i, k in enumerate(ARRIVAL_KEYS)}
    # r = 0.3 on the grid (0, 0.5, 1): EMB hit 0.3, P99 10 - 0.6 * 6 = 6.4, KV 0.8 - 0.6 * 0.4;
    # r* = 0.5 hits 0.5, so the H2D utilisation at r* (0.2) scales by (1 - 0.3) / (1 - 0.5)
    want |= {"emb_hit_rate": 0.3, "kv_reuse_rate": 0.56, "h2d_util": 0.28, "p99_slo": 6.4 / 9.0,
             "ratio": 0.3, "window_s": 5.0}  # fmt: skip
    # ghost: EMB hits 1000 s over 2000 looked-up bytes, KV reuse 600 (1 - s) over 300 tokens;
    # a move of 0.05 gains or loses 50 bytes and 30 tokens
    want |= {"ghost_emb_gain_up": 0.025, "ghost_emb_loss_down": 0.025,
             "ghost_kv_gain_down": 0.1, "ghost_kv_loss_up": 0.1,
             "ghost_net_up_s": 50 * 1e-3 - 30 * 2e-3, "ghost_net_down_s": 30 * 2e-3 - 50 * 1e-3}  # fmt: skip
    assert set(raw) == set(want)
    for k, v in want.items():
        assert raw[k] == pytest.approx(v, abs=1e-12), k


def test_raw_from_labels_delta_and_window():
    raw = E.raw_from_labels(_trace(), 1, 0.65, delta=0.1)
    # window 1: grid (0, 0.3, 1); r* = 0.3 hits 1.0, so H2D is r*'s own (no scaling by 0)
    assert raw["emb_hit_rate"] == pytest.approx(1.0 - 0.2 * 0.5)
    assert raw["p99_slo"] == pytest.approx((3.0 + 3.0) / 9.0)
    assert raw["kv_reuse_rate"] == pytest.approx(0.5 - 0.4 * 0.5)
    assert raw["h2d_util"] == 0.3
    assert raw["arrival_rate_rps"] == 10.5 and raw["hist_len_p95"] == 16.5
    # ghost: 400 s over 800 bytes, 200 (1 - s) over 100 tokens, moves of 0.1
    assert raw["ghost_emb_gain_up"] == pytest.approx(40 / 800)
    assert raw["ghost_kv_loss_up"] == pytest.approx(20 / 100)
    assert raw["ghost_net_down_s"] == pytest.approx(20 * 2e-3 - 40 * 1e-3)


def test_raw_from_labels_without_oracle_ratio():
    raw = E.raw_from_labels(_trace(), 2, 0.5)
    # r* NaN: the table's H2D utilisation as is; no lookups: no gains
    assert raw["h2d_util"] == 0.4 and raw["emb_hit_rate"] == pytest.approx(0.4)
    assert raw["ghost_emb_gain_up"] == 0.0 and raw["ghost_net_up_s"] == 0.0


# ---- LabelEnv ------------------------------------------------------------------------------


def test_label_env_checks_its_traces():
    with pytest.raises(ConfigError) as e:
        LabelEnv([])
    assert str(e.value.args[0]) == "LabelEnv needs at least one label trace"
    assert e.value.hint == "pass label traces"
    one = _trace("short-one", **{f: getattr(_trace(), f)[:1] for f in (
        "arrival", "grid_r", "grid_p99_ms", "grid_emb_hit", "grid_kv_reuse", "r_star",
        "p99_star_ms", "flat_lo", "flat_hi", "h2d_util_star", "ghost_emb", "ghost_kv",
        "ghost_lookup_bytes", "ghost_ctx_tokens")})  # fmt: skip
    two = _trace("two", **{f: getattr(_trace(), f)[:2] for f in (
        "r_star", "p99_star_ms")})  # fmt: skip
    with pytest.raises(ConfigError, match="label trace short-one has fewer than 2 windows") as e:
        LabelEnv([two, one])
    assert e.value.hint == "use traces at least two windows long"
    env = LabelEnv([two])  # two windows are enough
    assert env.traces == [two] and env.reward_cfg == RewardConfig() and env.start_ratio is None
    assert env.action_space == gym.spaces.Discrete(9)
    box = env.observation_space
    assert box.shape == (N_FEATURES,) and box.dtype == np.float64
    assert np.all(box.low == -10.0) and np.all(box.high == 10.0)


def test_label_env_reset(raw_obs):
    trs = [_trace("a"), _trace("b"), _trace("c")]
    env = LabelEnv(trs)
    obs, info = env.reset(seed=5)
    g = np.random.default_rng(5)  # gymnasium's generator for seed 5
    k = int(g.integers(3))
    r = float(np.round(g.uniform(), 2))
    assert info == {"trace": trs[k].name}
    # observed: window 0 at the start ratio
    assert obs["ratio"] == r and obs["arrival_rate_rps"] == 0.5
    obs, info = env.reset(options={"trace": 1, "ratio": 0.8})
    assert info == {"trace": "b"} and obs["ratio"] == 0.8
    env = LabelEnv(trs, start_ratio=0.25)
    obs, info = env.reset(seed=1, options={"trace": 2})
    assert info == {"trace": "c"} and obs["ratio"] == 0.25
    obs, info = env.reset(options={"trace": 2, "ratio": 0.6})
    assert obs["ratio"] == 0.6


W = RewardConfig(violation_penalty=3.0, shift_cost=0.5, band_weight=2.0, rstar_weight=4.0)


def test_label_env_episode_by_hand(raw_obs):
    env = LabelEnv([_trace()], reward=W)
    env.reset(options={"trace": 0, "ratio": 0.5})
    obs, rew, done, trunc, info = env.step(8)  # +0.2
    # window 1 at 0.7: P99 3 + (0.4 / 0.7) * 6 on (0.3, 1); r* 0.3, band (0.2, 0.35)
    p99 = 3.0 + 0.4 / 0.7 * 6.0
    assert info == {"window": 1, "ratio": pytest.approx(0.7), "r_star": 0.3,
                    "p99_ms": pytest.approx(p99)}  # fmt: skip
    assert rew == pytest.approx(-0.5 * 0.2 - p99 / 3.0 - 2.0 * 0.35 - 4.0 * 0.4)
    assert isinstance(rew, float) and not done and trunc is False
    assert obs["ratio"] == pytest.approx(0.7) and obs["arrival_rate_rps"] == 10.5  # window 1
    obs, rew, done, trunc, info = env.step(0)  # -0.2: window 2 is empty (no r*): move + 1
    assert rew == pytest.approx(-0.5 * 0.2 - 1.0) and done and trunc is False
    assert info["window"] == 2 and math.isnan(info["r_star"])
    assert info["p99_ms"] == pytest.approx(5.0)
    assert obs["ratio"] == pytest.approx(0.5) and obs["arrival_rate_rps"] == 20.5  # window 2
    # a new episode starts at window 1 again
    env.reset(options={"trace": 0, "ratio": 0.5})
    assert env.step(E.HOLD)[4]["window"] == 1


def test_label_env_violation_band_and_slo_edge(raw_obs):
    env = LabelEnv([_trace()], reward=W)
    env.reset(options={"trace": 0, "ratio": 0.1})
    _, rew, _, _, info = env.step(0)  # -0.2 from 0.1: clamped at 0, a move of 0.1
    # P99 12 > SLO 9: violation; r = 0 sits 0.2 below the band, 0.3 from r*
    assert info["ratio"] == 0.0 and info["p99_ms"] == 12.0
    assert rew == pytest.approx(-0.5 * 0.1 - 12.0 / 3.0 - 3.0 - 2.0 * 0.2 - 4.0 * 0.3)
    env.reset(options={"trace": 0, "ratio": 1.0})
    _, rew, _, _, info = env.step(E.HOLD)
    # P99 exactly the SLO (9 at r = 1): no violation
    assert info["p99_ms"] == 9.0
    assert rew == pytest.approx(-9.0 / 3.0 - 2.0 * 0.65 - 4.0 * 0.7)
    env.reset(options={"trace": 0, "ratio": 0.95})
    _, rew, _, _, info = env.step(8)  # clamped at 1
    assert info["ratio"] == 1.0
    assert rew == pytest.approx(-0.5 * 0.05 - 9.0 / 3.0 - 2.0 * 0.65 - 4.0 * 0.7)


def test_label_env_inside_the_band_and_small_reference(raw_obs):
    env = LabelEnv([_trace()], reward=W)
    env.reset(options={"trace": 0, "ratio": 0.3})
    _, rew, _, _, info = env.step(E.HOLD)
    # r* itself, inside the band (0.2, 0.35): no band or r* charge, no move
    assert info["p99_ms"] == 3.0 and rew == pytest.approx(-3.0 / 3.0)
    # an oracle P99 below 1 ms still scores the window (only a non-positive one does not)
    t = dataclasses.replace(_trace(), p99_star_ms=np.array([4.0, 0.5, np.nan]))
    env = LabelEnv([t], reward=W)
    env.reset(options={"trace": 0, "ratio": 0.3})
    assert env.step(E.HOLD)[1] == pytest.approx(-3.0 / 0.5)


@pytest.mark.parametrize("which", ["zero-ref", "nan-p99", "inf-ref"])
def test_label_env_unscorable_window_charges_the_move_and_one(raw_obs, which):
    t = _trace()
    if which == "zero-ref":
        t = dataclasses.replace(t, p99_star_ms=np.array([4.0, 0.0, np.nan]))
    elif which == "inf-ref":
        t = dataclasses.replace(t, p99_star_ms=np.array([4.0, np.inf, np.nan]))
    else:
        t = dataclasses.replace(t, grid_p99_ms=np.array([[10.0, 4.0, 8.0], [np.nan] * 3,
                                                         [20.0, 5.0, 7.0]]))  # fmt: skip
    env = LabelEnv([t], reward=W)
    env.reset(options={"trace": 0, "ratio": 0.5})
    _, rew, _, _, _ = env.step(5)  # +0.02
    assert rew == pytest.approx(-0.5 * 0.02 - 1.0)


# ---- NodeEnv -------------------------------------------------------------------------------

CTX = SimpleNamespace(workload="WL", pool_bytes=123,
                      model=SimpleNamespace(kv_bytes_per_token=4, default_slo_ms=7.0),
                      arrays=SimpleNamespace(ts_s="TS"), first_visit="FV", ctx_len="CL",
                      latency=SimpleNamespace(h2d_bw_Bps=1000.0))  # fmt: skip
# per window: requests, first, P99 ms
SCRIPT = [(4, 10, 7.0), (0, 14, 12.0), (2, 14, 10.0), (3, 16, math.nan)]


@pytest.fixture
def node(monkeypatch, raw_obs):
    log = SimpleNamespace(calls=[], n_windows=len(SCRIPT))

    class Runner:
        def __init__(self, ctx, cfg):
            log.calls.append(("runner", ctx, cfg))
            self.n_windows, self.edges, self.i, self.ratio, self.done = (
                log.n_windows,
                "EDGES",
                0,
                0.5,
                False,
            )

        def reset(self):
            log.calls.append(("runner.reset",))
            self.i, self.done = 0, False

        def step(self, r):
            n, first, p99 = SCRIPT[self.i]
            res = SimpleNamespace(window=self.i, requests=n, first=first, n_computed=f"NC{self.i}",
                                  emb_hit_rate=0.1 * self.i, kv_reuse_rate=0.2, miss_bytes=500.0,
                                  start_s=5.0 * self.i, end_s=5.0 * self.i + 5.0, p99_ms=p99,
                                  ratio=r)  # fmt: skip
            self.i += 1
            self.ratio, self.done = r, self.i >= self.n_windows
            return res

    Ghost = recording_ghost(log.calls)

    def gains(c, r, delta, eb, kt):
        log.calls.append(("gains", c, r, delta, eb, kt))
        return SimpleNamespace(as_dict=lambda: {"ghost_emb_gain_up": r})

    def window_features(*a):
        log.calls.append(("features", *a))
        return {"arrival_rate_rps": np.array([1.0, 2.0, 3.0, 4.0]), "burst_score": np.arange(4.0)}

    monkeypatch.setattr(E, "NodeRunner", Runner)
    monkeypatch.setattr(E, "Ghost", Ghost)
    monkeypatch.setattr(E, "gains", gains)
    monkeypatch.setattr(E, "metrics", SimpleNamespace(window_features=window_features))
    monkeypatch.setattr(E, "cost_coefficients", lambda ctx: (0.25, 0.75) if ctx is CTX else None)
    return log


NCFG = NodeConfig(window_s=5.0, slo_ms=10.0)


def test_node_env_init(node):
    env = NodeEnv(CTX, NCFG)
    assert node.calls == [("runner", CTX, NCFG), ("ghost", "WL", 123, 4),
                          ("features", "TS", "EDGES", 5.0, "FV", "CL")]  # fmt: skip
    assert env.costs == (0.25, 0.75) and env.reward_cfg == RewardConfig() and env.start_ratio == 0.5
    assert env.action_space == gym.spaces.Discrete(9)
    assert env.observation_space.shape == (N_FEATURES,)
    assert env.observation_space.dtype == np.float64
    assert np.all(env.observation_space.low == -10.0) and np.all(env.observation_space.high == 10.0)
    assert NodeEnv(CTX).cfg == NodeConfig(slo_ms=7.0)  # no SLO given: the model's default
    node.n_windows = 2
    NodeEnv(CTX, NCFG)  # two windows: one to warm, one to score
    node.n_windows = 1
    with pytest.raises(ConfigError, match="at least 2 windows, the trace has 1") as e:
        NodeEnv(CTX, NCFG)
    assert e.value.hint == "use a longer trace or a shorter --window-s"


def test_node_env_reset_serves_window_zero(node):
    env = NodeEnv(CTX, NCFG, start_ratio=0.3)
    node.calls.clear()
    obs, info = env.reset(seed=0)
    assert info == {"window": 0, "ratio": 0.3, "p99_ms": 7.0}
    assert node.calls == [("runner.reset",), ("ghost.reset",), ("observe", 10, 14, "NC0"),
                          ("gains", "CURVES10", 0.3, 0.05, 0.25, 0.75)]  # fmt: skip
    # the raw measurements of window 0: arrival features at 0, the ghost, the served window
    assert obs == {"arrival_rate_rps": 1.0, "burst_score": 0.0, "ghost_emb_gain_up": 0.3,
                   "emb_hit_rate": 0.0, "kv_reuse_rate": 0.2, "h2d_util": 500.0 / (1000.0 * 5.0),
                   "p99_slo": 0.7, "ratio": 0.3, "window_s": 5.0}  # fmt: skip
    _, info = env.reset(options={"ratio": 0.9})
    assert info["ratio"] == 0.9 and info["window"] == 0
    # reset(seed=...) seeds the environment's generator (gymnasium's contract)
    env.reset(seed=3)
    assert env.np_random.random() == np.random.default_rng(3).random()


def test_node_env_steps_by_hand(node):
    env = NodeEnv(CTX, NCFG, reward=W)
    env.reset(options={"ratio": 0.3})
    node.calls.clear()
    obs, rew, done, trunc, info = env.step(7)  # +0.1
    # window 1 has no requests: no ghost; P99 12 > SLO 10
    assert node.calls == [] and "ghost_emb_gain_up" not in obs
    assert obs["arrival_rate_rps"] == 2.0 and obs["p99_slo"] == 1.2
    assert info == {"window": 1, "ratio": pytest.approx(0.4), "p99_ms": 12.0}
    assert rew == pytest.approx(-0.5 * 0.1 - 1.2 - 3.0) and not done and trunc is False
    _, rew, done, _, info = env.step(2)  # -0.05: P99 exactly the SLO, no violation
    assert node.calls[-1] == ("gains", "CURVES14", pytest.approx(0.35), 0.05, 0.25, 0.75)
    assert rew == pytest.approx(-0.5 * 0.05 - 1.0) and not done
    _, rew, done, _, info = env.step(8)  # +0.2: P99 NaN, only the move is charged
    assert rew == pytest.approx(-0.5 * 0.2) and done and isinstance(rew, float)
    assert info == {"window": 3, "ratio": pytest.approx(0.55), "p99_ms": info["p99_ms"]}


def test_node_env_clamps_the_ratio(node):
    env = NodeEnv(CTX, NCFG, reward=W)
    env.reset(options={"ratio": 0.05})
    _, rew, _, _, info = env.step(0)  # -0.2 from 0.05: 0, a move of 0.05
    assert info["ratio"] == 0.0
    assert rew == pytest.approx(-0.5 * 0.05 - 1.2 - 3.0)
