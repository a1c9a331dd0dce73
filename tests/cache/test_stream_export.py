"""The exported EMB stream (with key sizes) reproduces the emb curve in libCacheSim, an independent simulator."""

from __future__ import annotations

import json

import libcachesim as lcs
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import small_table
from helm_plan_cli.main import app
from test_core import MULTI, model
from typer.testing import CliRunner

from helm_plan import arrays as A
from helm_plan import trace as T
from helm_plan.cache import core
from helm_plan.cache import curves as C
from helm_plan.cache import embstream as E
from helm_plan.pool import Pool
from helm_plan.profiles import load_gpu


def _lcs_byte_hit_rate(df: pl.DataFrame, cap: int, path) -> float:
    """libCacheSim LRU with object sizes over the (table, row) keys of an exported stream."""
    key = df.select(pl.struct("table", "row").rank("dense")).to_series().to_numpy()
    if not path.exists():
        rec = np.zeros(df.height, [("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nxt", "<i8")])
        rec["t"] = np.arange(df.height)
        rec["id"] = key
        rec["sz"] = df["bytes"].to_numpy()
        rec["nxt"] = -1
        rec.tofile(path)
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    _, byte_miss_ratio = lcs.LRU(cache_size=cap).process_trace(reader)
    return 1.0 - byte_miss_ratio


@pytest.mark.parametrize("explicit", [True, False])
def test_exported_stream_replays_to_the_emb_curve_in_libcachesim(tmp_path, explicit):
    """Byte capacities from below the smallest key to past the footprint, multi-size keys."""
    m = model(MULTI, max_seq_len=30, chunk=7)
    table = small_table(1500, n_users=120, n_items=3000, max_new=8, n_candidates=12, seed=2,
                        with_candidates=explicit)  # fmt: skip
    wl = core.Workload.of(A.from_table(table, seed=1), m)
    pool = Pool(pool_bytes=9000, source="test")
    cv = C.compute_curves(
        wl, load_gpu("a100-80g"), m, pool, C.CurvesConfig(window_s=1e6, ratio=0.4)
    )
    stream = pl.from_arrow(E.emb_stream(wl, m, pool, 0.4))
    assert stream.columns == ["request", "table", "row", "bytes"]
    assert np.all(np.diff(stream["request"].to_numpy()) >= 0)
    curve = cv.curve("emb")
    assert stream.height == int(curve["n_accesses"][0])
    caps = [3, 4, 5, 7, 15, 16, 17, 100] + curve["capacity_bytes"].to_list()[1::5]
    rates = dict(zip(curve["capacity_bytes"].to_list(), curve["hit_rate"].to_list(), strict=True))
    edges = A.window_edges(wl.arrays.ts_s, 1e6)
    extra = sorted(caps)
    hits = E.emb_hits(wl, cv.emb_kv_tokens, np.array(extra), edges)
    rates.update(
        {c: h / hits.lookup_bytes[0] for c, h in zip(extra, hits.hit_bytes[0], strict=True)}
    )
    for cap in caps:
        got = _lcs_byte_hit_rate(stream, cap, tmp_path / "s.oracleGeneral")
        assert abs(got - rates[cap]) < 1e-9, (cap, got, rates[cap])


def test_profile_cli_writes_the_stream_behind_the_curve(tmp_path):
    p = tmp_path / "t.parquet"
    T.write(small_table(300), p, {"source": "test"})
    out, stream = tmp_path / "c.parquet", tmp_path / "s.parquet"
    args = ["profile", str(p), "--pool-fraction", "0.2", "-o", str(out), "-q", "--ratio", "0.3"]
    res = CliRunner().invoke(app, [*args, "--stream-out", str(stream)])
    assert res.exit_code == 0, res.output
    df = pl.read_parquet(stream)
    assert df.columns == ["request", "table", "row", "bytes"]
    assert df["request"].max() == 299
    curves = C.read_table(out)
    emb = curves.filter((pl.col("kind") == "emb") & (pl.col("window") == -1))
    assert df.height == emb["n_accesses"][0]
    meta = pq.read_schema(stream).metadata
    info = json.loads(meta[b"helm_plan.stream"])
    prov = json.loads(meta[b"helm_plan.provenance"])
    assert prov["ratio"] == "0.3" and info["tables"][0]["row_bytes"] == df["bytes"][0]
    # the identity table's rows are the trace's own item ids (hashed tables' rows are not)
    items = {i for lst in T.read(p).column("new_items").to_pylist() for i in lst}
    items |= {i for lst in T.read(p).column("candidates").to_pylist() for i in lst}
    ident = [i for i, t in enumerate(info["tables"]) if t["key"] == "identity"]
    assert ident and set(df.filter(pl.col("table").is_in(ident))["row"].unique().to_list()) <= items
    # the same curve without the stream
    res = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "c2.parquet")])
    assert res.exit_code == 0, res.output
    assert C.read_table(tmp_path / "c2.parquet").equals(curves)


def test_stream_writer_leaves_no_file_when_the_pass_fails(tmp_path):
    m = model(MULTI)
    wl = core.Workload.of(A.from_table(small_table(100)), m)
    path = tmp_path / "s.parquet"
    with pytest.raises(RuntimeError, match="boom"), E.StreamWriter(path, wl, m, {}) as sink:
        E.emb_hits(wl, 0, np.array([0, 10]), None, sink=sink, chunk_keys=1)
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
