"""Ingest semantics: --qps is the written trace's mean rate; gzip, BOM and binary inputs."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from helm_plan.errors import IngestError
from helm_plan.ingest import IngestConfig, ingest, ingest_to_file
from helm_plan.ingest import arrivals as A

# 3,000 ratings 4,000 s apart: every rating is its own session, so 3,000 requests.
UDATA = "".join(f"{u}\t{i}\t3\t{881250949 + 4000 * k}\n" for k, (u, i) in enumerate(
    (k % 37, (k * 7919) % 501) for k in range(3000)))  # fmt: skip


def _mean_rate(ts: np.ndarray) -> float:
    return (len(ts) - 1) / (ts[-1] - ts[0])


@pytest.mark.parametrize("regime", ["steady", "trend", "burst", "mixed"])
def test_qps_is_the_mean_rate_of_every_regime(tmp_path: Path, regime: str) -> None:
    src = tmp_path / "u.data"
    src.write_text(UDATA)
    table, rep = ingest(src, IngestConfig("movielens", regime=regime, qps=100.0, seed=0))
    ts = table.column("ts_s").to_numpy()
    assert abs(_mean_rate(ts) / 100.0 - 1) < 0.02, (regime, _mean_rate(ts))
    assert f"{regime} regime, mean 100 req/s" in rep.timing and "(seed 0)" in rep.timing


def test_qps_and_duration_cut_to_the_mean_rate(tmp_path: Path) -> None:
    src = tmp_path / "u.data"
    src.write_text(UDATA)
    table, rep = ingest(src, IngestConfig("movielens", regime="burst", qps=50.0, duration_s=20.0))
    assert table.num_rows == 1000 and rep.requests_truncated == 2000
    ts = table.column("ts_s").to_numpy()
    assert ts[-1] < 20.0 and abs(_mean_rate(ts) / 50.0 - 1) < 0.02


def test_arrival_series_scaled_over_the_part_used() -> None:
    # 10 s busy at 10/s, 90 s idle, repeated: the whole series' mean is 1/s.
    rate = np.r_[np.full(10, 10.0), np.zeros(90)]
    s = A.RateSeries(np.arange(101.0), rate, np.ones(100), "test")
    assert s.mean_rps == pytest.approx(1.0)
    # 500 requests at 50/s span 10 s: only the busy part is used, so it is scaled x5
    # (scaling the whole series' mean would give x50 and 500 req/s).
    t, scale = A.draw(s, 500, seed=1, qps=50.0)
    assert scale == pytest.approx(5.0)
    assert abs(_mean_rate(t) / 50.0 - 1) < 0.02
    # Busy 10 s of every 30: 1,750 requests at 50/s need 35 s, which from 0 ends busy
    # (30-39 s); the arrivals fill exactly that span, idle gaps included.
    rate = np.tile(np.r_[np.full(10, 10.0), np.zeros(20)], 3)
    s = A.RateSeries(np.arange(91.0), rate, np.ones(90), "test")
    t, _ = A.draw(s, 1750, seed=1, qps=50.0)
    assert len(t) == 1750 and abs(_mean_rate(t) / 50.0 - 1) < 0.02
    assert not ((t >= 10) & (t < 30)).any()  # the idle part stays idle


def test_csv_kind_reads_gzip_and_a_utf8_bom(tmp_path: Path) -> None:
    text = "user,item,ts\n1,2,3\n1,3,4\n2,3,5\n"
    plain = tmp_path / "log.csv"
    plain.write_text(text)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    gz = tmp_path / "log.csv.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    cfg = IngestConfig("csv", user_col="user", item_col="item", ts_col="ts")
    want, _ = ingest(plain, cfg)
    for p in (bom, gz):
        got, _ = ingest(p, cfg)
        assert got.equals(want), p.name


def test_binary_input_and_header_only_arrivals_are_one_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.csv"
    junk.write_bytes(bytes(range(256)) * 4)
    out = tmp_path / "t.parquet"
    for kind in ("taobao", "movielens"):
        with pytest.raises(IngestError, match="is not a text log") as ei:
            ingest_to_file(junk, out, IngestConfig(kind))
        assert "\n" not in ei.value.one_line()
    src = tmp_path / "u.data"
    src.write_text(UDATA)
    arr = tmp_path / "arr.csv"
    arr.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(IngestError, match="has a header but no arrivals"):
        ingest_to_file(src, out, IngestConfig("movielens", arrivals=arr, qps=10.0))
    assert not out.exists()
