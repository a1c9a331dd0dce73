"""The hostile-input workspace: small inputs, degenerate traces and broken files in one folder.

Shared by the hostile tables (tests/cli/test_hostile.py, tests/cli/test_junk_inputs.py); the
fixture is registered in tests/conftest.py.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helm_plan import trace
from helm_plan.controller.runtime import DEFAULT_PATH
from helm_plan.oracle.labels import Labels, write_labels
from helm_plan.report import STORE_NAME
from helm_plan.report.store import META_TABLE

UDATA = "".join(f"{k % 9}\t{k % 31}\t3\t{881250949 + 4000 * k}\n" for k in range(60))
LOG_CSV = "user,item,ts\n1,2,3\n1,3,4\n2,3,5\n"


def _raw(path: Path, **cols) -> None:
    """A parquet file with the canonical columns, some of them broken (not validated)."""
    base = {"ts_s": [0.0, 0.5, 1.0], "user_id": [0, 1, 2], "new_items": [[1], [2], [3]],
            "n_candidates": [2, 2, 2], "candidates": [[1, 2], [3, 1], [2, 3]]}  # fmt: skip
    base.update(cols)
    types = {"ts_s": pa.float64(), "user_id": pa.int64(), "new_items": pa.list_(pa.int64()),
             "n_candidates": pa.int32(), "candidates": pa.list_(pa.int64())}  # fmt: skip
    cols = {k: pa.array(v, types[k]) for k, v in base.items() if v is not None}
    pq.write_table(pa.table(cols), path)


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every input a case may name, in one folder that is also the working directory."""
    from conftest import small_table  # conftest imports this module

    monkeypatch.chdir(tmp_path)
    trace.write(small_table(300), tmp_path / "t.parquet", {"source": "tests"})
    t = small_table(2)
    gap = t.set_column(0, "ts_s", pa.array([0.0, 1e9]))
    trace.write(gap, tmp_path / "gap.parquet", {"source": "tests"})
    _raw(tmp_path / "null_user.parquet", user_id=[0, None, 2])
    _raw(tmp_path / "neg_item.parquet", new_items=[[1], [2, -5], [3]])
    _raw(tmp_path / "cand_len.parquet", candidates=[[1, 2], [3], [2, 3]])
    _raw(tmp_path / "neg_ts.parquet", ts_s=[-1.0, 0.5, 1.0])
    _raw(tmp_path / "huge_cands.parquet", n_candidates=[2, 2**31 - 1, 2],
         candidates=None)  # fmt: skip
    (tmp_path / "log.csv").write_text(LOG_CSV)
    (tmp_path / "log.csv.gz").write_bytes(gzip.compress(LOG_CSV.encode()))
    (tmp_path / "u.data").write_text(UDATA)
    (tmp_path / "arr.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    (tmp_path / "junk.csv").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "plain.txt").write_text("not a folder\n")
    (tmp_path / "bad_plan.toml").write_text("[analyze]\nslo_ms = 'fast'\n")
    (tmp_path / "typo_plan.toml").write_text("[analyse]\nslo_ms = 5.0\n")
    (tmp_path / "bad_atlas.toml").write_text('[atlas]\npanels = [["pool", "utilisation"]]\n')
    (tmp_path / "atlas.html").write_text("[atlas]\nrequests = 1000\n")  # a config named as a page
    # an atlas config where `--export k -o xd` writes the cell's plan file
    (tmp_path / "xd" / "cells" / "k").mkdir(parents=True)
    (tmp_path / "xd" / "cells" / "k" / "plan.toml").write_text("[atlas]\nrequests = 1000\n")
    (tmp_path / "d").mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / STORE_NAME).write_bytes(b"DUCK" + bytes(200))  # a truncated store
    # a trace that sits where `analyze -o labels_dir` would write labels.parquet
    (tmp_path / "labels_dir").mkdir()
    trace.write(small_table(50), tmp_path / "labels_dir" / "labels.parquet", {"source": "tests"})
    _degenerate_and_broken_files(tmp_path)
    return tmp_path


def _degenerate_and_broken_files(d: Path) -> None:
    """Degenerate traces, broken profiles, controllers, label files and a truncated store."""
    from conftest import small_table

    trace.write(small_table(1), d / "one.parquet", {"source": "tests"})  # one request
    t = small_table(5)
    trace.write(t.set_column(0, "ts_s", pa.array([0.0] * 5)), d / "zero.parquet", {"source": "t"})
    (d / "bad.toml").write_text('name = "x"\nhbm_bytes = "lots"\n')  # a field of the wrong type
    (d / "junk.toml").write_text("not toml [[[\n")
    with np.load(DEFAULT_PATH, allow_pickle=False) as z:
        ctrl = {k: z[k] for k in z.files}
    np.savez(d / "nan.npz", **{**ctrl, "W0": np.full_like(ctrl["W0"], np.nan)})
    np.savez(d / "card.npz", **{**ctrl, "card": np.array("{not json")})
    whole = DEFAULT_PATH.read_bytes()
    (d / "cut.npz").write_bytes(whole[: len(whole) // 2])  # a truncated zip
    (d / "cut_labels.npz").write_bytes(whole[: len(whole) // 3])
    lab = pl.DataFrame({"window": [0], "start_s": [0.0], "end_s": [10.0], "requests": [3],
                        "r_star": [1.5], "p99_ms": [1.0], "slo_attainment": [1.0]})  # fmt: skip
    write_labels(Labels(lab, 10.0, (0.0, 1.0), {}), d / "bad_labels.parquet")
    (d / "zero_plan.toml").write_text("[analyze]\nattainment = 0.0\n")
    (d / "huge_plan.toml").write_text("[analyze]\nmax_nodes = 100000\n")
    # a real DuckDB file cut short: it opens and lists its tables, then a table's pages are
    # gone (a store copied or written halfway; the issue's `internal error IOException`)
    (d / "trunc").mkdir()
    con = duckdb.connect(str(d / "trunc" / STORE_NAME))
    con.execute(f"CREATE TABLE {META_TABLE} AS SELECT 'k' || range AS key, '1' AS value_json "
                "FROM range(10)")  # fmt: skip
    con.execute("CHECKPOINT")
    con.execute("CREATE TABLE windows AS SELECT range AS a, random() AS b FROM range(400000)")
    con.execute("CHECKPOINT")
    con.close()
    store = d / "trunc" / STORE_NAME
    store.write_bytes(store.read_bytes()[: store.stat().st_size * 6 // 10])
    shutil.copy(d / "t.parquet", d / "trunc" / "t.parquet")


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(root.rglob("*"))
    }
