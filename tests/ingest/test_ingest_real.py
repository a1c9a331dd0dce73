"""Every converter on the real public logs, against independent plain-Python computations."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from helm_plan import trace
from helm_plan.ingest import IngestConfig, arrivals, ingest, ingest_to_file

GAP_S = 1800.0


def plain_sessions(
    rows: list[tuple[int, int, float, int]], gap_s: float
) -> list[tuple[int, tuple]]:
    """(user, items) per request from (user, item, ts, line) rows, written with dicts and sorts.

    Per user, rows ordered by (ts, line); a new session starts when the gap to the
    previous row exceeds gap_s. A request arrives at its last row; requests are
    ordered by (arrival, smallest line).
    """
    by_user: dict[int, list] = defaultdict(list)
    for u, i, t, line in rows:
        by_user[u].append((t, line, i))
    reqs = []
    for u, evs in by_user.items():
        evs.sort()
        cur = [evs[0]]
        for prev, ev in zip(evs, evs[1:], strict=False):
            if ev[0] - prev[0] > gap_s:
                reqs.append((cur[-1][0], min(e[1] for e in cur), u, tuple(e[2] for e in cur)))
                cur = []
            cur.append(ev)
        reqs.append((cur[-1][0], min(e[1] for e in cur), u, tuple(e[2] for e in cur)))
    reqs.sort()
    return [(u, items) for _, _, u, items in reqs]


def trace_requests(table: pa.Table) -> list[tuple[int, tuple]]:
    users = table.column("user_id").to_pylist()
    items = table.column("new_items").to_pylist()
    return [(u, tuple(i)) for u, i in zip(users, items, strict=True)]


def check_counts(table: pa.Table, report, expected: list[tuple[int, tuple]]) -> None:
    assert report.requests == len(expected) == table.num_rows
    assert report.users == len({u for u, _ in expected})
    assert report.items == len({i for _, its in expected for i in its})
    assert report.new_items == sum(len(its) for _, its in expected)
    ts = table.column("ts_s").to_numpy()
    assert np.all(np.diff(ts) >= 0)


def test_movielens_recbole_inter(datasets: Path, tmp_path: Path) -> None:
    rows = []
    with open(datasets / "movielens-100k.inter.tsv") as fh:
        reader = csv.reader(fh, delimiter="\t")
        next(reader)
        for line, r in enumerate(reader, start=2):
            rows.append((int(r[0]), int(r[1]), float(r[3]), line))
    expected = plain_sessions(rows, GAP_S)
    out = tmp_path / "ml.parquet"
    report = ingest_to_file(datasets / "movielens-100k.inter.tsv", out, IngestConfig("movielens"))
    table = trace.read(out)
    assert report.variant == "recbole-inter" and report.rows_read == 100_000
    assert report.users == 943 and report.items == 1682  # README figures
    check_counts(table, report, expected)
    assert trace_requests(table) == expected
    assert set(table.column("n_candidates").to_pylist()) == {512}
    prov = trace.provenance(out)
    assert prov["converter"].startswith("helm_plan.ingest.movielens")
    assert prov["seed"] == 0 and prov["schema_version"] == trace.SCHEMA_VERSION
    # default re-timing: steady at 100 req/s
    ts = table.column("ts_s").to_numpy()
    assert abs(len(ts) / ts[-1] - 100.0) < 5.0


def test_amazon_pairs(datasets: Path) -> None:
    per_user: dict[int, list[int]] = defaultdict(list)
    n = 0
    with open(datasets / "amazon-video-games.seq.txt") as fh:
        for line in fh:
            u, i = line.split()
            per_user[int(u)].append(int(i))
            n += 1
    table, report = ingest(datasets / "amazon-video-games.seq.txt", IngestConfig("amazon"))
    assert report.variant == "pairs"
    assert (report.rows_read, report.requests, report.new_items) == (n, n, n) == (287_107,) * 3
    assert report.users == len(per_user) == 31_013
    assert report.items == len({i for v in per_user.values() for i in v}) == 23_715
    got: dict[int, list[int]] = defaultdict(list)
    for u, items in trace_requests(table):
        got[u].extend(items)
    assert got == per_user  # every user's order is the file's order
    # users are interleaved, not played back one block after another
    users = table.column("user_id").to_numpy()
    assert np.count_nonzero(np.diff(users)) > 0.8 * n


def test_taobao_userbehavior(datasets: Path) -> None:
    rows, behaviors, kept = [], defaultdict(int), []
    with open(datasets / "taobao-userbehavior-sample.csv") as fh:
        for line, r in enumerate(csv.reader(fh), start=1):
            behaviors[r[3]] += 1
            rows.append((int(r[0]), int(r[1]), float(r[4]), line))
            if r[3] == "buy":
                kept.append(rows[-1])
    assert len({(u, i, t) for u, i, t, _ in rows}) == len(rows)  # no duplicates to drop
    expected = plain_sessions(rows, GAP_S)
    table, report = ingest(datasets / "taobao-userbehavior-sample.csv", IngestConfig("taobao"))
    assert report.rows_read == 4321 and report.rows_dropped == 0
    check_counts(table, report, expected)
    assert trace_requests(table) == expected
    # keeping only purchases drops the other behaviours, counted per reason
    table_b, rep_b = ingest(
        datasets / "taobao-userbehavior-sample.csv", IngestConfig("taobao", behaviors=("buy",))
    )
    assert dict(rep_b.dropped) == {
        f"behavior {b!r} not kept": c for b, c in behaviors.items() if b != "buy"
    }
    assert trace_requests(table_b) == plain_sessions(kept, GAP_S)


def mooncake_plain(path: Path, block: int = 512) -> list[tuple[int, tuple]]:
    """Conversations by the documented rule, with tuple-prefix dictionaries instead of a trie."""
    seen_prefixes: set[tuple] = set()
    ends: dict[tuple, int] = {}  # a prefix a later request may extend -> request index
    conv: list[int] = []
    out = []
    with open(path) as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    for idx, r in enumerate(recs):
        h = tuple(r["hash_ids"])
        match, depth = -1, 0
        for k in range(len(h), 0, -1):
            if h[:k] in ends:
                match, depth = ends[h[:k]], k
                break
        shared = max((k for k in range(1, len(h) + 1) if h[:k] in seen_prefixes), default=0)
        conv.append(conv[match] if match >= 0 else idx)
        out.append((conv[-1], h[depth:]))
        full = len(h) if r["input_length"] >= len(h) * block else len(h) - 1
        for k in (full, len(h)):
            if k > shared:
                ends[h[:k]] = idx
        seen_prefixes.update(h[:k] for k in range(1, len(h) + 1))
    dense = {c: i for i, c in enumerate(sorted(set(conv)))}
    return [(dense[c], items) for c, items in out]


def test_mooncake_conversations(datasets: Path) -> None:
    path = datasets / "mooncake-conversation.jsonl"
    expected = mooncake_plain(path)
    table, report = ingest(path, IngestConfig("mooncake"))
    check_counts(table, report, expected)
    assert trace_requests(table) == expected
    with open(path) as fh:
        recs = [json.loads(line) for line in fh]
    # items are the hash-block ids; every id of the log appears
    assert report.items == len({x for r in recs for x in r["hash_ids"]})
    # the literal rule (full hash_ids extended) is a subset of the continuations found
    strict = 0
    ends: set[tuple] = set()
    for r in recs:
        h = tuple(r["hash_ids"])
        strict += any(h[:k] in ends for k in range(1, len(h) + 1))
        ends.add(h)
    assert report.requests - report.users >= strict > 0
    # timestamps kept: ms -> s from start
    ts = table.column("ts_s").to_numpy()
    assert (
        ts[0] == 0.0 and abs(ts[-1] - (recs[-1]["timestamp"] - recs[0]["timestamp"]) / 1000) < 1e-9
    )


def azure_seconds(path: Path) -> np.ndarray:
    with open(path) as fh:
        reader = csv.reader(fh)
        next(reader)
        stamps = [datetime.fromisoformat(r[0][:26]) for r in reader]
    t0 = stamps[0]
    return np.array([(s - t0).total_seconds() for s in stamps])


def test_azure_arrivals_scaled(datasets: Path) -> None:
    path = datasets / "azure-llm-2023-code.csv"
    secs = azure_seconds(path)
    native = len(secs) / (np.floor(secs.max()) + 1)
    series = arrivals.load(path)
    assert abs(series.mean_rps - native) < 1e-9
    # scaled x10 over the trace's own span: per-minute counts follow the original's
    t, scale = arrivals.draw(series, 10 * len(secs), seed=3, qps=10 * native)
    assert abs(scale - 10) < 1e-9 and np.all(np.diff(t) >= 0)
    span = secs.max()
    t = t[t < span]
    got = np.bincount((t // 60).astype(int), minlength=int(span // 60) + 1)
    want = np.bincount((secs // 60).astype(int), minlength=int(span // 60) + 1)
    assert abs(got.sum() / want.sum() - 10) < 1.0
    assert np.corrcoef(got, want)[0, 1] > 0.95
    # and burstiness survives: most 1 s bins stay empty
    assert np.mean(np.bincount(t.astype(int)) == 0) > 0.5


def test_ingest_with_azure_arrivals(datasets: Path) -> None:
    cfg = IngestConfig("movielens", arrivals=datasets / "azure-llm-2023-code.csv", qps=50.0)
    table, report = ingest(datasets / "movielens-100k.inter.tsv", cfg)
    plain, _ = ingest(datasets / "movielens-100k.inter.tsv", IngestConfig("movielens"))
    assert trace_requests(table) == trace_requests(plain)  # order unchanged, only times
    assert "azure" in report.timing and "(seed 0)" in report.timing
    # --qps is the mean rate of the written trace, bursts and idle gaps included
    ts = table.column("ts_s").to_numpy()
    assert abs(len(ts) / (ts[-1] - ts[0]) / 50.0 - 1) < 0.02
    assert abs(report.qps / 50.0 - 1) < 0.02


def servegen_rates(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    total = None
    for f in sorted(folder.glob("*.csv")):
        with open(f) as fh:
            rows = [r for r in csv.reader(fh) if r]
        starts = np.array([float(r[0]) for r in rows])
        rates = np.array([float(r[1]) for r in rows])
        total = rates if total is None else total + rates
    return starts, total


def test_servegen_folder(datasets: Path) -> None:
    folder = datasets / "servegen-m-large"
    starts, rates = servegen_rates(folder)
    series = arrivals.load(folder)
    assert abs(series.mean_rps - rates.mean()) < 1e-6 * rates.mean()
    assert series.duration_s == starts[-1] - starts[0] + 600
    # a week-and-more series drawn at a low rate keeps its daily cycle
    n = 300_000
    t, _ = arrivals.draw(series, n, seed=5, qps=n / series.duration_s)
    assert len(t) == n
    got = np.bincount((t // 21600).astype(int), minlength=56)[:56]
    want = np.add.reduceat(rates, np.arange(0, len(rates), 36))[:56]
    assert np.corrcoef(got, want)[0, 1] > 0.75
    assert abs(t[-1] / series.duration_s - 1) < 0.05


def test_series_cv_is_honoured() -> None:
    """Inside windows the gaps have the series' CV, and counts its index of dispersion."""
    for cv in (0.3, 1.0, 3.0):
        s = arrivals.RateSeries(np.arange(2001.0) * 10, np.full(2000, 5.0), np.full(2000, cv), "x")
        t, _ = arrivals.draw(s, 100_000, seed=1, qps=5.0)
        counts = np.bincount((t // 10).astype(int))[:1900]
        gaps = np.diff(t)
        assert abs(counts.mean() / 50 - 1) < 0.03
        assert abs(gaps.std() / gaps.mean() / cv - 1) < 0.1
        assert abs(counts.var() / counts.mean() / cv**2 - 1) < 0.25


def test_servegen_single_file_and_mooncake_arrivals(datasets: Path) -> None:
    one = datasets / "servegen-m-large" / "chunk-0-trace.csv"
    s = arrivals.load(one)
    _, rates = servegen_rates_file(one)
    assert abs(s.mean_rps - rates.mean()) < 1e-9
    m = arrivals.load(datasets / "mooncake-conversation.jsonl")
    with open(datasets / "mooncake-conversation.jsonl") as fh:
        ms = [json.loads(line)["timestamp"] for line in fh]
    assert abs(m.mean_rps - len(ms) / (np.floor((ms[-1] - ms[0]) / 1000) + 1)) < 1e-9


def servegen_rates_file(f: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(f) as fh:
        rows = [r for r in csv.reader(fh) if r]
    return np.array([float(r[0]) for r in rows]), np.array([float(r[1]) for r in rows])
