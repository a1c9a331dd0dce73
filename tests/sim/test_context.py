"""The node context: derived arrays by brute force, the pool note, and ``load_context``.

Pins :mod:`helm_plan.sim.context` (issue 16 mutation survivors): ``first_visit`` and
``ctx_len`` against plain-Python loops (a user's first request; the chunked slide of
DESIGN.md), window edges against a loop over the arrivals, the "whole footprint fits" note
exactly at its boundary, and ``load_context`` passing each option (profiles, pool, seed) to
where it is used.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from brute import coeff_latency
from conftest import small_table

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache.footprint import footprint
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim.context import load_context, prepare_context

GPU = load_gpu("a100-80g")
MODEL = dataclasses.replace(load_model("gr-small"), max_seq_len=7, kv_slide_chunk=3)
TABLE = small_table(120, n_users=9, n_items=40, max_new=4, n_candidates=2, rate_qps=20.0, seed=5)


def _ctx(**kw):
    return prepare_context(A.from_table(TABLE), GPU, MODEL, coeff_latency(), **kw)


def test_derived_arrays_by_brute_force():
    ctx = _ctx(pool_bytes=50_000)
    users = TABLE.column("user_id").to_pylist()
    seen: set[int] = set()
    first = []
    for u in users:
        first.append(u not in seen)
        seen.add(u)
    assert ctx.first_visit.dtype == np.bool_ and ctx.first_visit.tolist() == first
    hist: dict[int, int] = {}
    want_l = []
    for u, new in zip(users, TABLE.column("new_items").to_pylist(), strict=True):
        hist[u] = h = hist.get(u, 0) + len(new)
        s0 = 0
        while h - s0 > 7:  # slide by whole chunks of 3 until the context fits
            s0 += 3
        want_l.append(h - s0)
    assert max(hist.values()) > 7  # the slide happens here
    assert ctx.ctx_len.tolist() == want_l
    assert ctx.n_cand.tolist() == [2] * 120
    assert ctx.arrays is ctx.workload.arrays and ctx.arrays.n_requests == 120
    assert ctx.gpu is GPU and ctx.model is MODEL and ctx.latency_profile is None


@pytest.mark.parametrize("ws", [0.5, 1.0, 2.5])
def test_edges_and_window_count(ws):
    ctx = _ctx(pool_bytes=50_000)
    ts = TABLE.column("ts_s").to_pylist()
    n_w = math.floor(ts[-1] / ws) + 1
    want = [sum(t < w * ws for t in ts) for w in range(n_w)] + [len(ts)]
    assert ctx.edges(ws).tolist() == want
    assert ctx.n_windows(ws) == n_w


def test_pool_note_at_the_footprint_boundary():
    fp = footprint(_ctx(pool_bytes=1).workload, MODEL).total_bytes
    fits = _ctx(pool_bytes=fp)
    assert fits.footprint_bytes == fp and fits.pool_bytes == fp
    assert fits.pool_source == "--pool-bytes"
    f = footprint(fits.workload, MODEL)
    lo, hi = f.emb_bytes / fp, 1 - f.kv_bytes / fp  # the pool is the footprint: lo == hi
    assert fits.emb_footprint_bytes == f.emb_bytes and lo == pytest.approx(hi)
    assert fits.notes == (
        f"the trace's whole EMB+KV footprint ({fp / 2**30:.3g} GiB) fits in the "
        f"{fp / 2**30:.3g} GiB pool: neither cache evicts at an EMB share between {lo:.4f} "
        f"and {hi:.4f}, and the caches compete only outside it; use --pool-fraction < 1, "
        "--scale or synth --like --scale to study a larger workload",
    )
    assert fits.fit_band == pytest.approx((lo, hi))
    assert _ctx(pool_bytes=fp - 1).notes == () and _ctx(pool_bytes=fp - 1).fit_band is None
    half = _ctx(pool_fraction=0.5)
    assert half.pool_bytes == int(0.5 * fp) and half.notes == ()
    assert half.pool_source.startswith("--pool-fraction 0.5 of the input trace's EMB+KV footprint")


def test_load_context_passes_every_option(tmp_path):
    bare = small_table(60, n_users=6, n_items=30, seed=2, with_candidates=False)
    path = tmp_path / "t.parquet"
    trace.write(bare, path, {"source": "test"})
    a = load_context(path, gpu="h100-80g", model="gr-large", pool_bytes=12345, seed=3)
    g, m = load_gpu("h100-80g"), load_model("gr-large")
    assert a.gpu == g and a.model == m and a.pool_bytes == 12345
    prof = resolve_latency(g, m, None)
    assert a.latency_profile == prof and a.latency == build_latency_model(g, m, prof)
    # the seed draws the implicit candidates
    assert a.arrays.candidate_seed == 3 and a.arrays.n_requests == 60
    np.testing.assert_array_equal(a.arrays.ts_s, bare.column("ts_s").to_numpy())
    b = load_context(bare, gpu="h100-80g", model="gr-large", pool_fraction=0.25, seed=3)
    assert b.arrays.candidate_seed == 3
    assert b.pool_bytes == int(0.25 * b.footprint_bytes)
    # another latency profile by name
    c = load_context(bare, latency="a100-40g_gr-small")
    assert c.latency_profile is not None and c.latency_profile.name == "a100-40g_gr-small"
    assert c.latency_profile != resolve_latency(load_gpu("a100-80g"), load_model("gr-small"), None)
    d = load_context(bare)
    assert d.gpu.name == "a100-80g" and d.model.name == "gr-small"
    assert d.pool_source.startswith("hbm a100-80g")
    assert d.arrays.candidate_seed == 0


@pytest.mark.parametrize(
    ("pool", "emb", "total", "band", "r"),
    [
        # band [0.1, 0.3]: middle 0.2 is on the lattice
        (1000, 100, 800, (0.1, 0.3), 0.2),
        # band [0.0001, 0.015] (the flat scenario's shape): middle 0.00755 -> 0.01 is inside
        (10_000, 1, 9_851, (0.0001, 0.015), 0.01),
        # band [0.2201, 0.2299]: no lattice point inside, the middle itself
        (10_000, 2_201, 9_902, (0.2201, 0.2299), 0.225),
    ],
)
def test_fit_band_and_ratio_by_hand(pool, emb, total, band, r):
    ctx = dataclasses.replace(_ctx(pool_bytes=50_000), pool_bytes=pool, footprint_bytes=total,
                              emb_footprint_bytes=emb)  # fmt: skip
    assert ctx.fit_band == pytest.approx(band)
    assert ctx.fit_ratio(0.01) == pytest.approx(r)
    lo, hi = ctx.fit_band
    assert lo <= ctx.fit_ratio(0.01) <= hi
    over = dataclasses.replace(ctx, footprint_bytes=pool + 1)
    assert over.fit_band is None and over.fit_ratio() is None
