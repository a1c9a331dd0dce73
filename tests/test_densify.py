"""The two-pass dense build (streamed from a file or cut from a table) against a sorting build.

The reference is the textbook construction (``np.unique`` with ``return_inverse`` for the
ids, a stable argsort by user for the histories, a per-user running sum for ``hist_end``),
written here with no helm_plan code, so a wrong rank, a lost batch or an unstable layout
fails.
"""

from __future__ import annotations

import platform
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import small_table

from helm_plan import _densify, trace
from helm_plan import arrays as A
from helm_plan.errors import HelmPlanNote, TraceError


def reference(t: pa.Table) -> dict[str, np.ndarray]:
    """The dense arrays by sorting, as the build computed them before it streamed."""
    new = t.column("new_items").to_pylist()
    lens = np.array([len(x) for x in new], np.int64)
    vals = np.array([v for row in new for v in row], np.int64)
    cands = (
        np.array([v for row in t.column("candidates").to_pylist() for v in row], np.int64)
        if "candidates" in t.column_names
        else np.zeros(0, np.int64)
    )
    item_ids, inv = np.unique(np.concatenate([vals, cands]), return_inverse=True)
    tokens = inv[: len(vals)]
    user_ids, user = np.unique(t.column("user_id").to_numpy(), return_inverse=True)
    tok_user = np.repeat(user, lens)
    hist_values = tokens[np.argsort(tok_user, kind="stable")]
    hist_end = np.zeros(len(user), np.int64)
    seen: dict[int, int] = {}
    for i, (u, k) in enumerate(zip(user.tolist(), lens.tolist(), strict=True)):
        seen[u] = seen.get(u, 0) + k
        hist_end[i] = seen[u]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(tok_user, minlength=len(user_ids)))])
    return {
        "item_ids": item_ids,
        "cand_values": inv[len(vals) :],
        "user_ids": user_ids,
        "user": user,
        "hist_values": hist_values,
        "hist_end": hist_end,
        "user_hist_offsets": offsets,
        "tok_off": np.concatenate([[0], np.cumsum(lens)]),
        "ts_s": t.column("ts_s").to_numpy(),
        "n_cand": t.column("n_candidates").to_numpy(),
    }


def assert_same(a: A.TraceArrays, ref: dict[str, np.ndarray]) -> None:
    for name, want in ref.items():
        if name == "cand_values" and not a.explicit_candidates:
            continue
        np.testing.assert_array_equal(getattr(a, name), want, err_msg=name)
    assert a.n_items == len(ref["item_ids"]) and a.n_users == len(ref["user_ids"])
    assert a.hist_values.dtype == np.int32


def write(t: pa.Table, path, row_group: int) -> None:
    pq.write_table(t, path, row_group_size=row_group)


@pytest.mark.parametrize("with_candidates", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_file_build_equals_sorting_build(tmp_path, with_candidates, sparse):
    t = small_table(2000, n_users=60, n_items=500, seed=3, with_candidates=with_candidates)
    if sparse:  # hashed 62-bit ids: no lookup table, the binary-search path
        col = t.column("new_items").combine_chunks()
        vals = col.values.to_numpy() * 7_919_000_000_007 % (1 << 62)
        t = t.set_column(2, "new_items", pa.ListArray.from_arrays(col.offsets, pa.array(vals)))
        if with_candidates:
            c = t.column("candidates").combine_chunks()
            cv = c.values.to_numpy() * 7_919_000_000_007 % (1 << 62)
            t = t.set_column(4, "candidates", pa.ListArray.from_arrays(c.offsets, pa.array(cv)))
        # and hashed 62-bit user ids: the users' hash set and binary-search ranks
        uid = t.column("user_id").to_numpy() * 7_919_000_000_007 % (1 << 62)
        t = t.set_column(t.schema.get_field_index("user_id"), "user_id", pa.array(uid))
    p = tmp_path / "t.parquet"
    write(t, p, row_group=300)  # batches straddle row groups
    ref = reference(t)
    a = A.from_file(p, batch_rows=128)
    assert_same(a, ref)
    assert_same(A.from_table(t), ref)
    first = np.zeros(len(ref["user"]), bool)
    first[np.unique(ref["user"], return_index=True)[1]] = True
    np.testing.assert_array_equal(_densify.first_requests(a.user, a.n_users), first)
    # the table source cut into odd batches, as a stream would arrive
    assert_same(
        A.TraceArrays(
            **_densify.densify(
                _densify.table_batches(t, rows=37),
                has_candidates=with_candidates,
                has_latency=False,
            )
        ),
        ref,
    )


def test_distinct_ids_merge_across_many_batches():
    """Pending ids merge into the sorted set as they pile up; the result is every id once."""
    rng = np.random.default_rng(0)
    d = _densify._DistinctIds()
    parts = [rng.integers(0, 5_000_000, size=300_000) for _ in range(12)]
    for p in parts:
        d.add(pa.array(p))
    np.testing.assert_array_equal(d.sorted(), np.unique(np.concatenate(parts)))


def test_distinct_ids_bitset_then_hashed():
    """Small ids collect as bits (grown past several doublings); one id past the bitset's
    range, or a negative one, moves the set to hashing without losing a bit's id."""
    rng = np.random.default_rng(1)
    d = _densify._DistinctIds()
    parts = [rng.integers(0, 64 * 3, size=50), rng.integers(0, 1 << 20, size=20_000),
             np.array([0, 63, 64, (1 << 20) + 5])]  # fmt: skip
    for p in parts:
        d.add(pa.array(p))
    assert d._bits is not None  # still the bitset
    np.testing.assert_array_equal(d.sorted(), np.unique(np.concatenate(parts)))
    for extra in ([_densify.BITSET_MAX_IDS, 7], [-3, 2]):
        e = _densify._DistinctIds()
        every = [*parts, np.array(extra), rng.integers(0, 1 << 21, size=5_000)]
        for p in every:
            e.add(pa.array(p))
        assert e._bits is None  # moved to hashing
        np.testing.assert_array_equal(e.sorted(), np.unique(np.concatenate(every)))


def test_file_build_rebases_absolute_time_and_keeps_latency(tmp_path):
    t = small_table(500, seed=5, with_candidates=False)
    ts = t.column("ts_s").to_numpy() + 1.7e9
    t = t.set_column(0, "ts_s", pa.array(ts)).append_column(
        "latency_ms", pa.array(np.linspace(1.0, 9.0, t.num_rows))
    )
    p = tmp_path / "t.parquet"
    write(t, p, row_group=100)
    with pytest.warns(HelmPlanNote, match="rebased to start at 0"):
        a = A.from_file(p, batch_rows=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HelmPlanNote)
        whole = trace.read(p)
    np.testing.assert_array_equal(a.ts_s, whole.column("ts_s").to_numpy())
    assert a.ts_s[0] == 0.0
    np.testing.assert_array_equal(a.latency_ms, np.linspace(1.0, 9.0, t.num_rows))


def test_file_build_names_the_row_of_an_unsorted_timestamp_in_a_later_batch(tmp_path):
    t = small_table(500, seed=5, with_candidates=False)
    ts = t.column("ts_s").to_numpy().copy()
    ts[200] = ts[199] - 0.5  # row 200 sits in the 4th batch of 64
    p = tmp_path / "t.parquet"
    write(t.set_column(0, "ts_s", pa.array(ts)), p, row_group=100)
    with pytest.raises(TraceError, match="row 200, column 'ts_s': timestamps not sorted"):
        A.from_file(p, batch_rows=64)
    # the batch boundary itself: the first row of a batch earlier than the last of the one before
    ts = t.column("ts_s").to_numpy().copy()
    ts[128] = ts[127] - 0.5
    write(t.set_column(0, "ts_s", pa.array(ts)), p, row_group=100)
    with pytest.raises(TraceError, match="row 128, column 'ts_s': timestamps not sorted"):
        A.from_file(p, batch_rows=64)


def test_file_build_refuses_a_missing_column_and_a_missing_file(tmp_path):
    t = small_table(50, seed=1, with_candidates=False).drop_columns(["n_candidates"])
    p = tmp_path / "t.parquet"
    pq.write_table(t, p)
    with pytest.raises(TraceError, match="missing column 'n_candidates'"):
        A.from_file(p)
    with pytest.raises(TraceError, match="not found"):
        A.from_file(tmp_path / "nope.parquet")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_memory_finds_malloc_trim_on_glibc():
    """On glibc the heap trim is found (a failed lookup would silently keep every freed page)."""
    assert _densify._malloc_trim() is not None
    _densify.release_memory()


@pytest.mark.parametrize("change", ["fewer rows", "other token counts"])
def test_a_trace_that_changes_between_the_passes_is_an_error(change):
    """Pass 2 scatters each batch by pass 1's layout: a source whose second read differs
    (a file rewritten mid-load) is refused, not written past the histories' ends."""
    t = small_table(200, n_users=9, n_items=50, seed=5, with_candidates=False)
    if change == "fewer rows":
        second = t.slice(0, 199)
    else:  # the same rows and tokens, but one token moved to the next request
        new = t.column("new_items").to_pylist()
        k = next(i for i, row in enumerate(new) if row)
        new[k + 1] = new[k + 1] + new[k][:1]
        new[k] = new[k][1:]
        second = t.set_column(2, "new_items", pa.array(new, pa.list_(pa.int64())))
    calls = iter([_densify.table_batches(t), _densify.table_batches(second)])
    with pytest.raises(TraceError, match="^the trace changed between the two passes") as e:
        _densify.densify(lambda: next(calls)(), has_candidates=False, has_latency=False)
    assert "run again once it is complete" in e.value.one_line()
