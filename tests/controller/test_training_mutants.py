"""Training and validation (``controller/training.py``) against hand-worked wiring and figures
(issue 16, item 4).

The heavy collaborators (the synthesizer, ingest, the labeller, PPO, the node simulator, the
bootstrap) are replaced by recording stand-ins, so what each function hands them is checked
against the documented settings, and every validation figure against numbers worked out by
hand from a scripted six-window run.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import warnings
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

import helm_plan
from helm_plan.controller import training as T
from helm_plan.controller.env import SHIFTS
from helm_plan.controller.features import FEATURE_VERSION, N_FEATURES
from helm_plan.controller.runtime import RuntimeConfig
from helm_plan.oracle import OracleConfig
from helm_plan.sim import NodeConfig
from helm_plan.sim.policy import SchedulePolicy

# ---- SynthSpec, synth_context, real_trace_contexts -------------------------------------------


def test_synth_spec_defaults_and_name():
    s = T.SynthSpec("burst", 7)
    assert (s.qps, s.pool_fraction, s.duration_s) == (80.0, 0.1, 300.0)
    assert s.name == "synth:burst:seed7:qps80:pool0.1"
    assert T.SynthSpec("mixed", 23, 12.5, 0.125).name == "synth:mixed:seed23:qps12.5:pool0.125"


def test_synth_context_settings(monkeypatch):
    import helm_plan.synth as synth

    calls = []
    monkeypatch.setattr(synth, "synthesize", lambda cfg: calls.append(cfg) or "TAB")
    monkeypatch.setattr(T, "load_context", lambda tab, **kw: calls.append((tab, kw)) or "CTX")
    assert T.synth_context(T.SynthSpec("trend", 5, 12.5, 0.07, 40.0)) == "CTX"
    cfg, lc = calls
    # the docstring's recipe: candidates 64, 100k items, returning history 800
    assert (cfg.regime, cfg.qps, cfg.duration_s, cfg.seed) == ("trend", 12.5, 40.0, 5)
    assert (cfg.items, cfg.candidates, cfg.returning_history_mean) == (100_000, 64, 800.0)
    assert lc == ("TAB", {"pool_fraction": 0.07, "seed": 5})


def _fake_ingest(monkeypatch):
    import helm_plan.ingest as ingest

    calls = []

    def fake(path, cfg):
        calls.append((path.name, cfg))
        return f"TAB:{path.name}", None

    monkeypatch.setattr(ingest, "ingest", fake)
    monkeypatch.setattr(T, "load_context", lambda tab, **kw: (tab, kw))
    return calls


def test_real_trace_contexts_default_kind(monkeypatch, tmp_path):
    calls = _fake_ingest(monkeypatch)
    (tmp_path / "movielens-100k.inter.tsv").write_text("")
    (tmp_path / "amazon-video-games.seq.txt").write_text("")
    out = T.real_trace_contexts(tmp_path)  # movielens only, at 40 qps
    assert out == [("movielens-100k",
                    ("TAB:movielens-100k.inter.tsv", {"pool_fraction": 0.1, "seed": 0}))]  # fmt: skip
    ((fname, cfg),) = calls
    assert fname == "movielens-100k.inter.tsv"
    assert (cfg.kind, cfg.n_candidates, cfg.qps, cfg.duration_s, cfg.seed) == (
        "movielens", 64, 40.0, 300.0, 0)  # fmt: skip


def test_real_trace_contexts_skips_missing_files_and_keeps_order(monkeypatch, tmp_path):
    calls = _fake_ingest(monkeypatch)
    (tmp_path / "movielens-100k.inter.tsv").write_text("")
    # amazon is absent: skipped, not the end of the list
    out = T.real_trace_contexts(tmp_path, ("amazon", "movielens"), qps=7.5)
    assert [n for n, _ in out] == ["movielens-100k"]
    assert calls[0][1].qps == 7.5 and calls[0][1].kind == "movielens"
    (tmp_path / "amazon-video-games.seq.txt").write_text("")
    calls.clear()
    out = T.real_trace_contexts(tmp_path, ("amazon", "movielens"))
    assert [n for n, _ in out] == ["amazon-video-games", "movielens-100k"]
    assert [c.kind for _, c in calls] == ["amazon", "movielens"]
    assert T.real_trace_contexts(tmp_path / "nowhere") == []


# ---- label_traces ----------------------------------------------------------------------------


def test_label_traces_in_order_with_progress(monkeypatch):
    calls = []
    monkeypatch.setattr(T.dataset, "build", lambda *a: calls.append(a) or f"LT:{a[3]}")
    ticks = []
    ncfg, ocfg = NodeConfig(window_s=3.0), OracleConfig(trials=0, coarse_step=0.25)
    out = T.label_traces([("a", "CA"), ("b", "CB"), ("c", "CC")], ncfg, ocfg,
                         lambda i, n: ticks.append((i, n)))  # fmt: skip
    assert out == ["LT:a", "LT:b", "LT:c"]
    assert calls == [("CA", ncfg, ocfg, "a"), ("CB", ncfg, ocfg, "b"), ("CC", ncfg, ocfg, "c")]
    assert ticks == [(1, 3), (2, 3), (3, 3)]
    calls.clear()
    assert T.label_traces([("z", "CZ")]) == ["LT:z"]  # no progress: fine
    # the defaults: 10 s windows, the oracle's coarse grid without Optuna trials
    assert calls == [("CZ", NodeConfig(window_s=10.0), OracleConfig(trials=0), "z")]


# ---- fit -------------------------------------------------------------------------------------


def _weights(hidden: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"W0": rng.normal(size=(hidden, N_FEATURES)), "b0": rng.normal(size=hidden),
            "W1": rng.normal(size=(len(SHIFTS), hidden)), "b1": rng.normal(size=len(SHIFTS))}  # fmt: skip


def _fake_train(monkeypatch, seconds=12.345, ret=-0.25):
    from helm_plan.controller import ppo

    calls = []
    w = _weights()

    def fake(traces, args, progress):
        calls.append((traces, args, progress))
        return SimpleNamespace(weights=w, seconds=seconds, mean_episode_return=ret)

    monkeypatch.setattr(ppo, "train", fake)
    return calls, w


def test_fit_card_by_hand(monkeypatch):
    import torch

    from helm_plan.controller.ppo import Args

    calls, w = _fake_train(monkeypatch)
    traces = [SimpleNamespace(name="t1", n_windows=3), SimpleNamespace(name="t2", n_windows=4)]
    args = Args(seed=7, total_timesteps=64, hidden=3)
    prog = lambda i, n: None  # noqa: E731
    ctrl, res = T.fit(traces, args, prog)
    assert calls == [(traces, args, prog)]
    assert res.seconds == 12.345
    c = ctrl.card
    assert c["feature_version"] == FEATURE_VERSION
    assert c["helm_plan"] == helm_plan.__version__
    assert c["torch"] == torch.__version__
    assert c["python"] == platform.python_version()
    assert c["seed"] == 7
    assert c["ppo"]["seed"] == 7 and c["ppo"]["total_timesteps"] == 64 and c["ppo"]["hidden"] == 3
    assert c["ppo"] == dataclasses.asdict(args)
    assert c["training_set"] == ["t1", "t2"]
    assert c["training_windows"] == 7 and type(c["training_windows"]) is int
    assert c["train_seconds"] == 12.3  # rounded to 0.1 s
    assert c["mean_episode_return"] == -0.25
    assert c["runtime"] == dataclasses.asdict(RuntimeConfig())
    assert set(c) == {"feature_version", "helm_plan", "torch", "python", "seed", "ppo",
                      "training_set", "training_windows", "train_seconds",
                      "mean_episode_return", "runtime"}  # fmt: skip
    # the actor is the trained weights over the environment's shifts, default online layers
    np.testing.assert_array_equal(ctrl.shifts, np.array(SHIFTS))
    for k, v in w.items():
        np.testing.assert_array_equal(ctrl.arrays()[k], v)
    assert ctrl.cfg == RuntimeConfig()


def test_fit_default_args_and_card_extra(monkeypatch):
    from helm_plan.controller.ppo import Args

    calls, _ = _fake_train(monkeypatch, seconds=0.96)
    ctrl, _ = T.fit([SimpleNamespace(name="t", n_windows=2)],
                    card_extra={"seed": 99, "note": "x"})  # fmt: skip
    ((_, args, prog),) = calls
    assert args == Args() and prog is None
    assert ctrl.card["seed"] == 99 and ctrl.card["note"] == "x"  # the extra wins
    assert ctrl.card["ppo"]["seed"] == Args().seed
    assert ctrl.card["train_seconds"] == 1.0


# ---- validate: a scripted six-window run ---------------------------------------------------

R_STAR = np.array([0.2, 0.3, 0.5, np.nan, 0.6, 0.3])
FLAT = np.array([0.05, 0.5, 0.05, 0.01, 0.1, 0.02])
RUN_R = np.array([0.9, 0.1, 0.45, 0.6, 0.8, 0.4])
MEASURED_FROM = 2
# dr = |r − r*| = 0.7, 0.2, 0.05, nan, 0.2, 0.1; measured: windows 2..5;
# narrow (finite r*, flat band < 0.1): windows 2 and 5 (window 4's band is exactly 0.1)
WIN_IDX = np.array([0, 1, 1, 2, 2, 3, 4, 5, 5])
RUN_SOJ = np.arange(9) * 1.0
STATIC_SOJ = np.arange(9) * 10.0
MEAS = WIN_IDX >= MEASURED_FROM  # requests 3..8
LAT_S = {  # decision latencies of each variant, seconds
    "base": [5e-6, 5e-6],
    "base+adapter": [7e-6, 9e-6, 8e-6],
    "all": [1e-6, 3e-6, 2e-6, 10e-6],
}
P99 = {"base": 14.0, "base+adapter": 13.0, "all": 12.0}


def _variant(cfg: RuntimeConfig) -> str:
    if not cfg.adapter and not cfg.burst:
        return "base"
    if cfg.adapter and not cfg.burst:
        return "base+adapter"
    return "all"


class _Ctrl:
    def __init__(self, cfg, calls):
        self.cfg, self.calls = cfg, calls

    def with_config(self, cfg):
        self.calls.append(("with_config", cfg))
        return _Ctrl(cfg, self.calls)


@pytest.fixture
def scripted(monkeypatch):
    """validate's collaborators replaced by a script; returns the call record."""
    calls = []
    flat_override = [None]

    def label_windows(ctx, ncfg, ocfg):
        calls.append(("label", ctx, ncfg, ocfg))
        flat = FLAT if flat_override[0] is None else flat_override[0]
        return SimpleNamespace(r_star=R_STAR.copy(), table=pa.table({"flatness": flat}))

    def best_static(ctx, ncfg, ocfg):
        calls.append(("best_static", ctx, ncfg, ocfg))
        return SimpleNamespace(ratio=0.41)

    class Pol:
        def __init__(self, ctx, ncfg, ctrl, name):
            calls.append(("pol", ctx, ncfg, ctrl.cfg, name))
            self.variant = _variant(ctrl.cfg)
            self.latency_s = []

    def simulate_node(ctx, pol, ncfg):
        calls.append(("sim", ctx, pol, ncfg))
        if isinstance(pol, np.ndarray):
            return SimpleNamespace(p99_ms=15.0, slo_attainment=0.88, sojourn_s=STATIC_SOJ)
        if isinstance(pol, SchedulePolicy):
            return SimpleNamespace(p99_ms=10.0, slo_attainment=0.99)
        pol.latency_s = list(LAT_S[pol.variant])  # what the run's decisions took
        return SimpleNamespace(
            p99_ms=P99[pol.variant], slo_attainment=0.93, sojourn_s=RUN_SOJ,
            window_idx=WIN_IDX, measured_from_window=MEASURED_FROM, ratios=RUN_R,
        )  # fmt: skip

    def adaptivity_ci(static, adaptive, windows, seed):
        calls.append(("ci", static, adaptive, windows, seed))
        return SimpleNamespace(value=0.125, lo=-0.5, hi=0.75)

    for name, fn in [("label_windows", label_windows), ("best_static", best_static),
                     ("ControllerPolicy", Pol), ("simulate_node", simulate_node),
                     ("adaptivity_ci", adaptivity_ci)]:  # fmt: skip
        monkeypatch.setattr(T, name, fn)
    return SimpleNamespace(calls=calls, flat=flat_override)


ALL = RuntimeConfig(hold_margin=0.3)
MODEL_CTX = SimpleNamespace(model=SimpleNamespace(default_slo_ms=7.0))
"""A context whose model's default SLO is 7 ms (what validate's default node resolves to)."""


def test_validate_figures_by_hand(scripted):
    ncfg, ocfg = NodeConfig(window_s=4.0, slo_ms=100.0), OracleConfig(trials=0, coarse_step=0.2)
    v = T.validate(_Ctrl(ALL, scripted.calls), "CTX", "tr", ncfg, ocfg)
    f = v.figures
    assert v.name == "tr" and f["trace"] == "tr" and f["windows"] == 6
    np.testing.assert_array_equal(v.ratios, RUN_R)
    np.testing.assert_array_equal(v.r_star, R_STAR)
    assert f["p99_ms"] == 12.0 and f["oracle_p99_ms"] == 10.0 and f["best_static_p99_ms"] == 15.0
    assert f["best_static_r"] == 0.41
    assert f["regret_vs_oracle"] == pytest.approx(0.2)  # 12 / 10 − 1
    assert f["vs_best_static"] == pytest.approx(-0.2)  # 12 / 15 − 1
    assert (f["gain_vs_static"], f["gain_ci_lo"], f["gain_ci_hi"]) == (0.125, -0.5, 0.75)
    assert f["slo_attainment"] == 0.93 and f["best_static_slo_attainment"] == 0.88
    assert f["narrow_windows"] == 2
    assert f["abs_dr_narrow"] == pytest.approx((0.05 + 0.1) / 2)
    assert f["abs_dr_all"] == pytest.approx((0.05 + 0.2 + 0.1) / 3)  # the NaN window skipped
    # the "all" variant's decisions: 1, 3, 2, 10 µs
    assert f["latency_median_us"] == pytest.approx(2.5, rel=1e-12)
    assert f["latency_p99_us"] == pytest.approx(3.0 + 0.97 * 7.0, rel=1e-12)
    assert (f["p99_ms[base]"], f["p99_ms[base+adapter]"], f["p99_ms[all]"]) == (14.0, 13.0, 12.0)
    assert len(f) == 21
    for v in f.values():
        assert isinstance(v, str | int | float) and not isinstance(v, np.generic)


def test_validate_hands_the_collaborators_the_right_runs(scripted):
    ncfg, ocfg = NodeConfig(window_s=4.0, slo_ms=100.0), OracleConfig(trials=0, coarse_step=0.2)
    T.validate(_Ctrl(ALL, scripted.calls), "CTX", "tr", ncfg, ocfg)
    c = scripted.calls
    assert c[0] == ("label", "CTX", ncfg, ocfg) and c[1] == ("best_static", "CTX", ncfg, ocfg)
    sims = [x for x in c if x[0] == "sim"]
    assert all(s[1] == "CTX" and s[3] is ncfg for s in sims)
    static, oracle = sims[0][2], sims[1][2]
    np.testing.assert_array_equal(static, [0.41])
    assert isinstance(oracle, SchedulePolicy) and oracle.name == "oracle"
    np.testing.assert_array_equal(oracle.ratios, [0.2, 0.3, 0.5, 0.5, 0.6, 0.3])  # filled fwd
    pols = [x for x in c if x[0] == "pol"]
    assert [p[3] for p in pols] == [RuntimeConfig(adapter=False, burst=False),
                                    RuntimeConfig(adapter=True, burst=False), ALL]  # fmt: skip
    assert all(p[1] == "CTX" and p[2] is ncfg and p[4] == "controller" for p in pols)
    assert len(sims) == 5
    ((_, st, ad, wi, seed),) = [x for x in c if x[0] == "ci"]
    # the bootstrap sees the measured requests only (windows >= 2), with seed 0
    np.testing.assert_array_equal(st, STATIC_SOJ[MEAS])
    np.testing.assert_array_equal(ad, RUN_SOJ[MEAS])
    np.testing.assert_array_equal(wi, [2, 2, 3, 4, 5, 5])
    assert seed == 0


def test_validate_without_ablation_and_without_narrow_windows(scripted):
    scripted.flat[0] = np.full(6, 0.5)  # every band wide: no narrow window
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no mean of an empty selection
        v = T.validate(_Ctrl(RuntimeConfig(adapter=False, burst=False), scripted.calls),
                       MODEL_CTX, "w", ablation=False)  # fmt: skip
    f = v.figures
    # without ablation only the controller's own config runs, and it is "all" (the base
    # config here: 14 ms)
    pols = [x for x in scripted.calls if x[0] == "pol"]
    assert [p[3] for p in pols] == [RuntimeConfig(adapter=False, burst=False)]
    assert [k for k in f if k.startswith("p99_ms[")] == ["p99_ms[all]"]
    assert f["p99_ms"] == f["p99_ms[all]"] == 14.0
    assert f["latency_median_us"] == pytest.approx(5.0)
    assert f["narrow_windows"] == 0 and math.isnan(f["abs_dr_narrow"])
    assert f["abs_dr_all"] == pytest.approx((0.05 + 0.2 + 0.1) / 3)
    # the defaults: 10 s windows, the model's SLO, the coarse grid without trials
    assert scripted.calls[0][2:] == (NodeConfig(window_s=10.0, slo_ms=7.0), OracleConfig(trials=0))


def test_validate_no_decisions_gives_nan_latency(scripted, monkeypatch):
    monkeypatch.setitem(LAT_S, "all", [])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no median of an empty list
        f = T.validate(_Ctrl(ALL, scripted.calls), MODEL_CTX, "n", ablation=False).figures
    assert math.isnan(f["latency_median_us"]) and math.isnan(f["latency_p99_us"])


def test_narrow_band_and_defaults():
    assert T.NARROW_BAND == 0.1
    assert NodeConfig(window_s=10.0) == T.DEFAULT_NODE
    assert OracleConfig(trials=0) == T.DEFAULT_ORACLE
