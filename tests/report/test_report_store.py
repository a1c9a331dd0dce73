"""The DuckDB run store: round trip, atomic write, precise errors."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from fake_run import make_run
from polars.testing import assert_frame_equal

from helm_plan.errors import InputFileError
from helm_plan.report.store import RunData, read_store, write_store


def test_round_trip_keeps_every_table_and_meta(tmp_path):
    run = make_run()
    p = write_store(tmp_path / "helm.duckdb", run)
    back = read_store(p)
    assert set(back.tables) == set(run.tables)
    for name, df in run.tables.items():
        assert_frame_equal(back.tables[name], df, check_dtypes=False)
    assert back.meta == run.meta
    # only the store itself is left: no temp file, no WAL
    assert sorted(x.name for x in tmp_path.iterdir()) == ["helm.duckdb"]


def test_store_is_plain_sql(tmp_path):
    write_store(tmp_path / "helm.duckdb", make_run())
    con = duckdb.connect(str(tmp_path / "helm.duckdb"), read_only=True)
    try:
        n = con.execute("SELECT count(*) FROM policy_windows WHERE policy = 'adaptive'").fetchone()
        keys = {r[0] for r in con.execute("SELECT key FROM run_meta").fetchall()}
    finally:
        con.close()
    assert n[0] == 6
    assert {"trace_sha256", "seed", "store_schema_version"} <= keys


def test_overwrite_replaces_atomically(tmp_path):
    p = tmp_path / "helm.duckdb"
    write_store(p, make_run(seed=1))
    write_store(p, RunData(tables={"x": pl.DataFrame({"a": [1]})}, meta={"seed": 9}))
    back = read_store(p)
    assert set(back.tables) == {"x"} and back.meta == {"seed": 9}


def test_missing_and_foreign_store_errors(tmp_path):
    with pytest.raises(InputFileError, match="not found"):
        read_store(tmp_path / "nope.duckdb")
    con = duckdb.connect(str(tmp_path / "other.duckdb"))
    con.execute("CREATE TABLE t AS SELECT 1 AS a")
    con.close()
    with pytest.raises(InputFileError, match="not a helm-plan run store"):
        read_store(tmp_path / "other.duckdb")
    (tmp_path / "junk.duckdb").write_text("not a database")
    with pytest.raises(InputFileError):
        read_store(tmp_path / "junk.duckdb")
