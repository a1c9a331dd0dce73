"""The label file (oracle/labels.py) on tiny made-up tables: grid suffixes, the grid accessor,
the parquet metadata written (read back with pyarrow, not with read_labels), and each of
read_labels' errors with its message and hint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helm_plan.errors import InputFileError
from helm_plan.oracle.labels import Labels, grid_suffix, read_labels, write_labels

HINT = "make one with `helm-plan oracle TRACE -o FILE`"


def test_grid_suffix_is_the_percent_with_three_digits():
    assert grid_suffix(0.0) == "r000"
    assert grid_suffix(0.1) == "r010"
    assert grid_suffix(0.07) == "r007"  # 7.000000000000001 % rounds to 7
    assert grid_suffix(0.29) == "r029"  # 28.999999999999996 % rounds to 29, not truncates to 28
    assert grid_suffix(1.0) == "r100"


def _table() -> pl.DataFrame:
    # two windows, a grid of three ratios; every grid value is distinct: 100·w + 10·k + metric
    cols: dict[str, list[float]] = {
        "window": [0, 1],
        "start_s": [0.0, 2.0],
        "end_s": [2.0, 4.0],
        "requests": [3, 5],
        "r_star": [0.25, 0.75],
        "p99_ms": [4.0, 6.0],
        "slo_attainment": [1.0, 0.5],
    }
    for m, metric in enumerate(("p99_ms", "slo_att", "emb_hit", "kv_reuse")):
        for k, sfx in enumerate(("r000", "r050", "r100")):
            cols[f"{metric}_{sfx}"] = [100.0 * w + 10.0 * k + m for w in range(2)]
    return pl.DataFrame(cols)


def _labels(meta=None) -> Labels:
    return Labels(_table(), 2.0, (0.0, 0.5, 1.0), meta if meta is not None else {})


def test_r_star_and_grid_select_the_right_columns_in_grid_order():
    lab = _labels()
    np.testing.assert_array_equal(lab.r_star, [0.25, 0.75])
    # default metric is p99_ms (m = 0); columns follow coarse_grid
    np.testing.assert_array_equal(lab.grid(), [[0.0, 10.0, 20.0], [100.0, 110.0, 120.0]])
    np.testing.assert_array_equal(lab.grid("kv_reuse"), [[3.0, 13.0, 23.0], [103.0, 113.0, 123.0]])
    # a grid given in another order reads the columns in that order
    rev = Labels(_table(), 2.0, (1.0, 0.0))
    np.testing.assert_array_equal(rev.grid("slo_att"), [[21.0, 1.0], [121.0, 101.0]])


def test_write_labels_metadata_read_back_with_pyarrow(tmp_path):
    meta = {"b": 1, "a": {"path": Path("/x/y")}}
    p = write_labels(_labels(meta), tmp_path / "lab.parquet")
    assert p == tmp_path / "lab.parquet"
    md = pq.read_schema(p).metadata
    assert md[b"helm_plan.labels_schema_version"] == b"1"
    assert md[b"helm_plan.window_s"] == b"2.0"
    assert json.loads(md[b"helm_plan.coarse_grid"]) == [0.0, 0.5, 1.0]
    # keys sorted, a Path written as its string (default=str)
    assert md[b"helm_plan.oracle"] == b'{"a": {"path": "/x/y"}, "b": 1}'
    assert pl.read_parquet(p).equals(_table())


def test_write_labels_window_s_is_written_as_a_float_repr(tmp_path):
    lab = Labels(_table(), 3, (0.0, 0.5, 1.0))
    md = pq.read_schema(write_labels(lab, tmp_path / "lab.parquet")).metadata
    assert md[b"helm_plan.window_s"] == b"3.0"


def test_read_labels_round_trip(tmp_path):
    p = write_labels(_labels({"oracle": {"trials": 4}}), tmp_path / "lab.parquet")
    back = read_labels(str(p))  # a str path works too
    assert back.table.equals(_table())
    assert back.window_s == 2.0 and isinstance(back.window_s, float)
    assert back.coarse_grid == (0.0, 0.5, 1.0) and isinstance(back.coarse_grid, tuple)
    assert back.meta == {"oracle": {"trials": 4}}
    assert back.schedule_run is None


def test_read_labels_without_oracle_metadata_has_empty_meta(tmp_path):
    tbl = _table().to_arrow()
    tbl = tbl.replace_schema_metadata(
        {
            b"helm_plan.labels_schema_version": b"1",
            b"helm_plan.window_s": b"0.5",
            b"helm_plan.coarse_grid": b"[0.0, 1.0]",
        }
    )
    p = tmp_path / "lab.parquet"
    pq.write_table(tbl, p)
    back = read_labels(p)
    assert back.meta == {}
    assert back.window_s == 0.5 and back.coarse_grid == (0.0, 1.0)


def test_read_labels_missing_file(tmp_path):
    p = tmp_path / "none.parquet"
    with pytest.raises(InputFileError) as ei:
        read_labels(p)
    assert str(ei.value) == f"labels file {p} not found"
    assert ei.value.hint == HINT


def test_read_labels_not_parquet(tmp_path):
    p = tmp_path / "junk.parquet"
    p.write_text("not parquet at all")
    with pytest.raises(InputFileError) as ei:
        read_labels(p)
    assert str(ei.value).startswith(f"cannot read {p} as parquet: ")
    assert ei.value.hint == "check the file is a labels parquet written by `helm-plan oracle`"
    assert isinstance(ei.value.__cause__, (pa.ArrowInvalid, OSError))


def test_read_labels_without_schema_version(tmp_path):
    p = tmp_path / "plain.parquet"
    pl.DataFrame({"x": [1]}).write_parquet(p)
    with pytest.raises(InputFileError) as ei:
        read_labels(p)
    assert str(ei.value) == (
        f"{p} is not a helm-plan labels file (no labels schema version in its metadata)"
    )
    assert ei.value.hint == HINT


@pytest.mark.parametrize("drop", ["window", "start_s", "requests", "slo_attainment"])
def test_read_labels_names_the_first_missing_column(tmp_path, drop):
    t = _table().drop(drop, "p99_ms") if drop != "slo_attainment" else _table().drop(drop)
    lab = Labels(t, 2.0, (0.0, 0.5, 1.0))
    p = write_labels(lab, tmp_path / "lab.parquet")
    with pytest.raises(InputFileError) as ei:
        read_labels(p)
    assert str(ei.value) == f"labels file {p} is missing column {drop!r}"
    assert ei.value.hint == "make the labels file with `helm-plan oracle TRACE -o FILE`"


def test_nan_labels_survive_the_round_trip(tmp_path):
    t = _table().with_columns(pl.Series("r_star", [float("nan"), 0.5]))
    back = read_labels(write_labels(Labels(t, 2.0, (0.0, 0.5, 1.0)), tmp_path / "l.parquet"))
    assert math.isnan(back.r_star[0]) and back.r_star[1] == 0.5


def _points_table() -> pl.DataFrame:
    """Labels without a grid: each window lists the points its search evaluated."""
    return pl.DataFrame(
        {
            "window": [0, 1, 2],
            "start_s": [0.0, 2.0, 4.0],
            "end_s": [2.0, 4.0, 6.0],
            "requests": [3, 5, 0],
            "r_star": [0.25, 0.75, math.nan],
            "p99_ms": [4.0, 6.0, math.nan],
            "slo_attainment": [1.0, 0.5, math.nan],
            "evals_r": [[0.15, 0.25, 0.35], [0.5, 0.75], []],
            "evals_p99_ms": [[5.0, 4.0, 4.5], [7.0, 6.0], []],
            "evals_slo_att": [[0.9, 1.0, 1.0], [0.4, 0.5], []],
            "evals_emb_hit": [[0.1, 0.2, 0.3], [0.5, 0.6], []],
            "evals_kv_reuse": [[0.7, 0.8, 0.9], [0.3, 0.2], []],
        },
        schema_overrides={c: pl.List(pl.Float64) for c in
                          ("evals_r", "evals_p99_ms", "evals_slo_att", "evals_emb_hit",
                           "evals_kv_reuse")},
    )  # fmt: skip


def test_labels_without_a_grid_round_trip_and_read_as_points(tmp_path):
    lab = Labels(table=_points_table(), window_s=2.0, coarse_grid=())
    back = read_labels(write_labels(lab, tmp_path / "l.parquet"))
    assert back.coarse_grid == () and back.table.equals(lab.table)
    assert back.grid("p99_ms").shape == (3, 0)  # no grid columns to read
    pts = back.points()
    assert pts.columns == ["window", "ratio", "p99_ms", "slo_attainment", "emb_hit_rate",
                           "kv_reuse_rate"]  # fmt: skip
    assert pts["window"].to_list() == [0, 0, 0, 1, 1]  # the empty window has no points
    assert pts["ratio"].to_list() == [0.15, 0.25, 0.35, 0.5, 0.75]
    assert pts["p99_ms"].to_list() == [5.0, 4.0, 4.5, 7.0, 6.0]
    assert pts["kv_reuse_rate"].to_list() == [0.7, 0.8, 0.9, 0.3, 0.2]


def test_points_of_labels_with_a_grid_are_the_grid():
    lab = _labels()
    pts = lab.points()
    assert pts.height == 2 * 3
    w1 = pts.filter(pl.col("window") == 1)
    assert w1["ratio"].to_list() == [0.0, 0.5, 1.0]
    np.testing.assert_array_equal(w1["p99_ms"].to_numpy(), lab.grid("p99_ms")[1])
    np.testing.assert_array_equal(w1["emb_hit_rate"].to_numpy(), lab.grid("emb_hit")[1])
