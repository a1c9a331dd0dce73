"""`helm-plan fit`'s glue: predictors by brute force, options passed through, the profile.

Pins :mod:`helm_plan.sim.fit` (issue 16 mutation survivors): ``predictors_from_trace``
equals the brute-force caches of DESIGN.md (tests/brute.py) started cold; ``fit_trace``
gives exactly ``fit_observed`` on those brute-force predictors with the shipped base model
and the configured ratio, pool, hold-out share and seed; its profile is named and sourced as
documented; ``FitConfig`` checks its ranges with precise errors.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from brute import BruteNodeConfig, C, simulate
from conftest import small_table

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan._version import __version__
from helm_plan.cache.core import Workload
from helm_plan.errors import ConfigError, TraceError
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.latency.observed import fit_observed
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim.fit import FitConfig, fit_trace, predictors_from_trace

N = 150
TABLE = small_table(N, n_users=10, n_items=50, max_new=4, n_candidates=3, seed=8)
POOL = 300_000
KEYS = ("n_computed", "ctx_len", "n_cand", "lookup_bytes", "miss_bytes")


def _brute(ratio: float, model) -> dict[str, np.ndarray]:
    ref = simulate(TABLE, model, POOL, C, BruteNodeConfig(1e6), [ratio])
    out = np.array(ref.outcomes, np.int64)  # (n, reused, L, M, lookup, miss, misses)
    return dict(zip(KEYS, (out[:, 0], out[:, 2], out[:, 3], out[:, 4], out[:, 5]), strict=True))


@pytest.mark.parametrize("ratio", [0.2, 0.6])
def test_predictors_equal_the_brute_force_caches(ratio):
    model = dataclasses.replace(load_model("gr-small"), max_seq_len=9, kv_slide_chunk=2)
    wl = Workload.of(A.from_table(TABLE), model)
    got = predictors_from_trace(wl, model, ratio=ratio, pool_bytes=POOL)
    want = _brute(ratio, model)
    assert list(got) == list(KEYS)
    for k in KEYS:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert 0 < want["miss_bytes"].sum() < want["lookup_bytes"].sum()


def _latency_trace(tmp_path, with_latency=True):
    rng = np.random.default_rng(1)
    table = TABLE
    if with_latency:
        table = table.append_column("latency_ms", pa.array(rng.uniform(1.0, 3.0, N)))
    path = tmp_path / "obs.parquet"
    trace.write(table, path, {"source": "test"})
    return path


def test_fit_trace_is_fit_observed_on_the_brute_force_predictors(tmp_path):
    path = _latency_trace(tmp_path)
    cfg = FitConfig(ratio=0.35, pool_bytes=POOL, holdout_fraction=0.3, seed=4)
    tf = fit_trace(path, cfg)
    g, m = load_gpu("a100-80g"), load_model("gr-small")
    prof = resolve_latency(g, m, None)
    base = build_latency_model(g, m, prof)
    lat = trace.read(path).column("latency_ms").to_numpy()
    want = fit_observed(lat, _brute(0.35, m), base=base, holdout_fraction=0.3, seed=4)
    assert tf.base == base and tf.base_name == prof.name == "a100-80g_gr-small"
    assert (tf.pool_bytes, tf.pool_source) == (POOL, "--pool-bytes")
    assert tf.fit.coefficients == want.coefficients
    assert (tf.fit.n_train, tf.fit.n_heldout) == (want.n_train, want.n_heldout) == (105, 45)
    assert tf.fit.mape_heldout == want.mape_heldout
    # another seed, ratio or hold-out share is another fit
    other = fit_trace(path, dataclasses.replace(cfg, seed=5))
    assert other.fit.mape_heldout != tf.fit.mape_heldout
    assert fit_trace(path, dataclasses.replace(cfg, ratio=0.9)).fit.coefficients != (
        want.coefficients
    )
    p = tf.profile
    assert (p.name, p.gpu, p.model) == ("a100-80g_gr-small_observed", "a100-80g", "gr-small")
    assert p.source == (
        f"fitted to observed latency_ms of {path} ({N} requests, cache replay at r=0.35), "
        f"base a100-80g_gr-small, {dt.datetime.now(dt.UTC).date().isoformat()}, "
        f"helm-plan {__version__}"
    )
    assert p.t_launch_s == want.model.t_launch_s and p.h2d_bw_Bps == base.h2d_bw_Bps
    d = tf.toml_dict()
    assert d["name"] == p.name and d["source"] == p.source
    der = d["derivation"]
    assert der["base_profile"] == "a100-80g_gr-small"
    assert der["pool_bytes"] == POOL and der["pool_source"] == "--pool-bytes"
    assert der["n_train"] == 105 and der["mape_heldout"] == want.mape_heldout


def test_fit_trace_other_profiles_and_pool_fraction(tmp_path):
    path = _latency_trace(tmp_path)
    cfg = FitConfig(gpu="h100-80g", model="gr-large", latency="a100-40g_gr-small",
                    pool_fraction=0.5, ratio=0.5, holdout_fraction=0.0)  # fmt: skip
    tf = fit_trace(path, cfg)
    g, m = load_gpu("h100-80g"), load_model("gr-large")
    prof = resolve_latency(g, m, "a100-40g_gr-small")
    assert tf.base == build_latency_model(g, m, prof) and tf.base_name == "a100-40g_gr-small"
    assert tf.pool_source.startswith("--pool-fraction 0.5 of the input") and tf.fit.n_heldout == 0
    assert tf.profile.name == "h100-80g_gr-large_observed" and tf.profile.gpu == "h100-80g"
    assert tf.profile.model == "gr-large"


def test_fit_trace_needs_latency(tmp_path):
    path = _latency_trace(tmp_path, with_latency=False)
    with pytest.raises(TraceError) as e:
        fit_trace(path, FitConfig(pool_bytes=POOL))
    assert e.value.one_line() == (
        f"{path} has no latency_ms column; "
        "helm-plan fit needs observed latencies from a serving log"
    )


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"ratio": -0.01}, "ratio must be in [0, 1], got -0.01; pass --ratio in [0, 1]"),
        ({"ratio": 1.01}, "ratio must be in [0, 1], got 1.01; pass --ratio in [0, 1]"),
        (
            {"holdout_fraction": 1.0},
            "holdout_fraction must be in [0, 1), got 1.0; pass --holdout in [0, 1)",
        ),
        (
            {"holdout_fraction": -0.1},
            "holdout_fraction must be in [0, 1), got -0.1; pass --holdout in [0, 1)",
        ),
    ],
)
def test_fit_config_errors(kw, msg):
    with pytest.raises(ConfigError) as e:
        FitConfig(**kw)
    assert e.value.one_line() == msg


def test_fit_config_boundaries_and_defaults():
    for kw in ({"ratio": 0.0}, {"ratio": 1.0}, {"holdout_fraction": 0.0}):
        assert FitConfig(**kw)
    d = FitConfig()
    assert (d.gpu, d.model, d.latency, d.ratio) == ("a100-80g", "gr-small", None, 0.5)
    assert (d.pool_bytes, d.pool_fraction, d.holdout_fraction, d.seed) == (None, None, 0.2, 0)


def test_fit_trace_draws_implicit_candidates_with_its_seed(tmp_path):
    bare = small_table(N, n_users=10, n_items=50, max_new=4, seed=8, with_candidates=False)
    lat = np.random.default_rng(2).uniform(1.0, 3.0, N)
    path = tmp_path / "bare.parquet"
    trace.write(bare.append_column("latency_ms", pa.array(lat)), path, {"source": "test"})
    m = load_model("gr-small")

    def preds(seed):
        return predictors_from_trace(Workload.of(A.from_table(bare, seed=seed), m), m,
                                     ratio=0.5, pool_bytes=POOL)  # fmt: skip

    assert not np.array_equal(preds(3)["miss_bytes"], preds(0)["miss_bytes"])
    tf = fit_trace(path, FitConfig(pool_bytes=POOL, seed=3))
    want = fit_observed(lat, preds(3), base=tf.base, seed=3)
    assert tf.fit.coefficients == want.coefficients


def test_the_source_date_is_the_utc_date(tmp_path, monkeypatch):
    import time

    path = _latency_trace(tmp_path)
    now = dt.datetime.now(dt.UTC)
    # a zone 12 h away from UTC, on the other side of midnight from UTC now
    monkeypatch.setenv("TZ", "Etc/GMT+12" if now.hour < 12 else "Etc/GMT-12")
    time.tzset()
    try:
        assert dt.datetime.now().date() != now.date()  # the local date differs here
        src = fit_trace(path, FitConfig(pool_bytes=POOL)).profile.source
    finally:
        monkeypatch.undo()
        time.tzset()
    assert f", {dt.datetime.now(dt.UTC).date().isoformat()}, helm-plan" in src
