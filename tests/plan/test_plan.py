"""The capacity plan against closed forms, independent cluster runs and hand-worked cost.

- Closed form: Poisson arrivals, constant service d, no history and the
  ``random`` router make every node an M/D/1 queue at λ/N, so the planned N
  is the smallest N whose M/D/1 P99 (Erlang's waiting-time distribution, plus
  d) meets the SLO; the SLO is set halfway (geometrically) between the
  closed-form P99 at N* − 1 and N*, so sampling noise cannot flip it.
- Minimality: every planned row is re-run with ``simulate_cluster`` directly
  at N − 1 (fails) and N (passes), outside the plan's search code.
- Cross-check: the load curve's maximum QPS passes with ``--max-nodes 1`` and
  10% more fails.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from brute import coeff_latency as brute_latency
from conftest import small_table
from queueing import md1_wait_cdf, poisson_table, quantile

from helm_plan import arrays as A
from helm_plan import exec as executors
from helm_plan import io
from helm_plan.cluster import ClusterConfig, simulate_cluster
from helm_plan.latency.kernel import COEFFS
from helm_plan.latency.model import LatencyModel
from helm_plan.oracle import OracleConfig
from helm_plan.plan import GpuSetup, PlanConfig, dense, plan, plan_doc
from helm_plan.plan.scale import scale
from helm_plan.plan.search import cost
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, prepare_context

GPU = load_gpu("a100-80g")
D = 1e-3  # constant service time, s


def _const_latency() -> LatencyModel:
    c = dict.fromkeys(COEFFS, 0.0)
    for k in ("hbm_bw_Bps", "h2d_bw_Bps", "host_gather_Bps"):
        c[k] = 1e30
    c["t_launch_s"] = D
    return LatencyModel(**c)


def _md1_p99_ms(lam: float) -> float:
    return 1e3 * (D + quantile(lambda x: md1_wait_cdf(x, lam, D), 0.99, 25 * D))


def _md1_plan(lam: float, n_star: int) -> float:
    """An SLO (ms) whose M/D/1 minimal fleet at rate ``lam`` is ``n_star``."""
    slow, fast = _md1_p99_ms(lam / (n_star - 1)), _md1_p99_ms(lam / n_star)
    assert slow > 1.5 * fast  # the SLO sits well clear of both sides
    return math.sqrt(slow * fast)


def _md1_cfg(slo_ms: float, **kw) -> PlanConfig:
    return PlanConfig(
        gpus=("a100-80g",), policies=("emb-max",), routers=("random",), baseline_router="random",
        slo_ms=slo_ms, attainment=0.99, pool_bytes=1_000_000, max_nodes=16,
        node=NodeConfig(window_s=1e9, warmup_windows=0), oracle=OracleConfig(coarse_step=0.5),
        load_refine_steps=2, n_boot=50, **kw,
    )  # fmt: skip


SETUP = [GpuSetup(GPU, _const_latency(), None, 2.5)]


def test_random_router_plans_the_md1_fleet():
    lam = 3.5 / D  # per-node utilisation 0.875 at 4 nodes, 0.7 at 5
    table = poisson_table(60_000, lam, seed=3, exp_service=False)
    ts = table.column("ts_s").to_numpy()
    lam_real = (len(ts) - 1) / (ts[-1] - ts[0])
    slo = _md1_plan(lam_real, 5)
    res = plan(table, _md1_cfg(slo), setups=SETUP)
    rows = {(r["policy"], r["router"]): r for r in res.capacity.iter_rows(named=True)}
    assert rows[("emb-max", "random")]["nodes"] == 5
    # caches do not matter to a constant service time: best static needs the same fleet
    assert rows[("best-static", "random")]["nodes"] == 5


def test_peak_qps_scaling_plans_the_md1_fleet_at_the_scaled_rate():
    # the trace runs at 1000 req/s; --peak-qps 3500 compresses time 3.5x (one window spans
    # the trace, so its peak rate is its mean) and the fleet is the M/D/1 one at 3500 req/s
    table = poisson_table(60_000, 1000.0, seed=4, exp_service=False)
    lam = 3500.0
    res = plan(table, _md1_cfg(_md1_plan(lam, 5), peak_qps=lam, scale_by="time"), setups=SETUP)
    assert res.scaling.qps_after == pytest.approx(lam, rel=1e-3)
    assert res.capacity.filter(res.capacity["policy"] == "emb-max")["nodes"][0] == 5


def _small_plan(**kw):
    t = small_table(3000, n_users=150, n_items=900, max_new=4, n_candidates=8,
                    rate_qps=400.0, seed=11)  # fmt: skip
    cfg = PlanConfig(
        gpus=("a100-80g",), policies=("static:0.3", "emb-max", "best-static"),
        routers=("jsq", "helm"), slo_ms=3.0, attainment=0.95, pool_bytes=3_000_000, scale=4.0,
        max_nodes=12, node=NodeConfig(window_s=1.0), oracle=OracleConfig(coarse_step=0.5),
        load_refine_steps=2, n_boot=100, **kw,
    )  # fmt: skip
    return t, cfg, plan(t, cfg, setups=[GpuSetup(GPU, brute_latency(), None, 3.0)])


@pytest.fixture(scope="module")
def small():
    return _small_plan()


def _passes(ctx, r, nodes, router, cfg, slo_ms):
    res = simulate_cluster(ctx, r, ClusterConfig(nodes=nodes, router=router, node=cfg.node,
                                                 seed=cfg.seed))  # fmt: skip
    m = res.window_idx >= res.measured_from_window
    soj = res.sojourn_s[m]
    within = float(np.mean(soj <= slo_ms / 1e3))
    return res.p99_ms <= slo_ms and within >= cfg.attainment


def test_every_planned_row_fails_one_node_less_and_passes_at_n(small):
    t, cfg, res = small
    scaled, _ = scale(t, cfg.scale, by=cfg.scale_by, window_s=cfg.node.window_s, seed=cfg.seed)
    ctx = prepare_context(A.from_table(scaled, seed=cfg.seed), GPU, load_model(cfg.model),
                          brute_latency(), pool_bytes=cfg.pool_bytes)  # fmt: skip
    checked = 0
    for row in res.capacity.iter_rows(named=True):
        n = row["nodes"]
        assert n is not None
        if row["policy"] == "best-static":
            rs_n = [row["best_static_r"]]
            rs_less = [0.0, 0.5, 1.0]  # the coarse grid: none of it may pass at N − 1
        else:
            r = 1.0 if row["policy"] == "emb-max" else 0.3
            rs_n, rs_less = [r], [r]
        assert all(_passes(ctx, r, n, row["router"], cfg, res.slo_ms) for r in rs_n)
        if n > 1:
            assert not any(_passes(ctx, r, n - 1, row["router"], cfg, res.slo_ms)
                           for r in rs_less)  # fmt: skip
            checked += 1
    assert checked >= 4, "the fixture should need more than one node for most rows"


def test_cost_columns_by_hand(small):
    _, _, res = small
    qps = res.scaling.qps_after
    for row in res.capacity.iter_rows(named=True):
        n = row["nodes"]
        assert row["gpu_hours_per_day"] == 24 * n
        assert row["usd_per_day"] == pytest.approx(n * 3.0 * 24)
        assert row["usd_per_million_requests"] == pytest.approx(n * 3.0 / (qps * 3600 / 1e6))
    # and the function itself on round numbers: 4 GPUs at $2.50 serving 100 req/s
    c = cost(4, 2.5, 100.0)
    assert (c.gpu_hours_per_day, c.usd_per_hour) == (96.0, 10.0)
    assert c.usd_per_million_requests == pytest.approx(10.0 / 0.36)


def test_savings_are_differences_of_planned_nodes(small):
    _, cfg, res = small
    cap = {(r["policy"], r["router"]): r["nodes"] for r in res.capacity.iter_rows(named=True)}
    base = cap[("best-static", "jsq")]
    for r in res.capacity.iter_rows(named=True):
        assert r["nodes_saved"] == base - r["nodes"]
    for s in res.savings.iter_rows(named=True):
        if (
            s["kind"] == "adaptive"
        ):  # a: the best adaptive policy, b: best-static, both behind scope
            a, b = (s["a"], s["scope"]), (s["b"], s["scope"])
        else:  # routing: helm against router b, both with policy scope
            a, b = (s["scope"], "helm"), (s["scope"], s["b"])
        assert s["nodes_saved"] == cap[b] - cap[a]
        assert s["lo"] <= s["hi"]
    # every planned policy here is static, so only the routing comparison exists (per policy)
    assert sorted(res.savings["scope"]) == sorted(cfg.policies)
    assert set(res.savings["kind"]) == {"routing"}


def test_plan_json_round_trips_and_is_seeded(small):
    _, cfg, res = small
    doc = json.loads(json.dumps(plan_doc(res), default=str))
    assert doc["schema_version"] == 1 and len(doc["capacity"]) == res.capacity.height
    t, cfg2, again = _small_plan()
    assert again.capacity.equals(res.capacity) and again.savings.equals(res.savings)


def test_plan_on_a_process_pool_equals_the_serial_plan(small):
    # the pool's workers read the contexts' shared copy, and so does the driver (share)
    t, cfg, res = small
    with executors.local(2) as ex:
        pooled = plan(t, cfg, setups=[GpuSetup(GPU, brute_latency(), None, 3.0)], executor=ex)
        assert ex._published  # the contexts went to the workers
    for name in ("capacity", "savings", "load_curve", "evaluated"):
        assert getattr(pooled, name).equals(getattr(res, name)), name


def test_heavier_fleet_searches_are_queued_first_and_answer_the_same(small, monkeypatch):
    # a policy's plan_weight orders the combination map's tasks (the controller's first, its
    # ghosts make each simulation ~12x a static one); the answers come back in the plan's order
    from helm_plan.plan import run as plan_run
    from helm_plan.policies.specs.emb_max import EmbMax

    t, cfg, res = small
    queued: list[list[str]] = []

    class Recording(executors.SerialExecutor):
        def map(self, fn, items, **kw):  # noqa: ANN001, ANN201
            if fn is plan_run._combos:
                queued.append([it[1] for it in items])
            return super().map(fn, items, **kw)

    monkeypatch.setattr(EmbMax, "plan_weight", 5.0)
    got = plan(t, cfg, setups=[GpuSetup(GPU, brute_latency(), None, 3.0)], executor=Recording())
    assert queued == [["emb-max", "static:0.3", "best-static"]]  # in order but for the heavy one
    for name in ("capacity", "savings", "load_curve", "evaluated"):
        assert getattr(got, name).equals(getattr(res, name)), name


def test_a_plan_with_its_scaled_tokens_on_disk_equals_the_plan_in_memory(
    small, tmp_path, monkeypatch
):
    # scale 4 copies the tokens into the spill folder; the workers map that file
    t, cfg, res = small
    made: list[int] = []

    def spill(n, dtype, d):  # noqa: ANN001, ANN202
        made.append(n)
        return io.spill_array(n, dtype, d)

    monkeypatch.setattr(dense, "spill_array", spill)
    spilled = dataclasses.replace(cfg, spill_dir=str(tmp_path))
    with executors.local(2) as ex:
        got = plan(t, spilled, setups=[GpuSetup(GPU, brute_latency(), None, 3.0)], executor=ex)
    assert made and made[0] == 4 * len(t.column("new_items").combine_chunks().values)
    for name in ("capacity", "savings", "load_curve", "evaluated"):
        assert getattr(got, name).equals(getattr(res, name)), name
    assert not list(tmp_path.iterdir())


def test_load_curve_max_qps_agrees_with_a_one_node_plan():
    t = small_table(1500, n_users=120, n_items=800, max_new=4, n_candidates=8,
                    rate_qps=100.0, seed=8)  # fmt: skip
    cfg = PlanConfig(
        gpus=("a100-80g",), policies=("static:0.3",), routers=("round-robin",),
        baseline_router="round-robin", slo_ms=3.0, attainment=0.95, pool_bytes=4_000_000,
        max_nodes=1, node=NodeConfig(window_s=2.0), oracle=OracleConfig(coarse_step=0.5),
        load_refine_steps=4, n_boot=20,
    )  # fmt: skip
    setups = [GpuSetup(GPU, brute_latency(), None, 1.0)]
    res = plan(t, cfg, setups=setups)
    pts = res.load_curve.filter((res.load_curve["policy"] == "static:0.3")
                                & res.load_curve["passes"]).sort("qps")  # fmt: skip
    f_max = pts["factor"][-1]
    at = plan(t, dataclasses.replace(cfg, scale=f_max), setups=setups)
    above = plan(t, dataclasses.replace(cfg, scale=f_max * 1.1), setups=setups)
    row = at.capacity.filter(at.capacity["policy"] == "static:0.3")
    assert row["nodes"][0] == 1
    assert above.capacity.filter(above.capacity["policy"] == "static:0.3")["nodes"][0] is None


# ---- the frontier, the headroom, the pool rule and the peak asked for -----------------------


def _ctx_at(t, cfg, factor):
    scaled, _ = scale(t, factor, by=cfg.scale_by, window_s=cfg.node.window_s, seed=cfg.seed)
    return prepare_context(A.from_table(scaled, seed=cfg.seed), GPU, load_model(cfg.model),
                           brute_latency(), pool_bytes=cfg.pool_bytes)  # fmt: skip


def _ratio(policy, r):
    return {"emb-max": 1.0, "kv-max": 0.0}.get(policy, float(policy.partition(":")[2] or r))


def test_the_frontier_is_simulated_at_n_minus_one_to_n_plus_two(small):
    t, cfg, res = small
    ctx = _ctx_at(t, cfg, cfg.scale)
    fr = res.frontier
    assert fr.height >= 3 and set(fr["step"]) <= {-1, 0, 1, 2}
    row = res.capacity.sort(["usd_per_day", "nodes", "p99_ms"]).row(0, named=True)
    assert (fr["policy"][0], fr["router"][0]) == (row["policy"], row["router"])  # the cheapest
    ev = res.evaluated
    for f in fr.iter_rows(named=True):
        e = ev.filter((ev["policy"] == f["policy"]) & (ev["router"] == f["router"])
                      & (ev["nodes"] == f["nodes"])).row(0, named=True)  # fmt: skip
        assert (f["passes"], f["p99_ms"]) == (e["passes"], e["p99_ms"])
        assert f["passes"] == (f["step"] >= 0)
        r = _ratio(f["policy"], e["ratio"])
        assert _passes(ctx, r, f["nodes"], f["router"], cfg, res.slo_ms) == f["passes"]
        assert f["usd_per_day"] == pytest.approx(f["nodes"] * 3.0 * 24)


def test_the_headroom_brackets_the_growth_the_fleet_absorbs(small):
    t, cfg, res = small
    (h,) = res.headroom.iter_rows(named=True)
    assert h["growth_lo"] < h["growth_hi"] and h["simulations"] >= 2
    ev = res.evaluated.filter((res.evaluated["policy"] == h["policy"])
                              & (res.evaluated["router"] == h["router"])
                              & (res.evaluated["nodes"] == h["nodes"]))  # fmt: skip
    r = _ratio(h["policy"], ev["ratio"][0])
    for g, ok in ((h["growth_lo"], True), (h["growth_hi"], False)):
        ctx = _ctx_at(t, cfg, cfg.scale * (1 + g))
        assert _passes(ctx, r, h["nodes"], h["router"], cfg, res.slo_ms) == ok, g
    assert h["peak_qps_lo"] == pytest.approx(res.scaling.peak_qps_after * (1 + h["growth_lo"]))


def test_a_pool_fraction_is_a_share_of_the_trace_as_given():
    t = small_table(1200, n_users=100, n_items=600, max_new=4, n_candidates=8,
                    rate_qps=200.0, seed=12)  # fmt: skip
    cfg = PlanConfig(gpus=("a100-80g",), policies=("emb-max",), routers=("jsq",), slo_ms=5.0,
                     pool_fraction=0.2, scale=3.0, max_nodes=4, node=NodeConfig(window_s=1.0),
                     oracle=OracleConfig(coarse_step=0.5), load_refine_steps=0,
                     headroom_steps=0, n_boot=20)  # fmt: skip
    res = plan(t, cfg, setups=[GpuSetup(GPU, brute_latency(), None, 1.0)])
    given = prepare_context(A.from_table(t, seed=cfg.seed), GPU, load_model(cfg.model),
                            brute_latency(), pool_fraction=0.2)  # fmt: skip
    scaled = _ctx_at(t, dataclasses.replace(cfg, pool_bytes=10**9), 3.0)
    assert scaled.footprint_bytes > given.footprint_bytes  # the scaled trace has more users
    assert res.gpus["pool_bytes"][0] == given.pool_bytes == int(0.2 * given.footprint_bytes)
    assert res.gpus["footprint_bytes"][0] == scaled.footprint_bytes


@pytest.mark.parametrize("by", ["users", "time"])
def test_the_peak_asked_for_is_the_peak_planned(by):
    # a trace with a burst: users scaling plans it at full height, within 1% of the target
    rng = np.random.default_rng(5)
    base = small_table(2400, n_users=300, n_items=600, max_new=3, n_candidates=4,
                       rate_qps=40.0, seed=13)  # fmt: skip
    ts = np.sort(np.concatenate([rng.uniform(0, 60, 1800), rng.uniform(20, 25, 600)]))
    t = base.set_column(0, "ts_s", __import__("pyarrow").array(ts))
    cfg = PlanConfig(gpus=("a100-80g",), policies=("emb-max",), routers=("jsq",), slo_ms=50.0,
                     pool_bytes=3_000_000, peak_qps=777.0, scale_by=by, max_nodes=2,
                     node=NodeConfig(window_s=5.0), oracle=OracleConfig(coarse_step=0.5),
                     load_refine_steps=0, headroom_steps=0, frontier=False, n_boot=20)  # fmt: skip
    res = plan(t, cfg, setups=[GpuSetup(GPU, brute_latency(), None, 1.0)])
    assert abs(res.scaling.peak_qps_after / 777.0 - 1) <= 0.01
    assert res.scaling.peak_qps_target == 777.0
    assert "asked 777" in res.answer[0]
