"""Canonical trace validation, round trips and atomic writes."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import small_table
from hypothesis import given, settings
from hypothesis import strategies as st

from helm_plan import trace
from helm_plan.errors import HelmPlanNote, TraceError


def _table(**over):
    base = {
        "ts_s": pa.array([0.0, 1.0, 2.0]),
        "user_id": pa.array([1, 2, 1], pa.int64()),
        "new_items": pa.array([[1, 2], [3], []], pa.list_(pa.int64())),
        "n_candidates": pa.array([0, 0, 0], pa.int32()),
    }
    base.update(over)
    return pa.table({k: v for k, v in base.items() if v is not None})


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"ts_s": pa.array([0.0, 2.0, 1.0])}, "row 2, column 'ts_s': timestamps not sorted"),
        (
            {"user_id": pa.array([1, -2, 1], pa.int64())},
            "row 1, column 'user_id': negative value -2",
        ),
        (
            {"new_items": pa.array([[1], [3, -4], []], pa.list_(pa.int64()))},
            "row 1, column 'new_items': negative id -4",
        ),
        (
            {"new_items": pa.array([[1], [3, None], []], pa.list_(pa.int64()))},
            "row 1, column 'new_items': null id",
        ),
        ({"user_id": pa.array([1, None, 1], pa.int64())}, "row 1, column 'user_id': null value"),
        ({"user_id": None}, "missing column 'user_id'"),
        ({"user_id": pa.array(["a", "b", "c"])}, "column 'user_id' has type string"),
        ({"ts_s": pa.array([0.0, float("nan"), 2.0])}, "row 1, column 'ts_s': non-finite"),
        ({"ts_s": pa.array([0.0, float("inf"), 2.0])}, "row 1, column 'ts_s': non-finite"),
        ({"ts_s": pa.array([-2.0, -1.0, 2.0])}, "row 0, column 'ts_s': negative timestamp -2.0"),
        (
            {"n_candidates": pa.array([0, 2**31 - 1, 0], pa.int32())},
            "row 1, column 'n_candidates': 2147483647 exceeds the bound",
        ),
        (
            {"candidates": pa.array([[1], [], []], pa.list_(pa.int64()))},
            "row 0, column 'candidates': 1 ids but n_candidates=0",
        ),
    ],
)
def test_validation_names_row_and_column(over, needle):
    with pytest.raises(TraceError) as ei:
        trace.validate(_table(**over))
    assert needle in str(ei.value)
    assert ei.value.hint  # every rejection says how to fix it


def test_validate_file_streams_the_same_rules_across_batches(tmp_path: Path):
    t = small_table(50)
    p = tmp_path / "t.parquet"
    pq.write_table(t, p, row_group_size=7)
    assert trace.validate_file(p, batch_rows=7) == trace.FileCheck(rows=50, ts_offset_s=0.0)
    ts = t.column("ts_s").to_numpy().copy()
    ts[21] = ts[20] - 0.5  # unsorted exactly across a batch boundary (rows 14-20 | 21-27)
    pq.write_table(t.set_column(0, "ts_s", pa.array(ts)), p, row_group_size=7)
    with pytest.raises(TraceError, match="row 21, column 'ts_s': timestamps not sorted"):
        trace.validate_file(p, batch_rows=7)
    bad = t.set_column(1, "user_id", pa.array([None] + [1] * 49, pa.int64()))
    pq.write_table(bad, p)
    with pytest.raises(TraceError, match="row 0, column 'user_id': null value"):
        trace.validate_file(p)


def test_validate_file_holds_one_64k_row_batch_at_a_time(tmp_path: Path):
    # analyze validates the file again in its inspect stage beside the loaded trace: a batch
    # of 2^20 rows (the old default) held the whole 1.24M-request trace's lists at once and
    # was the run's peak. Arrow's own pool peak, in a fresh process, against the decoded file.
    import subprocess
    import sys

    n = 600_000  # several batches: a row group's pages are decoded whole either way
    rng = np.random.default_rng(0)
    lens = rng.integers(0, 40, n)
    items = pa.ListArray.from_arrays(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32),
                                     pa.array(rng.integers(0, 10**6, int(lens.sum()))))  # fmt: skip
    t = pa.table({"ts_s": np.sort(rng.random(n)) * 100.0, "user_id": rng.integers(0, 5000, n),
                  "new_items": items, "n_candidates": np.zeros(n, np.int32)})  # fmt: skip
    p = tmp_path / "t.parquet"
    pq.write_table(t, p)
    code = (
        "import pyarrow as pa, sys; from helm_plan import trace; "
        f"assert trace.validate_file(sys.argv[1]).rows == {n}; "
        "print(pa.default_memory_pool().max_memory())"
    )
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True,
                         check=True)  # fmt: skip
    peak = int(out.stdout.split()[-1])
    # 64k rows: 0.44 of the decoded table; 2^20 (one batch of it all): 2.09
    assert peak < t.nbytes, (peak, t.nbytes)


def test_read_of_many_row_groups_equals_the_whole_file_read(tmp_path: Path):
    # read joins row groups as chunks (no whole-column join): the same rows, types and order,
    # a column subset too, and a bad row still named by its row in the file
    t = small_table(50, with_candidates=True)
    p = tmp_path / "t.parquet"
    pq.write_table(t, p, row_group_size=7)
    got = trace.read(p)
    assert got.column("new_items").num_chunks == 8
    assert got.equals(trace.validate(pq.read_table(p)))
    sub = trace.read(p, columns=["ts_s", "user_id", "new_items", "n_candidates"])
    assert sub.column_names == ["ts_s", "user_id", "new_items", "n_candidates"]
    assert sub.equals(got.select(sub.column_names))
    ts = t.column("ts_s").to_numpy().copy()
    ts[22] = ts[21] - 0.5  # unsorted inside the fourth row group (rows 21-27)
    pq.write_table(t.set_column(0, "ts_s", pa.array(ts)), p, row_group_size=7)
    with pytest.raises(TraceError, match="row 22, column 'ts_s': timestamps not sorted"):
        trace.read(p)


def test_epoch_timestamps_are_rebased_on_read_with_a_note(tmp_path: Path):
    t = small_table(30)
    ts = t.column("ts_s").to_numpy()
    p = tmp_path / "epoch.parquet"
    trace.write(t.set_column(0, "ts_s", pa.array(ts + 1.7e9)), p, {"source": "test"})
    with pytest.warns(HelmPlanNote, match="start at 1700000000 s .* rebased to start at 0"):
        got = trace.read(p)
    np.testing.assert_allclose(got.column("ts_s").to_numpy(), ts, atol=1e-6)
    assert trace.ts_offset(got) == 1.7e9
    with pytest.warns(HelmPlanNote):
        assert trace.validate_file(p).ts_offset_s == 1.7e9
    # relative times are left alone, and say nothing
    q = tmp_path / "rel.parquet"
    trace.write(t, q, {"source": "test"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert trace.read(q).equals(trace.validate(t)) and trace.ts_offset(trace.read(q)) == 0.0


def test_empty_and_unreadable(tmp_path: Path):
    with pytest.raises(TraceError, match="empty"):
        trace.validate(trace.empty_table())
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet")
    with pytest.raises(TraceError, match="cannot read"):
        trace.read(bad)
    with pytest.raises(TraceError, match="not found"):
        trace.read(tmp_path / "missing.parquet")


def test_narrow_types_are_cast():
    t = _table(user_id=pa.array([1, 2, 1], pa.uint16()), ts_s=pa.array([0, 1, 2], pa.int32()))
    out = trace.validate(t)
    assert out.schema.field("user_id").type == pa.int64()
    assert out.schema.field("ts_s").type == pa.float64()


def test_write_is_atomic_and_carries_provenance(tmp_path: Path):
    p = tmp_path / "t.parquet"
    trace.write(small_table(50), p, {"source": "test", "seed": 1})
    assert trace.provenance(p) == {"source": "test", "seed": 1}
    assert pq.read_schema(p).metadata[b"helm_plan.schema_version"] == b"1"
    # a failing write leaves the old file and no temp files behind
    before = p.read_bytes()
    with pytest.raises(TraceError):
        trace.write(_table(ts_s=pa.array([1.0, 0.0, 2.0])), p, {})
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.parquet"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 1000), cands=st.booleans())
def test_round_trip(tmp_path_factory, n, seed, cands):
    t = small_table(n, seed=seed, with_candidates=cands)
    p = tmp_path_factory.mktemp("rt") / "t.parquet"
    trace.write(t, p, {"seed": seed})
    back = trace.read(p)
    assert back.to_pydict() == trace.validate(t).to_pydict()
    assert len(trace.sha256(p)) == 64


def test_hash_is_content_hash(tmp_path: Path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    trace.write(small_table(30), a, {"x": 1})
    trace.write(small_table(30), b, {"x": 1})
    assert trace.sha256(a) == trace.sha256(b)
    assert np.all(trace.read(a).column("ts_s").to_numpy() >= 0)
