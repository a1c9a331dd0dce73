"""The cold-start span evaluation against the brute-force node and hand-worked figures.

Pins :mod:`helm_plan.sim.span` (issue 16 mutation survivors): ``replay_span`` equals the
brute-force node of DESIGN.md (tests/brute.py) started cold at ``warm_start`` on the trace cut
at ``stop``, in one window, for batching configurations where each option changes the
sojourns; ``span_eval`` gives the figures of hand-made outcomes from index ``k`` on; the span
and ratio checks have precise errors.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
from brute import BruteNodeConfig, C, coeff_latency, simulate
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.errors import ConfigError
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import prepare_context
from helm_plan.sim.span import evaluate_span, replay_span, span_eval

N = 90
TABLE = small_table(N, n_users=12, n_items=60, max_new=4, n_candidates=3, rate_qps=900.0, seed=3)
MODEL = dataclasses.replace(load_model("gr-small"), max_seq_len=16, kv_slide_chunk=2)
POOL = 200_000


def _ctx(n: int = N):
    return prepare_context(
        A.from_table(TABLE.slice(0, n)), load_gpu("a100-80g"), MODEL, coeff_latency(),
        pool_bytes=POOL,
    )  # fmt: skip


CASES = [
    # (slots, batch_max, timeout_ms, batching)
    (1, 1, 0.0, "static"),
    (2, 1, 0.0, "static"),
    (1, 3, 2.0, "static"),
    (2, 4, 0.7, "static"),
    (1, 3, 2.0, "continuous"),
]


@pytest.mark.parametrize(("slots", "bmax", "timeout_ms", "batching"), CASES)
@pytest.mark.parametrize(("ratio", "warm", "start", "stop"), [(0.4, 10, 30, 75), (0.7, 0, 5, 60)])
def test_replay_span_equals_the_brute_force_node(
    slots, bmax, timeout_ms, batching, ratio, warm, start, stop
):
    cfg = NodeConfig(slots=slots, batch_max=bmax, batch_timeout_ms=timeout_ms, batching=batching)
    r, soj = replay_span(_ctx(), ratio, warm, start, stop, cfg)
    ref = simulate(TABLE.slice(0, stop), MODEL, POOL, C,
                   BruteNodeConfig(1e6, slots, bmax, timeout_ms / 1e3, batching, "lazy"),
                   [ratio], first=warm)  # fmt: skip
    out = np.array(ref.outcomes, np.int64)
    assert len(r.n_computed) == stop - warm  # the whole span's outcomes
    np.testing.assert_array_equal(r.n_computed, out[:, 0])
    np.testing.assert_array_equal(r.miss_bytes, out[:, 5])
    assert soj.shape == (stop - start,)
    np.testing.assert_allclose(soj, ref.sojourn[start - warm :], rtol=1e-9, atol=1e-12)


def test_the_options_matter_here():
    """Each option of CASES changes the sojourns (so the comparison above can fail)."""
    base = NodeConfig(slots=1, batch_max=3, batch_timeout_ms=2.0)
    soj = {}
    for name, cfg in [
        ("base", base),
        ("slots", dataclasses.replace(base, slots=2, batch_max=1)),
        ("slots1", dataclasses.replace(base, batch_max=1)),
        ("bmax", dataclasses.replace(base, batch_max=2)),
        ("timeout", dataclasses.replace(base, batch_timeout_ms=0.5)),
        ("continuous", dataclasses.replace(base, batching="continuous")),
    ]:
        ref = simulate(TABLE, MODEL, POOL, C,
                       BruteNodeConfig(1e6, cfg.slots, cfg.batch_max, cfg.batch_timeout_ms / 1e3,
                                       cfg.batching, "lazy"), [0.4])  # fmt: skip
        soj[name] = np.array(ref.sojourn)
    for name in ("bmax", "timeout", "continuous", "slots1"):
        assert not np.allclose(soj[name], soj["base"]), name
    assert not np.allclose(soj["slots"], soj["slots1"])


def test_evaluate_span_figures_from_the_brute_force_node():
    cfg = NodeConfig(slo_ms=1.2, batch_max=2, batch_timeout_ms=1.0)
    warm, start, stop = 20, 35, 80
    ev = evaluate_span(_ctx(), 0.5, warm, start, stop, cfg)
    ref = simulate(TABLE.slice(0, stop), MODEL, POOL, C,
                   BruteNodeConfig(1e6, 1, 2, 1e-3, "static", "lazy"), [0.5], first=warm)  # fmt: skip
    soj = np.array(ref.sojourn[start - warm :])
    out = np.array(ref.outcomes[start - warm :], np.int64)
    assert 0 < np.mean(soj <= 1.2e-3) < 1  # the SLO splits the requests
    assert type(ev.ratio) is float and ev.ratio == 0.5
    assert ev.p50_ms == pytest.approx(1e3 * np.percentile(soj, 50), rel=1e-9)
    assert ev.p99_ms == pytest.approx(1e3 * np.percentile(soj, 99), rel=1e-9)
    assert ev.mean_ms == pytest.approx(1e3 * soj.mean(), rel=1e-9)
    assert ev.slo_attainment == np.mean(soj <= 1.2e-3)
    assert ev.miss_bytes == out[:, 5].sum()
    assert ev.emb_hit_rate == pytest.approx(1 - out[:, 5].sum() / out[:, 4].sum(), rel=1e-12)
    assert ev.kv_reuse_rate == pytest.approx(out[:, 1].sum() / out[:, 2].sum(), rel=1e-12)
    assert 0 < ev.kv_reuse_rate < 1 and 0 < ev.emb_hit_rate < 1


def test_span_eval_by_hand():
    r = SimpleNamespace(
        miss_bytes=np.array([100, 7, 3, 0], np.int64),
        lookup_bytes=np.array([100, 10, 10, 20], np.int64),
        n_reused=np.array([50, 1, 0, 2], np.int64),
        ctx_len=np.array([50, 4, 2, 2], np.int64),
    )
    soj = np.array([0.001, 0.004, 0.002])  # the measured requests 1..3
    ev = span_eval(1, r, soj, 1, 2.0)
    assert type(ev.ratio) is float and ev.ratio == 1.0
    assert ev.miss_bytes == 10 and type(ev.miss_bytes) is int
    assert ev.emb_hit_rate == pytest.approx(1 - 10 / 40)
    assert ev.kv_reuse_rate == pytest.approx(3 / 8)
    assert ev.p50_ms == pytest.approx(2.0)
    assert ev.p99_ms == pytest.approx(2.0 + 0.98 * 2.0)  # linear between 2 ms and 4 ms
    assert ev.mean_ms == pytest.approx(7 / 3)
    assert ev.slo_attainment == pytest.approx(2 / 3)
    # nothing measured: NaN latency figures, no lookups, no context
    empty = span_eval(0.5, r, np.zeros(0), 4, 2.0)
    assert empty.miss_bytes == 0 and math.isnan(empty.p99_ms) and math.isnan(empty.emb_hit_rate)
    assert math.isnan(empty.kv_reuse_rate)


@pytest.mark.parametrize(
    ("span", "ok"),
    [
        ((0, 0, 0), True),
        ((0, 0, N), True),
        ((N, N, N), True),
        ((-1, 0, 5), False),
        ((3, 2, 5), False),
        ((0, 6, 5), False),
        ((0, 0, N + 1), False),
    ],
)
def test_span_bounds(span, ok):
    ctx = _ctx()
    if ok:
        r, soj = replay_span(ctx, 0.5, *span, NodeConfig())
        assert len(r.n_computed) == span[2] - span[0] and len(soj) == span[2] - span[1]
        return
    with pytest.raises(ConfigError) as e:
        replay_span(ctx, 0.5, *span, NodeConfig())
    w, s, t = span
    assert e.value.one_line() == (
        f"bad span: warm_start={w}, start={s}, stop={t}; "
        "pass 0 <= warm_start <= start <= stop <= requests"
    )


@pytest.mark.parametrize("ratio", [-0.01, 1.01])
def test_ratio_out_of_range(ratio):
    with pytest.raises(ConfigError) as e:
        replay_span(_ctx(), ratio, 0, 0, 5, NodeConfig())
    assert (
        e.value.one_line()
        == f"ratio must be in [0.0, 1.0], got {ratio}; pass --ratio in [0.0, 1.0]"
    )
    for ok in (0.0, 1.0):
        _, soj = replay_span(_ctx(), ok, 0, 0, 5, NodeConfig())
        assert len(soj) == 5
