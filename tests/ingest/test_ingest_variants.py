"""Format variants inside each kind, written from the real logs into tmp_path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from helm_plan.ingest import IngestConfig, ingest

N_ROWS = 3000
RETIME = {"regime": "steady", "qps": 100.0}


def ml_rows(datasets: Path, n: int = N_ROWS) -> list[tuple[str, str, str, str]]:
    with open(datasets / "movielens-100k.inter.tsv") as fh:
        reader = csv.reader(fh, delimiter="\t")
        next(reader)
        return [tuple(r) for _, r in zip(range(n), reader, strict=False)]


def structure(table: pa.Table) -> list[tuple[int, tuple]]:
    return list(
        zip(
            table.column("user_id").to_pylist(),
            (tuple(x) for x in table.column("new_items").to_pylist()),
            strict=True,
        )
    )


@pytest.fixture
def ml_reference(datasets: Path, tmp_path: Path) -> pa.Table:
    rows = ml_rows(datasets)
    p = tmp_path / "sub.inter"
    with open(p, "w") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        fh.writelines("\t".join(r) + "\n" for r in rows)
    table, rep = ingest(p, IngestConfig("movielens", **RETIME))
    assert rep.variant == "recbole-inter" and rep.rows_read == N_ROWS
    return table


@pytest.mark.parametrize(
    ("name", "header", "sep", "variant"),
    [
        ("u.data", None, "\t", "u.data"),
        ("ratings.dat", None, "::", "ratings.dat"),
        ("ratings.csv", "UserID,MOVIEID,Rating,TimeStamp", ",", "ratings.csv"),
        ("ratings.csv", "userId,movieId,rating,timestamp", ",", "ratings.csv"),
    ],
)
def test_movielens_variants_match_recbole(
    datasets: Path,
    tmp_path: Path,
    ml_reference: pa.Table,
    name: str,
    header: str | None,
    sep: str,
    variant: str,
) -> None:
    p = tmp_path / name
    with open(p, "w") as fh:
        if header:
            fh.write(header + "\n")
        fh.writelines(sep.join(r) + "\n" for r in ml_rows(datasets))
    table, rep = ingest(p, IngestConfig("movielens", **RETIME))
    assert rep.variant == variant and rep.rows_read == N_ROWS
    assert table.equals(ml_reference)


def test_amazon_user_per_line_matches_pairs(datasets: Path, tmp_path: Path) -> None:
    pairs = (datasets / "amazon-video-games.seq.txt").read_text().splitlines()[:20_000]
    pairs_file = tmp_path / "pairs.txt"
    pairs_file.write_text("\n".join(pairs) + "\n")
    per_user: dict[str, list[str]] = {}
    for line in pairs:
        u, i = line.split()
        per_user.setdefault(u, []).append(i)
    lines_file = tmp_path / "users.txt"
    lines_file.write_text("".join(f"{u} {' '.join(v)}\n" for u, v in per_user.items()))
    a, rep_a = ingest(pairs_file, IngestConfig("amazon", seed=7))
    b, rep_b = ingest(lines_file, IngestConfig("amazon", seed=7))
    assert (rep_a.variant, rep_b.variant) == ("pairs", "user-per-line")
    assert rep_b.requests == len(pairs) and rep_b.users == len(per_user)
    assert a.equals(b)


def _review_rows(datasets: Path) -> list[tuple[str, str, int]]:
    return [
        (f"A{int(u) * 7919:X}Z", f"B{int(i):09d}", int(float(t)))
        for u, i, _, t in ml_rows(datasets)
    ]


def test_amazon_review_jsonl_csv_json(
    datasets: Path, tmp_path: Path, ml_reference: pa.Table
) -> None:
    rows = _review_rows(datasets)
    jl = tmp_path / "Video_Games_5.json"
    jl.write_text(
        "".join(
            json.dumps(
                {
                    "reviewerID": u,
                    "asin": i,
                    "overall": 5.0,
                    "unixReviewTime": t,
                    "reviewText": 'a, "b"',
                }
            )
            + "\n"
            for u, i, t in rows
        )
    )
    jl2023 = tmp_path / "Video_Games.jsonl"  # 2023 release: user_id, parent_asin, ms timestamps
    jl2023.write_text(
        "".join(
            json.dumps({"user_id": u, "parent_asin": i, "asin": "X", "timestamp": t * 1000}) + "\n"
            for u, i, t in rows
        )
    )
    arr = tmp_path / "reviews.json"
    arr.write_text(
        json.dumps([{"reviewerID": u, "asin": i, "unixReviewTime": t} for u, i, t in rows])
    )
    c = tmp_path / "reviews.csv"
    with open(c, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["user_id", "parent_asin", "rating", "text", "timestamp"])
        w.writerows([u, i, 4, "good, cheap", t] for u, i, t in rows)
    ref = structure(ml_reference)
    for path, variant in (
        (jl, "review JSONL"),
        (jl2023, "review JSONL"),
        (arr, "review JSON"),
        (c, "review CSV"),
    ):
        table, rep = ingest(path, IngestConfig("amazon", **RETIME))
        assert rep.variant == variant
        got = structure(table)
        # string ids are renumbered, so compare up to a bijection of ids
        assert len(got) == len(ref)
        umap = dict(zip((u for u, _ in got), (u for u, _ in ref), strict=True))
        imap: dict[int, int] = {}
        for (gu, gi), (ru, ri) in zip(got, ref, strict=True):
            assert umap[gu] == ru and len(gi) == len(ri)
            for x, y in zip(gi, ri, strict=True):
                assert imap.setdefault(x, y) == y
        assert len(set(imap.values())) == len(imap)
        np.testing.assert_array_equal(table.column("ts_s"), ml_reference.column("ts_s"))


def test_amazon_review_missing_timestamps_dropped(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text(
        '{"reviewerID": "A1", "asin": "B1", "unixReviewTime": 100}\n'
        '{"reviewerID": "A1", "asin": "B2"}\n'
        '{"reviewerID": "A2", "asin": "B1", "unixReviewTime": 5000}\n'
    )
    table, rep = ingest(p, IngestConfig("amazon"))
    assert rep.rows_read == 3 and dict(rep.dropped) == {"missing user, item or timestamp": 1}
    assert table.num_rows == 2


def test_csv_map_parquet_and_csv(datasets: Path, tmp_path: Path, ml_reference: pa.Table) -> None:
    rows = ml_rows(datasets)
    df = pl.DataFrame(
        {
            "ts": [float(r[3]) for r in rows],
            "visitor": [int(r[0]) for r in rows],
            "product": [int(r[1]) for r in rows],
            "extra": ["x"] * len(rows),
        }
    )
    pq_path = tmp_path / "log.parquet"
    df.write_parquet(pq_path)
    tsv_path = tmp_path / "log.tsv"
    df.write_csv(tsv_path, separator="\t")
    for p in (pq_path, tsv_path):
        cfg = IngestConfig("csv", user_col="visitor", item_col="product", ts_col="ts", **RETIME)
        table, rep = ingest(p, cfg)
        assert rep.rows_read == N_ROWS
        assert table.equals(ml_reference)
    # csv keeps the log's own timestamps when no re-timing is asked for
    table, rep = ingest(
        pq_path, IngestConfig("csv", user_col="visitor", item_col="product", ts_col="ts")
    )
    assert "kept" in rep.timing
    ts = table.column("ts_s").to_numpy()
    assert ts[0] == 0 and ts[-1] > 1e5


def test_csv_without_ts_keeps_file_order(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    users = [3, 1, 3, 2, 1, 3]
    items = [10, 11, 12, 10, 13, 14]
    p.write_text("u,i\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items, strict=True)))
    table, rep = ingest(p, IngestConfig("csv", user_col="u", item_col="i"))
    assert table.column("user_id").to_pylist() == users
    assert table.column("new_items").to_pylist() == [[i] for i in items]
    assert "steady" in rep.timing


def test_replicate_clones_users(datasets: Path, ml_reference: pa.Table, tmp_path: Path) -> None:
    p = tmp_path / "sub.inter"
    with open(p, "w") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        fh.writelines("\t".join(r) + "\n" for r in ml_rows(datasets))
    table, rep = ingest(p, IngestConfig("movielens", replicate=3, **RETIME))
    ref = structure(ml_reference)
    stride = max(u for u, _ in ref) + 1
    assert rep.requests == 3 * len(ref) and rep.users == 3 * len({u for u, _ in ref})
    got = structure(table)
    for c in range(3):
        clone = [(u - c * stride, items) for u, items in got if c * stride <= u < (c + 1) * stride]
        # each clone replays every request; each user's own order is kept
        assert sorted(clone) == sorted(ref)
        for user in {u for u, _ in ref}:
            assert [i for u, i in clone if u == user] == [i for u, i in ref if u == user]
    # clones are interleaved over the span, not appended one after another
    clone_of = np.array([u // stride for u, _ in got])
    third = len(got) // 3
    assert all(len(set(clone_of[k * third : (k + 1) * third])) == 3 for k in range(3))
