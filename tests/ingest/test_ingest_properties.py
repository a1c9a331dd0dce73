"""Property tests: ingest preserves interactions and per-user order; traces round-trip."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helm_plan import trace
from helm_plan.ingest import IngestConfig, ingest, ingest_to_file

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

logs = st.lists(
    st.tuples(
        st.integers(0, 6),  # user
        st.integers(0, 30),  # item
        st.integers(1, 20_000),  # unix-ish seconds: gaps both under and over the session gap
    ),
    min_size=1,
    max_size=60,
)


def _write_csv(path: Path, rows: list[tuple[int, int, int]], with_ts: bool) -> None:
    head = "uid,iid,t\n" if with_ts else "uid,iid\n"
    body = "".join(f"{u},{i},{t}\n" if with_ts else f"{u},{i}\n" for u, i, t in rows)
    path.write_text(head + body)


def _per_user(users, lists) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for u, items in zip(users, lists, strict=True):
        out[u].extend(items)
    return out


@SETTINGS
@given(rows=logs, gap=st.sampled_from([1.0, 600.0, 1800.0]), seed=st.integers(0, 5))
def test_timestamped_log_preserves_interactions(
    tmp_path: Path, rows, gap: float, seed: int
) -> None:
    p = tmp_path / "log.csv"
    _write_csv(p, rows, with_ts=True)
    cfg = IngestConfig(
        "csv",
        user_col="uid",
        item_col="iid",
        ts_col="t",
        session_gap_s=gap,
        drop_duplicates=False,
        regime="burst",
        qps=50.0,
        seed=seed,
    )
    table, rep = ingest(p, cfg)
    users = table.column("user_id").to_pylist()
    lists = table.column("new_items").to_pylist()
    # the multiset of (user, item) is preserved
    assert Counter((u, i) for u, items in zip(users, lists, strict=True) for i in items) == Counter(
        (u, i) for u, i, _ in rows
    )
    # each user's items follow time order (file order on ties)
    want: dict[int, list[int]] = defaultdict(list)
    for _, _k, u, i in sorted((t, k, u, i) for k, (u, i, t) in enumerate(rows)):
        want[u].append(i)
    assert _per_user(users, lists) == want
    # request count equals the number of gaps wider than the session gap, plus one per user
    n_req = 0
    for u in want:
        ts = sorted(t for uu, _, t in rows if uu == u)
        n_req += 1 + sum(b - a > gap for a, b in zip(ts, ts[1:], strict=False))
    assert rep.requests == n_req == table.num_rows
    assert np.all(np.diff(table.column("ts_s").to_numpy()) >= 0)


@SETTINGS
@given(rows=logs, k=st.integers(1, 3), seed=st.integers(0, 5))
def test_order_only_log_preserves_per_user_order(tmp_path: Path, rows, k: int, seed: int) -> None:
    p = tmp_path / "log.csv"
    _write_csv(p, rows, with_ts=False)
    table, rep = ingest(
        p, IngestConfig("csv", user_col="uid", item_col="iid", replicate=k, seed=seed)
    )
    stride = max(u for u, _, _ in rows) + 1
    got = _per_user(table.column("user_id").to_pylist(), table.column("new_items").to_pylist())
    want: dict[int, list[int]] = defaultdict(list)
    for u, i, _ in rows:
        for c in range(k):
            want[u + c * stride].append(i)
    assert got == want
    assert rep.requests == k * len(rows) and rep.new_items == k * len(rows)


@SETTINGS
@given(
    n=st.integers(1, 50),
    seed=st.integers(0, 1000),
    with_lat=st.booleans(),
)
def test_trace_write_read_round_trip(tmp_path: Path, n: int, seed: int, with_lat: bool) -> None:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 5, n)
    off = np.concatenate([[0], np.cumsum(lens)])
    kw = {"latency_ms": rng.random(n) * 10} if with_lat else {}
    table = trace.make_table(
        np.sort(rng.random(n) * 100),
        rng.integers(0, 9, n),
        off,
        rng.integers(0, 2**40, int(off[-1])),
        rng.integers(0, 600, n),
        **kw,
    )
    out = tmp_path / "t.parquet"
    trace.write(table, out, {"source": "prop", "seed": seed})
    back = trace.read(out)
    assert back.equals(table)
    assert trace.provenance(out) == {"source": "prop", "seed": seed}


@SETTINGS
@given(rows=logs, seed=st.integers(0, 5))
def test_ingest_file_round_trip(tmp_path: Path, rows, seed: int) -> None:
    p = tmp_path / "log.csv"
    _write_csv(p, rows, with_ts=True)
    out = tmp_path / "o.parquet"
    cfg = IngestConfig("csv", user_col="uid", item_col="iid", ts_col="t", seed=seed, qps=10.0)
    rep = ingest_to_file(p, out, cfg)
    table, _ = ingest(p, cfg)  # same seed, same result
    assert trace.read(out).equals(table)
    prov = trace.provenance(out)
    assert prov["arguments"]["seed"] == seed and prov["arguments"]["ts_col"] == "t"
    assert rep.out == str(out)
