"""The SHARDS load's defaults, layout and validation, pinned (gaps mutation testing found)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_table
from test_core import MULTI, ONE, model

from helm_plan import arrays as A
from helm_plan import trace
from helm_plan.cache import embstream as E
from helm_plan.cache import sampled
from helm_plan.cache.shards import SHARDS_MODULUS
from helm_plan.errors import ConfigError, TraceError


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
