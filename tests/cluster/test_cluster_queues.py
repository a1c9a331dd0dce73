"""Routers against queueing closed forms on Poisson traces whose service times are known.

The latency model is reduced to one term so the service time is set by the
trace: ``t_launch_s`` alone gives constant service (M/D/1), ``dense_s_per_token``
alone gives service proportional to the candidate count, which is drawn
geometric with mean 1000 (exponential to 0.1%: M/M/1). Requests carry no
history, so nothing else costs time, and the M/D/1 trace scores one item the
caches always hold after its first miss.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cluster_fixtures import coeff_latency, context, small_model
from queueing import MEAN_CAND, md1_wait_cdf, poisson_table, quantile

from helm_plan.cluster import ClusterConfig, simulate_cluster
from helm_plan.sim import NodeConfig


def run(n, n_nodes, rho, router, *, exp_service, seed=0, d=1e-3):
    """Mean wait (s), P99 sojourn (s) and the result at per-node utilisation ``rho``."""
    lam = rho / d * n_nodes
    table = poisson_table(n, lam, seed, exp_service=exp_service)
    lat = (coeff_latency(dense_s_per_token=d / MEAN_CAND) if exp_service
           else coeff_latency(t_launch_s=d))  # fmt: skip
    ctx = context(table, small_model(multi=False), 1_000_000, latency=lat)
    cfg = NodeConfig(window_s=1e9, warmup_windows=0)
    res = simulate_cluster(ctx, 0.5, ClusterConfig(nodes=n_nodes, router=router, node=cfg,
                                                   seed=seed))  # fmt: skip
    wait = res.sojourn_s - res.service_s
    return float(wait.mean()), float(np.percentile(res.sojourn_s, 99)), res


def erlang_c(n: int, a: float) -> float:
    top = a**n / math.factorial(n) * n / (n - a)
    return top / (sum(a**k / math.factorial(k) for k in range(n)) + top)


def mmn_sojourn_tail(t: float, n: int, lam: float, mu: float) -> float:
    """P(T > t) for M/M/n FCFS: no wait w.p. 1 - C, else Exp(n·mu - lam) wait, plus Exp(mu)."""
    c, th = erlang_c(n, lam / mu), n * mu - lam
    return (1 - c) * math.exp(-mu * t) + c * (mu * math.exp(-th * t) - th * math.exp(-mu * t)) / (
        mu - th
    )


@pytest.mark.slow
def test_random_router_is_md1_per_node():
    d, rho, n_nodes = 1e-3, 0.5, 4
    wait, p99, res = run(1_200_000, n_nodes, rho, "random", exp_service=False, d=d)
    lam = rho / d
    assert res.emb_hit_rate > 0.9999  # the caches always hit after each node's first miss
    np.testing.assert_allclose(res.service_s, d, rtol=1e-12)
    assert wait == pytest.approx(rho * d / (2 * (1 - rho)), rel=0.02)
    w99 = quantile(lambda x: md1_wait_cdf(x, lam, d), 0.99, 50 * d)
    assert p99 == pytest.approx(w99 + d, rel=0.02)
    # and the random split is even: each node gets a quarter of the requests
    share = np.bincount(res.node, minlength=n_nodes) / len(res.node)
    np.testing.assert_allclose(share, 1 / n_nodes, atol=0.003)


@pytest.mark.slow
def test_random_router_is_mm1_per_node():
    d, rho = 1e-3, 0.5
    wait, p99, res = run(1_200_000, 4, rho, "random", exp_service=True, d=d)
    mu, lam = 1 / d, rho / d
    svc = res.service_s
    assert svc.std() / svc.mean() == pytest.approx(1.0, abs=0.01)  # exponential service
    assert wait == pytest.approx(rho / (mu - lam), rel=0.02)
    assert p99 == pytest.approx(math.log(100) / (mu - lam), rel=0.02)


def test_jsq_sits_between_central_mmn_and_independent_mm1():
    d, rho, n_nodes = 1e-3, 0.7, 4
    wait, p99, _ = run(200_000, n_nodes, rho, "jsq", exp_service=True, d=d)
    mu, lam = 1 / d, rho / d * n_nodes
    mmn_wait = erlang_c(n_nodes, lam / mu) / (n_nodes * mu - lam)
    mm1_wait = rho / (mu - rho / d)
    mmn_p99 = quantile(lambda t: 1 - mmn_sojourn_tail(t, n_nodes, lam, mu), 0.99, 100 * d)
    mm1_p99 = math.log(100) / (mu - rho / d)
    assert mmn_wait < wait < mm1_wait
    assert mmn_p99 < p99 < mm1_p99
    # and it is much closer to the pooled queue than to independent ones
    assert wait < mmn_wait + 0.25 * (mm1_wait - mmn_wait)


def test_p2c_beats_random_and_loses_to_jsq():
    # the supermarket model: two choices cut the wait of random routing by far
    w_rand = run(100_000, 8, 0.7, "random", exp_service=True)[0]
    w_p2c = run(100_000, 8, 0.7, "p2c", exp_service=True)[0]
    w_jsq = run(100_000, 8, 0.7, "jsq", exp_service=True)[0]
    assert w_jsq < w_p2c < 0.5 * w_rand
