"""Policy specs, the registry, and schedules read from labels files."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.errors import ConfigError, InputFileError
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.oracle import Labels, OracleConfig, write_labels
from helm_plan.policies import POLICIES, POLICY_FACTS, PolicyEnv, parse_policy, usage
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, Observation, fill_forward, prepare_context, simulate_node


def _ratios(spec, ctx, cfg, env=None):
    """The ratio per window a spec's policy chose in a whole-trace simulation."""
    built = parse_policy(spec).build(ctx, cfg, env or PolicyEnv())
    return simulate_node(ctx, built.policy, cfg).ratios


def _ctx():
    g, m = load_gpu("a100-80g"), load_model("gr-small")
    lat = build_latency_model(g, m, resolve_latency(g, m, None))
    return prepare_context(A.from_table(small_table(600)), g, m, lat, pool_fraction=0.3)


USAGE = usage()


def test_registry_lists_every_shipped_spec_with_its_facts():
    shipped = {"static", "emb-max", "kv-max", "best-static", "schedule", "oracle",
               "naive-adaptive", "adaptive", "controller", "hill-climb", "threshold"}  # fmt: skip
    assert set(POLICIES) == shipped and set(POLICY_FACTS) == shipped | {"fleet-static"}
    assert USAGE == (  # display order (each spec's order), as in tables and charts
        "use best-static, emb-max, kv-max, naive-adaptive, adaptive, hill-climb, threshold[:T], "
        "controller[:PATH], oracle, static:R or schedule:FILE"
    )


@pytest.mark.parametrize(
    ("spec", "want"),
    [("static:0.25", 0.25), ("emb-max", 1.0), ("kv-max", 0.0), (" static:1 ", 1.0)],
)
def test_static_family(spec, want):
    ctx = _ctx()
    cfg = NodeConfig(window_s=2.0)
    r = _ratios(spec, ctx, cfg)
    assert len(r) == ctx.n_windows(2.0) and np.all(r == want)


@pytest.mark.parametrize(
    ("spec", "msg"),
    [
        ("foo", f"unknown policy 'foo'; {USAGE}"),
        ("static:abc", f"policy static: R must be a number in [0, 1], got 'abc'; {USAGE}"),
        ("static:1.5", f"policy static: R must be in [0, 1], got 1.5; {USAGE}"),
        ("static", f"policy 'static' needs an argument; {USAGE}"),
        ("kv-max:3", f"policy 'kv-max' takes no argument, got 'kv-max:3'; {USAGE}"),
    ],
)
def test_bad_specs_have_precise_errors(spec, msg):
    with pytest.raises(ConfigError) as e:
        parse_policy(spec)
    assert e.value.one_line() == msg


def _labels(n_w, r, window_s):
    t = pl.DataFrame(
        {
            "window": np.arange(n_w),
            "start_s": np.arange(n_w) * window_s,
            "end_s": (np.arange(n_w) + 1) * window_s,
            "requests": np.ones(n_w, np.int64),
            "r_star": r,
            "p99_ms": np.ones(n_w),
            "slo_attainment": np.ones(n_w),
        }
    )
    return Labels(t, window_s, (0.0, 1.0))


def test_schedule_reads_labels_and_checks_windows(tmp_path):
    ctx = _ctx()
    n_w = ctx.n_windows(2.0)
    r = np.linspace(0, 1, n_w)
    r[1] = np.nan
    p = write_labels(_labels(n_w, r, 2.0), tmp_path / "lab.parquet")
    got = _ratios(f"schedule:{p}", ctx, NodeConfig(window_s=2.0))
    want = r.copy()
    want[1] = r[0]
    np.testing.assert_allclose(got, want)
    with pytest.raises(ConfigError, match="made with window_s=2"):
        _ratios(f"schedule:{p}", ctx, NodeConfig(window_s=3.0))
    p2 = write_labels(_labels(n_w + 1, np.zeros(n_w + 1), 2.0), tmp_path / "lab2.parquet")
    with pytest.raises(ConfigError, match=f"has {n_w + 1} windows but the trace has {n_w}"):
        _ratios(f"schedule:{p2}", ctx, NodeConfig(window_s=2.0))
    with pytest.raises(ConfigError, match="not found"):
        parse_policy(f"schedule:{tmp_path / 'none.parquet'}")
    bad = tmp_path / "plain.parquet"
    pl.DataFrame({"x": [1]}).write_parquet(bad)
    with pytest.raises(InputFileError, match="not a helm-plan labels file"):
        _ratios(f"schedule:{bad}", ctx, NodeConfig(window_s=2.0))


def test_fill_forward():
    np.testing.assert_array_equal(
        fill_forward(np.array([np.nan, 0.2, np.nan, 0.5, np.nan])), [0.2, 0.2, 0.2, 0.5, 0.5]
    )
    with pytest.raises(ConfigError, match="no finite ratio"):
        fill_forward(np.array([np.nan]))


def test_best_static_and_oracle_specs_use_the_run_searches_when_given():
    ctx = _ctx()
    cfg = NodeConfig(window_s=2.0)
    ocfg = OracleConfig(trials=0, coarse_step=0.5)
    from helm_plan.oracle import best_static, label_windows

    bs = best_static(ctx, cfg, ocfg)
    assert np.all(_ratios("best-static", ctx, cfg, PolicyEnv(oracle=ocfg)) == bs.ratio)
    lab = label_windows(ctx, cfg, ocfg)
    env = PolicyEnv(oracle=ocfg, labels=lab)
    np.testing.assert_array_equal(_ratios("oracle", ctx, cfg, env), fill_forward(lab.r_star))
    assert parse_policy("naive-adaptive").build(ctx, cfg, env).refill == "eager"
    assert parse_policy("adaptive").build(ctx, cfg, env).refill == "throttled"
    assert parse_policy("oracle").build(ctx, cfg, env).refill is None


class _Echo:
    """A closed-loop policy that records what it observed and answers 0.1 * window."""

    def __init__(self):
        self.seen = []

    def reset(self):
        self.seen.clear()

    def decide(self, obs):
        self.seen.append(obs)
        return min(0.1 * obs.window, 1.0)

    spec = "echo"


def test_policy_sees_only_the_past():
    from helm_plan.sim.policy import Policy

    ctx = _ctx()
    cfg = NodeConfig(window_s=2.0)
    pol = _Echo()
    Policy.register(_Echo)
    res = simulate_node(ctx, pol, cfg)
    n_w = ctx.n_windows(2.0)
    assert [o.window for o in pol.seen] == list(range(n_w))
    assert pol.seen[0].last is None and pol.seen[0].features == {}
    for w in range(1, n_w):
        o = pol.seen[w]
        assert isinstance(o, Observation)
        assert o.last.window == w - 1 and o.ratio == res.ratios[w - 1]
        # the observed window's requests all arrived before the boundary
        assert o.last.requests == 0 or ctx.arrays.ts_s[o.last.first + o.last.requests - 1] < w * 2.0
        assert o.features["arrival_rate_rps"] == o.last.requests / 2.0


def test_spec_classes_import_from_the_package_by_name():
    """``from helm_plan.policies import ControllerSpec`` (the import path before the specs had
    a module each) finds the registered class; an unknown name is an AttributeError."""
    import helm_plan.policies as P
    from helm_plan.policies import ControllerSpec, Static

    assert ControllerSpec is POLICIES["controller"] and Static is POLICIES["static"]
    assert all(getattr(P, cls.__name__) is cls for cls in POLICIES.values())
    with pytest.raises(AttributeError, match="NoSuchSpec"):
        P.NoSuchSpec  # noqa: B018
