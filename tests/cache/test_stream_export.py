"""The exported EMB stream reproduces the emb curve in libCacheSim (an independent simulator)."""

from __future__ import annotations

import libcachesim as lcs
import numpy as np
import polars as pl
from conftest import small_table
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import arrays as A
from helm_plan import trace as T
from helm_plan.cache import curves as C
from helm_plan.profiles import Pool, load_gpu, load_model


def _lcs_hit_rate(item_ids: np.ndarray, rows: int, path) -> float:
    _, dense = np.unique(item_ids, return_inverse=True)
    rec = np.zeros(len(dense), dtype=[("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nxt", "<i8")])
    rec["t"] = np.arange(len(dense))
    rec["id"] = dense
    rec["sz"] = 1
    rec["nxt"] = -1
    rec.tofile(path)
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = lcs.LRU(cache_size=rows).process_trace(reader)
    return 1.0 - miss_ratio


def test_exported_stream_replays_to_the_emb_curve_in_libcachesim(tmp_path):
    table = small_table(1500, n_users=120, n_items=3000, max_new=8, n_candidates=12, seed=2)
    a = A.from_table(table)
    gpu, model = load_gpu("a100-80g"), load_model("gr-small")
    pool = Pool(pool_bytes=600 * model.row_bytes, source="test")
    cfg = C.CurvesConfig(window_s=1e6, ratio=0.4, n_points=11)
    cv = C.compute_curves(a, gpu, model, pool, cfg)
    stream = C.emb_stream(a, model, pool, 0.4)
    ids = stream.column("item_id").to_numpy()
    assert np.all(np.diff(stream.column("request").to_numpy()) >= 0)
    curve = cv.curve("emb").filter(pl.col("capacity_bytes") > 0)
    assert len(ids) == int(curve["n_accesses"][0])
    for row in curve.iter_rows(named=True):
        rows = int(row["capacity_bytes"]) // model.row_bytes
        got = _lcs_hit_rate(ids, rows, tmp_path / "s.oracleGeneral")
        assert abs(got - row["hit_rate"]) < 1e-9, (rows, got, row["hit_rate"])


def test_profile_cli_writes_the_stream(tmp_path):
    p = tmp_path / "t.parquet"
    T.write(small_table(300), p, {"source": "test"})
    out, stream = tmp_path / "c.parquet", tmp_path / "s.parquet"
    res = CliRunner().invoke(
        app,
        [
            "profile",
            str(p),
            "--pool-fraction",
            "0.2",
            "-o",
            str(out),
            "--stream-out",
            str(stream),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    df = pl.read_parquet(stream)
    assert df.columns == ["request", "ts_s", "item_id"]
    assert df["request"].max() == 299
