"""Policy specs, the registry, and schedules read from labels files."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.errors import ConfigError, InputFileError
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.oracle_labels import Labels, write_labels
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, prepare_context
from helm_plan.sim.policies import POLICIES, PolicyKind, fill_forward, parse_policy

USAGE = "use static:R, emb-max, kv-max, best-static or schedule:FILE"


def _ctx():
    g, m = load_gpu("a100-80g"), load_model("gr-small")
    lat = build_latency_model(g, m, resolve_latency(g, m, None))
    return prepare_context(A.from_table(small_table(600)), g, m, lat, pool_fraction=0.3)


def test_registry_lists_every_kind():
    assert set(POLICIES) == {k.value for k in PolicyKind}


@pytest.mark.parametrize(
    ("spec", "want"),
    [("static:0.25", 0.25), ("emb-max", 1.0), ("kv-max", 0.0), (" static:1 ", 1.0)],
)
def test_static_family(spec, want):
    ctx = _ctx()
    cfg = NodeConfig(window_s=2.0)
    r = parse_policy(spec).ratios(ctx, cfg)
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
    got = parse_policy(f"schedule:{p}").ratios(ctx, NodeConfig(window_s=2.0))
    want = r.copy()
    want[1] = r[0]
    np.testing.assert_allclose(got, want)
    with pytest.raises(ConfigError, match="made with window_s=2"):
        parse_policy(f"schedule:{p}").ratios(ctx, NodeConfig(window_s=3.0))
    p2 = write_labels(_labels(n_w + 1, np.zeros(n_w + 1), 2.0), tmp_path / "lab2.parquet")
    with pytest.raises(ConfigError, match=f"has {n_w + 1} windows but the trace has {n_w}"):
        parse_policy(f"schedule:{p2}").ratios(ctx, NodeConfig(window_s=2.0))
    with pytest.raises(ConfigError, match="not found"):
        parse_policy(f"schedule:{tmp_path / 'none.parquet'}")
    bad = tmp_path / "plain.parquet"
    pl.DataFrame({"x": [1]}).write_parquet(bad)
    with pytest.raises(InputFileError, match="not a helm-plan labels file"):
        parse_policy(f"schedule:{bad}").ratios(ctx, NodeConfig(window_s=2.0))


def test_fill_forward():
    np.testing.assert_array_equal(
        fill_forward(np.array([np.nan, 0.2, np.nan, 0.5, np.nan])), [0.2, 0.2, 0.2, 0.5, 0.5]
    )
    with pytest.raises(ConfigError, match="no finite ratio"):
        fill_forward(np.array([np.nan]))
