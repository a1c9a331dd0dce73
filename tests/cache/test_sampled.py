"""The SHARDS load (only the sampled tokens) against the same pass over the full arrays."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_table
from test_core import MULTI, ONE, model

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core, sampled
from helm_plan.cache import embstream as E
from helm_plan.cache.curves import CurvesConfig, compute_curves
from helm_plan.errors import ConfigError
from helm_plan.latency.model import build_latency_model, resolve_latency
from helm_plan.pool import Pool
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, prepare_context
from helm_plan.sim.step import NodeRunner

# (tables, explicit candidates, max_seq_len, slide chunk, most new tokens per request):
# max_new above max_seq_len adds tokens outside the context, which are never looked up
CASES = [
    (MULTI, False, 8, 3, 12),
    (MULTI, True, 20, 5, 6),
    (ONE, False, 30, 1, 6),
    (ONE, True, 6, 2, 10),
]


def _trace(explicit: bool, max_new: int, seed: int = 5):
    t = small_table(1200, n_users=30, n_items=900, n_candidates=6, seed=seed,
                    with_candidates=explicit, max_new=max_new)  # fmt: skip
    return t


@pytest.mark.parametrize(("tables", "explicit", "msl", "chunk", "max_new"), CASES)
@pytest.mark.parametrize("kv_tokens", [0, 40, 10**6])
def test_sampled_load_gives_the_full_arrays_estimate(tables, explicit, msl, chunk, max_new,
                                                     kv_tokens):  # fmt: skip
    """Bit for bit, at the loaded rate and below it, fixed-rate and fixed-size."""
    m = model(tables, max_seq_len=msl, chunk=chunk)
    t = _trace(explicit, max_new)
    full = core.Workload.of(A.from_table(t, seed=3, candidate_window_tokens=50), m)
    # batches of 7 rows: the draw ring and the per-user layout cross batch bounds
    sw = sampled.load(t, m, sample_rate=0.3, seed=11, candidate_seed=3,
                      candidate_window_tokens=50, batch_rows=7)  # fmt: skip
    edges = A.window_edges(full.arrays.ts_s, 3.0)
    grid = np.unique(np.geomspace(1, int(full.keys.key_bytes.sum()) + 10, 40).astype(np.int64))
    for s in (E.Sampling(rate=0.3, seed=11), E.Sampling(rate=0.1, seed=11),
              E.Sampling(rate=0.3, size=40, seed=11), E.Sampling(rate=0.3, seed=11, adjust=False)):  # fmt: skip
        want = E.emb_hits(full, kv_tokens, grid, edges, sampling=s)
        got = E.emb_hits(sw, kv_tokens, grid, edges, sampling=s, chunk_keys=3)
        assert not got.exact
        np.testing.assert_array_equal(got.hit_bytes, want.hit_bytes, err_msg=str(s))
        np.testing.assert_array_equal(got.lookup_bytes, want.lookup_bytes)
        np.testing.assert_array_equal(got.lookups, want.lookups)
    # the sample is a small share of the tokens, and keeps none the pass cannot emit
    assert len(sw.sample.hist_items) < int(full.arrays.tok_off[-1])


@pytest.mark.parametrize(("tables", "explicit", "msl", "chunk", "max_new"), CASES)
def test_first_lookups_are_the_streams_whatever_the_kv_capacity(tables, explicit, msl, chunk,
                                                                max_new):  # fmt: skip
    """Each key's first request, against the materialised lookup stream at three KV sizes."""
    m = model(tables, max_seq_len=msl, chunk=chunk)
    t = _trace(explicit, max_new, seed=8)
    full = core.Workload.of(A.from_table(t, seed=2, candidate_window_tokens=40), m)
    sw = sampled.load(t, m, sample_rate=0.05, candidate_seed=2, candidate_window_tokens=40)
    for kv_tokens in (0, 25, 10**6):
        r = core.kv_pass(full, kv_tokens)
        ids, offs = core.lookup_stream(full, r.n_computed)
        req = np.repeat(np.arange(full.arrays.n_requests), np.diff(offs))
        want = np.full(full.n_keys, -1, np.int64)
        keys, first = np.unique(ids, return_index=True)
        want[keys] = req[first]
        np.testing.assert_array_equal(sw.sample.first_request, want, err_msg=str(kv_tokens))
    # some tokens arrive outside the context when max_new exceeds it: their keys may stay unseen
    assert (want >= 0).any()


def test_file_and_table_loads_agree(tmp_path):
    m = model(MULTI, max_seq_len=10, chunk=2)
    t = _trace(False, 8)
    p = trace.write(t, tmp_path / "t.parquet", {})
    a = sampled.load(t, m, sample_rate=0.2, seed=4)
    b = sampled.load(p, m, sample_rate=0.2, seed=4, batch_rows=64)
    for f in ("hist_offsets", "hist_positions", "hist_items", "cand_offsets", "cand_values",
              "draw_bits", "draw_rank", "draw_items", "first_request"):  # fmt: skip
        np.testing.assert_array_equal(getattr(a.sample, f), getattr(b.sample, f), err_msg=f)
    full = A.from_file(p)
    for f in ("ts_s", "user", "n_new", "hist_end", "user_hist_offsets", "tok_off", "n_cand"):
        np.testing.assert_array_equal(getattr(b.workload.arrays, f), getattr(full, f), err_msg=f)
    np.testing.assert_array_equal(
        b.workload.keys.item_keys, core.Workload.of(full, m).keys.item_keys
    )


def test_curves_of_a_sampled_load_equal_the_full_loads():
    m = model(MULTI, max_seq_len=12, chunk=3)
    t = _trace(False, 6)
    full = core.Workload.of(A.from_table(t), m)
    sw = sampled.load(t, m, sample_rate=0.25, seed=1)
    cfg = CurvesConfig(window_s=4.0, sample_rate=0.25, seed=1, n_points=30)
    pool = Pool(int(full.keys.key_bytes.sum()) * 2, "test")
    g = load_gpu("a100-80g")
    want = compute_curves(full, g, m, pool, cfg)
    got = compute_curves(sw, g, m, pool, cfg)
    assert got.table.equals(want.table, null_equal=True)
    assert got.footprint == want.footprint


def test_a_sampled_load_refuses_what_it_cannot_answer():
    m = model(ONE, max_seq_len=10)
    t = _trace(True, 4)
    sw = sampled.load(t, m, sample_rate=0.1, seed=2)
    grid = np.array([0, 10, 100])
    with pytest.raises(
        ConfigError, match="loaded for SHARDS seed 2 at rate 0.1, not seed 2 at rate 0.2"
    ):
        E.emb_hits(sw, 0, grid, None, sampling=E.Sampling(rate=0.2, seed=2))
    with pytest.raises(ConfigError, match="not seed 3"):
        E.emb_hits(sw, 0, grid, None, sampling=E.Sampling(rate=0.1, seed=3))
    with pytest.raises(ConfigError, match="holds only the sampled tokens"):
        E.emb_hits(sw, 0, grid, None)
    with pytest.raises(ConfigError, match="holds only the sampled tokens"):
        E.emb_hits(sw, 0, grid, None, sampling=E.Sampling(rate=0.1, seed=2), sink=print)
    # its columns-only workload cannot be replayed or streamed in full
    assert not sw.workload.arrays.holds_tokens
    with pytest.raises(ConfigError, match="only per-request columns"):
        E.emb_hits(sw.workload, 0, grid, None)
    with pytest.raises(ConfigError, match="only per-request columns"):
        core.replay(sw.workload, core.new_state(sw.workload, 0.5, 1000, m))
    # nor simulated: a node context over it is fine for sizing the pool, not for a node
    g = load_gpu("a100-80g")
    gm = load_model("gr-small")
    lat = build_latency_model(g, gm, resolve_latency(g, gm, None))
    ctx = prepare_context(sw.workload, g, m, lat, pool_bytes=1000)
    with pytest.raises(ConfigError, match="only per-request columns"):
        NodeRunner(ctx, NodeConfig())
    with pytest.raises(ConfigError, match="loaded under another model than 't'"):
        prepare_context(sw.workload, g, model(ONE, max_seq_len=11), lat, pool_bytes=1000)
    with pytest.raises(ConfigError, match="sample_rate"):
        sampled.load(t, m, sample_rate=0.0)
    with pytest.raises(ConfigError, match="candidate_window_tokens must be positive, got 0"):
        sampled.load(t, m, sample_rate=0.1, candidate_window_tokens=0)
