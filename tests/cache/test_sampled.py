"""The SHARDS load (only the sampled tokens) against the same pass over the full arrays.

Also the SHARDS load's defaults, layout and validation, pinned.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_table
from test_core import MULTI, ONE, model

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import core, sampled
from helm_plan.cache import embstream as E
from helm_plan.cache.curves import CurvesConfig, compute_curves
from helm_plan.cache.shards import SHARDS_MODULUS
from helm_plan.errors import ConfigError, TraceError
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


def test_defaults_are_the_full_loaders():
    """Unset seeds and window draw the candidates the full load (and the CLI) draws."""
    t = small_table(200, n_users=10, n_items=300, seed=1, with_candidates=False)
    sw = sampled.load(t, model(ONE), sample_rate=0.5)
    full = A.from_table(t)
    a = sw.workload.arrays
    assert (a.candidate_seed, a.candidate_window_tokens) == (
        full.candidate_seed, full.candidate_window_tokens
    )  # fmt: skip
    assert sw.sample.seed == 0 and sw.sample.threshold == SHARDS_MODULUS // 2


def test_the_columns_only_arrays_and_the_sample_layout():
    t = small_table(300, n_users=12, n_items=400, seed=2, with_candidates=False)
    lat = pa.array(np.linspace(1.0, 2.0, t.num_rows))
    t = t.append_column("latency_ms", lat)
    sw = sampled.load(t, model(MULTI, max_seq_len=10), sample_rate=0.3)
    a, full = sw.workload.arrays, A.from_table(t)
    for f in ("hist_values", "cand_values"):
        v = getattr(a, f)
        assert v.dtype == np.int32 and len(v) == 0, f
    np.testing.assert_array_equal(a.latency_ms, full.latency_ms)
    s = sw.sample
    n_tok = int(full.tok_off[-1])
    assert s.draw_bits.dtype == np.uint64 and len(s.draw_bits) == (n_tok + 63) // 64
    assert s.draw_rank.dtype == np.int32 and len(s.draw_rank) == len(s.draw_bits)  # small stream
    assert s.draw_rank[0] == 0 and s.draw_rank[-1] + int(np.bitwise_count(s.draw_bits[-1])) == len(
        s.draw_items
    )
    assert s.first_request.dtype == np.int32 and len(s.first_request) == sw.workload.n_keys
    assert s.hist_positions.dtype == np.int32 and s.hist_items.dtype == np.int32
    assert len(s.cand_offsets) == 1 and len(s.cand_values) == 0
    # explicit candidates: no draw bits, and per-request offsets
    e = sampled.load(small_table(100, seed=3), model(ONE), sample_rate=0.5)
    assert len(e.sample.draw_bits) == 0 and len(e.sample.cand_offsets) == 101


def test_position_dtype_boundary():
    assert sampled.position_dtype(0) is np.int32
    assert sampled.position_dtype(2**31) is np.int32  # positions up to 2**31 - 1
    assert sampled.position_dtype(2**31 + 1) is np.int64


def test_rate_bounds_and_window_errors():
    t = small_table(50, seed=4)
    m = model(ONE)
    lowest = 1.0 / SHARDS_MODULUS
    assert sampled.load(t, m, sample_rate=lowest).sample.threshold == 1
    assert sampled.load(t, m, sample_rate=1.0).sample.threshold == SHARDS_MODULUS
    for bad in (lowest / 2, 1.0 + 1e-9):
        with pytest.raises(ConfigError, match=r"^sample_rate must be in"):
            sampled.load(t, m, sample_rate=bad)
    assert sampled.load(t, m, sample_rate=0.5, candidate_window_tokens=1)
    with pytest.raises(ConfigError) as e:
        sampled.load(t, m, sample_rate=0.5, candidate_window_tokens=0)
    assert str(e.value) == "candidate_window_tokens must be positive, got 0"
    assert e.value.hint == "set candidate_window_tokens > 0"


def test_check_pass_messages():
    s = sampled.load(small_table(50, seed=5), model(ONE), sample_rate=0.25, seed=7).sample
    sampled.check_pass(s, s.threshold, 7)  # the loaded rate itself is fine
    with pytest.raises(ConfigError) as e:
        sampled.check_pass(s, s.threshold + 1, 7)
    assert str(e.value) == (
        f"this trace was loaded for SHARDS seed 7 at rate 0.25, not seed 7 at rate "
        f"{(s.threshold + 1) / SHARDS_MODULUS:g}"
    )
    assert e.value.hint == "load the trace again with the pass's sample rate and seed"


def test_first_bytes_by_window_and_table():
    """A hand-worked case: keys first looked up at requests 0, 2, 5 and never."""
    s = sampled.TokenSample(
        threshold=1, seed=0, hist_offsets=np.zeros(1, np.int64),
        hist_positions=np.zeros(0, np.int32), hist_items=np.zeros(0, np.int32),
        cand_offsets=np.zeros(1, np.int64), cand_values=np.zeros(0, np.int32),
        draw_bits=np.zeros(0, np.uint64), draw_rank=np.zeros(0, np.int64),
        draw_items=np.zeros(0, np.int32), first_request=np.array([0, 2, 5, -1, 5]),
    )  # fmt: skip
    key_table = np.array([0, 1, 1, 0, 0], np.int16)
    edges = np.array([0, 2, 2, 6])  # windows [0, 2), [2, 2) (empty), [2, 6)
    got = s.first_bytes(key_table, np.array([10, 3]), edges)
    np.testing.assert_array_equal(got, [[10, 0], [0, 0], [10, 6]])


def test_a_user_with_no_kept_token_still_has_offsets():
    """The highest user adds nothing: the per-user offsets still cover every user."""
    ts = np.arange(6, dtype=np.float64)
    users = np.array([0, 1, 0, 2, 1, 9])
    off = np.array([0, 3, 5, 8, 10, 12, 12])
    vals = np.arange(12) * 7
    t = trace.make_table(ts, users, off, vals, np.full(6, 2))
    sw = sampled.load(t, model(ONE), sample_rate=1.0)
    s = sw.sample
    assert len(s.hist_offsets) == sw.workload.arrays.n_users + 1 == 5
    np.testing.assert_array_equal(np.diff(s.hist_offsets), [6, 4, 2, 0])
    assert s.cand_offsets.dtype == np.int64


def test_a_trace_that_changes_between_passes_is_an_error():
    t = small_table(60, seed=6, with_candidates=False)
    m = model(ONE)
    sw = sampled.load(t, m, sample_rate=0.5)
    short = t.slice(0, 59)
    with pytest.raises(
        TraceError, match="^the trace changed between the two passes of the sampled load$"
    ) as e:
        sampled._scan(sw.workload.arrays, sw.workload, lambda: short.to_batches(), 1 << 23, 0)
    assert e.value.hint == "the file was rewritten while it was read; run again once it is complete"


def test_what_a_sampled_pass_refuses_is_said_exactly():
    sw = sampled.load(small_table(40, seed=7), model(ONE), sample_rate=0.5)
    with pytest.raises(ConfigError) as e:
        E.emb_hits(sw, 0, np.array([0, 10]), None)
    assert str(e.value) == "a SHARDS load holds only the sampled tokens"
    assert e.value.hint == "load the trace in full for an exact pass or a stream sink"
    with pytest.raises(ConfigError) as e:
        E.emb_hits(sw.workload, 0, np.array([0, 10]), None)
    assert str(e.value) == (
        "this workload holds only per-request columns (a SHARDS load): nothing to replay"
    )
    assert e.value.hint == "load the trace in full (helm_plan.sim.load_context) to replay it"
