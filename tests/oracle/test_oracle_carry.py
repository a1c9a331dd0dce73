"""The carry oracle against the node simulator run on the labelled schedule."""

from __future__ import annotations

import numpy as np
import pytest
from brute import coeff_latency
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.errors import ConfigError
from helm_plan.oracle import OracleConfig, label_windows
from helm_plan.oracle.labels import grid_suffix
from helm_plan.oracle.search import first_points
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, prepare_context, simulate_node


@pytest.fixture(scope="module")
def ctx():
    t = small_table(2400, n_users=150, n_items=4000, max_new=10, n_candidates=24, rate_qps=40.0)
    g, m = load_gpu("a100-80g"), load_model("gr-small")
    return prepare_context(A.from_table(t), g, m, coeff_latency(), pool_fraction=0.15)


def test_carry_labels_equal_simulate_node_on_the_schedule(ctx):
    ncfg = NodeConfig(slo_ms=1.0, window_s=10.0, refill="lazy", warmup_windows=0)
    ocfg = OracleConfig(grid_step=0.25, coarse_step=0.25, warmup="carry")
    lab = label_windows(ctx, ncfg, ocfg)
    r_star = lab.r_star
    n_w = len(r_star)
    assert n_w >= 5 and np.all(np.isfinite(r_star))
    np.testing.assert_array_equal(lab.table["warmup_start_s"].to_numpy(), np.zeros(n_w))
    for w in (0, 2, n_w - 1):
        for r in (0.0, 0.5, 1.0):
            sched = np.concatenate([r_star[:w], [r], np.full(n_w - w - 1, r)])
            res = simulate_node(ctx, sched, ncfg)
            want = res.windows["p99_ms"][w]
            got = lab.table[f"p99_ms_{grid_suffix(r)}"][w]
            assert got == pytest.approx(want, rel=1e-12), (w, r)
    # the oracle's own run on its schedule is simulate_node with lazy refill on it
    run = simulate_node(ctx, r_star, ncfg)
    np.testing.assert_array_equal(lab.schedule_run.sojourn_s, run.sojourn_s)
    assert lab.schedule_run.p99_ms == run.p99_ms
    # r* is the grid argmin of the carried P99 in every window
    grid = [0.0, 0.25, 0.5, 0.75, 1.0]
    p99 = np.stack([lab.table[f"p99_ms_{grid_suffix(r)}"].to_numpy() for r in grid], axis=1)
    np.testing.assert_allclose(lab.table["p99_ms"].to_numpy(), p99.min(axis=1))


def test_carry_is_deterministic_and_validated(ctx):
    ncfg = NodeConfig(slo_ms=1.0, window_s=10.0)
    ocfg = OracleConfig(trials=4, warmup="carry", seed=3)
    a = label_windows(ctx, ncfg, ocfg).table
    b = label_windows(ctx, ncfg, ocfg).table
    assert a.equals(b)
    with pytest.raises(ConfigError, match="unknown warmup 'forever'"):
        OracleConfig(warmup="forever")


def test_a_local_pool_steps_the_forks_on_threads_with_the_same_labels_and_replays(ctx, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from helm_plan.cache import core
    from helm_plan.exec import local
    from helm_plan.oracle import carry

    pools, groups = [], []

    class Recording(ThreadPoolExecutor):
        def __init__(self, n, **kw):
            pools.append(n)
            super().__init__(n, **kw)

        def map(self, fn, rs):
            groups.append(len(rs))
            return super().map(fn, rs)

    monkeypatch.setattr(carry, "ThreadPoolExecutor", Recording)
    ncfg = NodeConfig(slo_ms=1.0, window_s=10.0)
    ocfg = OracleConfig(trials=6, trial_batch=2, seed=5)

    def run(executor):
        before = core.REPLAYED["requests"]
        lab = label_windows(ctx, ncfg, ocfg, executor=executor)
        return lab, core.REPLAYED["requests"] - before

    serial, n_serial = run(None)
    assert pools == [] and groups == []
    with local(2) as ex:
        threaded, n_threaded = run(ex)
    assert pools == [2]
    n_w = int((threaded.table["requests"].to_numpy() > 0).sum())
    assert n_w >= 5
    # per window: the first points as one group, then each batch of 2 new ratios (a single
    # new ratio is stepped in this thread)
    n_first = len(first_points(ocfg))
    assert groups.count(n_first) == n_w and set(groups) == {n_first, 2}
    assert threaded.table.equals(serial.table)
    np.testing.assert_array_equal(threaded.schedule_run.sojourn_s, serial.schedule_run.sojourn_s)
    # the fork that served r* carries on in this process: no window is replayed again
    assert n_threaded == n_serial
