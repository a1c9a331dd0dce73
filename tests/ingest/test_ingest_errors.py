"""Malformed inputs: one precise message (file, line, fix) and no output left behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helm_plan.errors import ConfigError, HelmPlanError, IngestError, InputFileError
from helm_plan.ingest import IngestConfig, ingest_to_file, parse_column_map

UDATA = (
    "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n244\t51\t2\t880606923\n"
)
TAOBAO = "1,2268318,2520377,pv,1511544070\n1,2333346,2520771,pv,1511561733\n2,2576651,149192,buy,1511572885\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


CASES = [
    # (kind, file name, content, extra config, error type, message pattern)
    (
        "movielens",
        "u.data",
        UDATA + "5\t7\n",
        {},
        IngestError,
        r"u\.data line 5: truncated line: 2 of 4 tab-separated fields",
    ),
    (
        "movielens",
        "u.data",
        UDATA + "5 7 3 881250949\n",
        {},
        IngestError,
        r"u\.data line 5: wrong delimiter: expected 4 tab-separated fields .* looks space-separated",
    ),
    (
        "taobao",
        "ub.csv",
        TAOBAO.replace(",", ";"),
        {},
        IngestError,
        r"ub\.csv line 1: wrong delimiter: expected 5 comma-separated fields .* looks semicolon-separated",
    ),
    (
        "taobao",
        "ub.csv",
        TAOBAO + "abc,1,1,pv,1511572885\n",
        {},
        IngestError,
        r"ub\.csv line 4: non-numeric user id 'abc'",
    ),
    (
        "taobao",
        "ub.csv",
        TAOBAO + "3,1,1,pv,yesterday\n",
        {},
        IngestError,
        r"ub\.csv line 4: non-numeric timestamp 'yesterday'",
    ),
    (
        "movielens",
        "u.data",
        UDATA.replace("186\t302", "-186\t302"),
        {},
        IngestError,
        r"u\.data line 2: negative user id -186",
    ),
    (
        "amazon",
        "seq.txt",
        "1 5\n1 6\n2\n",
        {},
        IngestError,
        r"seq\.txt line 3: truncated line: 1 of 2 space-separated fields",
    ),
    (
        "amazon",
        "seq.txt",
        "1 5\n1 x6\n",
        {},
        IngestError,
        r"seq\.txt line 2: non-numeric item id 'x6'",
    ),
    ("movielens", "empty.dat", "", {}, IngestError, r"empty\.dat is empty \(0 bytes\)"),
    (
        "movielens",
        "blank.dat",
        "\n  \n\n",
        {},
        IngestError,
        r"blank\.dat is empty \(no data lines\)",
    ),
    (
        "movielens",
        "x.inter",
        "user_id:token\titem_id:token\trating:float\ttimestamp:float\n",
        {},
        IngestError,
        r"x\.inter has a header but no data rows",
    ),
    (
        "movielens",
        "odd.txt",
        "hello world\n",
        {},
        IngestError,
        r"odd\.txt line 1: not a MovieLens ratings file",
    ),
    (
        "mooncake",
        "m.jsonl",
        '{"timestamp": 0, "input_length": 10, "hash_ids": [1]}\n{"timestamp": 5, "input_le\n',
        {},
        IngestError,
        r"m\.jsonl line 2: invalid JSON",
    ),
    (
        "mooncake",
        "m.jsonl",
        '{"timestamp": 0, "input_length": 10}\n',
        {},
        IngestError,
        r"m\.jsonl: no 'hash_ids' field",
    ),
    (
        "csv",
        "log.csv",
        "a,b\n1,2\n",
        {"user_col": "user", "item_col": "b"},
        IngestError,
        r"log\.csv line 1: no column 'user' \(columns: a, b\)",
    ),
    (
        "csv",
        "log.csv",
        "a,b\n1,2\n3,z\n",
        {"user_col": "a", "item_col": "b"},
        IngestError,
        r"log\.csv line 3: non-numeric item id \(column 'b'\) 'z'",
    ),
]


@pytest.mark.parametrize(("kind", "name", "content", "extra", "etype", "pattern"), CASES)
def test_malformed_input_message_and_no_output(
    tmp_path: Path, kind: str, name: str, content: str, extra: dict, etype: type, pattern: str
) -> None:
    src = _write(tmp_path, name, content)
    out = tmp_path / "out" / "trace.parquet"
    with pytest.raises(etype) as ei:
        ingest_to_file(src, out, IngestConfig(kind, **extra))
    assert re.search(pattern, str(ei.value)), str(ei.value)
    assert ei.value.hint, "every input error carries a fix"
    assert "\n" not in ei.value.one_line()
    assert not out.exists()
    assert not list(out.parent.glob("*")) if out.parent.exists() else True


def test_unreadable_files(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    with pytest.raises(InputFileError, match=r"file .*nope\.dat not found"):
        ingest_to_file(tmp_path / "nope.dat", out, IngestConfig("movielens"))
    with pytest.raises(InputFileError, match=r"is a folder, not a file"):
        ingest_to_file(tmp_path, out, IngestConfig("movielens"))
    garbage = tmp_path / "g.bin"
    garbage.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(HelmPlanError):
        ingest_to_file(garbage, out, IngestConfig("taobao"))
    assert not out.exists()


def test_unknown_kind_and_bad_options() -> None:
    with pytest.raises(IngestError, match=r"unknown kind 'netflix'") as ei:
        IngestConfig("netflix")
    assert ei.value.hint == "use one of movielens, amazon, taobao, mooncake, csv"
    with pytest.raises(ConfigError, match=r"session_gap_s must be positive, got -3"):
        IngestConfig("movielens", session_gap_s=-3)
    with pytest.raises(ConfigError, match=r"replicate must be >= 1, got 0"):
        IngestConfig("movielens", replicate=0)
    with pytest.raises(ConfigError, match=r"unknown regime 'spiky'"):
        IngestConfig("movielens", regime="spiky")
    with pytest.raises(ConfigError, match=r"either arrivals or regime"):
        IngestConfig("movielens", regime="burst", arrivals=Path("a.csv"))
    with pytest.raises(ConfigError, match=r"csv kind needs a column map"):
        IngestConfig("csv")
    with pytest.raises(ConfigError, match=r"unknown taobao behavior 'click'"):
        IngestConfig("taobao", behaviors=("pv", "click"))
    with pytest.raises(ConfigError, match=r"unknown column role 'time'"):
        parse_column_map("user=a,item=b,time=c")
    assert parse_column_map("user=a, item=b ,ts=c") == {
        "user_col": "a",
        "item_col": "b",
        "ts_col": "c",
    }


def test_bad_arrivals_file(tmp_path: Path) -> None:
    src = _write(tmp_path, "u.data", UDATA)
    bad = _write(
        tmp_path,
        "arr.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,1,1\nnot a time,1,1\n",
    )
    out = tmp_path / "t.parquet"
    with pytest.raises(IngestError, match=r"arr\.csv line 3: unparseable TIMESTAMP 'not a time'"):
        ingest_to_file(src, out, IngestConfig("movielens", arrivals=bad, qps=10.0))
    assert not out.exists()
