"""`inspect`: every figure against an independent pure-Python/numpy computation.

Traces: the conftest ``small_table`` (with explicit candidates), synth traces
of every regime, and a real-derived trace built here from MovieLens 100K (one
request per rating, in timestamp order).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import small_table

from helm_plan import synth, trace
from helm_plan.errors import TraceError
from helm_plan.inspect import SCHEMA_VERSION, ZIPF_MIN_COUNT, TraceStats, inspect_trace
from helm_plan.profiles import ModelProfile, load_model

KEYS = [
    "schema_version",
    "trace",
    "requests",
    "users",
    "items",
    "history_tokens",
    "duration_s",
    "qps_bins",
    "mean_qps",
    "peak_qps",
    "qps_cv",
    "history_len_p50",
    "history_len_p95",
    "history_len_max",
    "new_items_mean",
    "first_request_items_mean",
    "revisit_new_items_mean",
    "cold_share",
    "revisit_gap_p50_s",
    "revisit_gap_p90_s",
    "zipf_alpha",
    "zipf_fit_ranks",
    "model",
    "max_seq_len",
    "emb_footprint_bytes",
    "kv_footprint_bytes",
]


def reference(t: pa.Table, model: ModelProfile | None) -> dict:
    """The documented figures, computed with plain Python loops and numpy."""
    ts = t.column("ts_s").to_pylist()
    users = t.column("user_id").to_pylist()
    new = t.column("new_items").to_pylist()
    cands = t.column("candidates").to_pylist() if "candidates" in t.column_names else []
    n = len(ts)
    items = {i for row in new for i in row} | {i for row in cands for i in row}
    counts = np.bincount(np.floor(np.array(ts)).astype(int), minlength=int(math.floor(max(ts))) + 1)
    hist, last, final = [], {}, Counter()
    gaps, first_k, rev_k = [], [], []
    for u, x, row in zip(users, ts, new, strict=True):
        final[u] += len(row)
        hist.append(final[u])
        if u in last:
            gaps.append(x - last[u])
            rev_k.append(len(row))
        else:
            first_k.append(len(row))
        last[u] = x
    freq = sorted(Counter(i for row in new for i in row).values(), reverse=True)
    freq = [c for c in freq if c >= ZIPF_MIN_COUNT]
    rank = np.arange(1, len(freq) + 1)
    alpha = None
    if len(freq) >= 3:
        slope = np.polyfit(np.log(rank), np.log(freq), 1, w=1 / np.sqrt(rank))[0]
        alpha = -slope
    out = {
        "requests": n,
        "users": len(set(users)),
        "items": len(items),
        "history_tokens": sum(len(r) for r in new),
        "duration_s": max(ts) - min(ts),
        "qps_bins": len(counts),
        "mean_qps": counts.mean(),
        "peak_qps": int(counts.max()),
        "qps_cv": counts.std() / counts.mean(),
        "history_len_p50": np.percentile(hist, 50),
        "history_len_p95": np.percentile(hist, 95),
        "history_len_max": max(hist),
        "new_items_mean": np.mean([len(r) for r in new]),
        "first_request_items_mean": np.mean(first_k),
        "revisit_new_items_mean": np.mean(rev_k) if rev_k else None,
        "cold_share": len(set(users)) / n,
        "revisit_gap_p50_s": np.percentile(gaps, 50) if gaps else None,
        "revisit_gap_p90_s": np.percentile(gaps, 90) if gaps else None,
        "zipf_alpha": alpha,
        "zipf_fit_ranks": len(freq),
    }
    if model is not None:
        out["emb_footprint_bytes"] = len(items) * model.token_lookup_bytes
        out["kv_footprint_bytes"] = (
            sum(min(h, model.max_seq_len) for h in final.values()) * model.kv_bytes_per_token
        )
    return out


def check(stats: TraceStats, ref: dict) -> None:
    got = stats.to_json()
    for k, want in ref.items():
        if want is None or isinstance(want, int):
            assert got[k] == want, k
        else:
            assert got[k] == pytest.approx(float(want), rel=1e-9, abs=1e-9), k


def _write(t: pa.Table, p: Path) -> Path:
    trace.write(t, p, {"source": "test"})
    return p


@pytest.fixture(scope="module")
def movielens_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, Path]:
    """MovieLens 100K as a canonical trace: one request per rating, ordered by timestamp."""
    from conftest import require_datasets

    src = require_datasets() / "movielens-100k.inter.tsv"
    raw = np.loadtxt(src, skiprows=1, dtype=np.int64, usecols=(0, 1, 3))
    order = np.argsort(raw[:, 2], kind="stable")
    u, item, stamp = raw[order, 0], raw[order, 1], raw[order, 2]
    ts = (stamp - stamp[0]) / 1000.0  # re-timed: 1000x serving speed-up
    n = len(ts)
    t = trace.make_table(ts, u, np.arange(n + 1), item, np.full(n, 10))
    return t, _write(t, tmp_path_factory.mktemp("ml") / "ml.parquet")


def test_small_table_with_candidates_and_model(tmp_path: Path) -> None:
    t = small_table(n=600, seed=3)
    p = _write(t, tmp_path / "s.parquet")
    model = load_model("gr-small")
    check(inspect_trace(p, model), reference(t, model))


@pytest.mark.parametrize("regime", ["steady", "trend", "burst", "mixed"])
def test_synth_traces(tmp_path: Path, regime: str) -> None:
    cfg = synth.SynthConfig(
        regime=regime, qps=40.0, duration_s=90.0, users=400, items=5000, max_seq_len=300, seed=5
    )
    p = tmp_path / "t.parquet"
    synth.write(cfg, p)
    model = load_model("gr-large")
    check(inspect_trace(p, model), reference(trace.read(p), model))


def test_movielens_derived_trace(movielens_trace: tuple[pa.Table, Path]) -> None:
    t, p = movielens_trace
    model = load_model("gr-small")
    st = inspect_trace(p, model)
    check(st, reference(t, model))
    assert st.requests == 100_000 and st.users == 943 and st.items == 1682
    assert 0.3 < st.zipf_alpha < 2.0


def test_json_schema_is_stable(small_trace: Path) -> None:
    obj = inspect_trace(small_trace).to_json()
    assert list(obj) == KEYS
    assert obj["schema_version"] == SCHEMA_VERSION == "1"
    assert obj["model"] is None and obj["emb_footprint_bytes"] is None
    json.loads(json.dumps(obj))  # JSON-serialisable as is


def test_bins_start_at_zero_and_include_empty_seconds(tmp_path: Path) -> None:
    ts = np.array([2.5, 2.6, 7.0, 7.1, 7.2])
    t = trace.make_table(ts, [0, 1, 0, 2, 1], np.arange(6), [1, 2, 1, 3, 2], np.zeros(5))
    st = inspect_trace(_write(t, tmp_path / "g.parquet"))
    counts = np.array([0, 0, 2, 0, 0, 0, 0, 3])
    assert st.qps_bins == 8 and st.peak_qps == 3
    assert st.mean_qps == pytest.approx(counts.mean())
    assert st.qps_cv == pytest.approx(counts.std() / counts.mean())
    assert st.duration_s == pytest.approx(4.7)
    assert st.revisit_gap_p50_s == pytest.approx(np.percentile([4.5, 4.6], 50))
    assert st.zipf_alpha is None and st.zipf_fit_ranks == 0


def test_small_memory_limit_same_answer(tmp_path: Path) -> None:
    cfg = synth.SynthConfig(qps=500.0, duration_s=200.0, items=100_000, seed=8)
    p = tmp_path / "m.parquet"
    synth.write(cfg, p)
    a = inspect_trace(p, memory_limit="64MB", threads=1).to_json()
    b = inspect_trace(p).to_json()
    assert a.keys() == b.keys()
    for k, v in b.items():  # parallel float sums may differ in the last bits
        assert a[k] == (pytest.approx(v, rel=1e-12) if isinstance(v, float) else v), k


def test_progress_callback(small_trace: Path) -> None:
    seen: list[tuple[int, int]] = []
    inspect_trace(small_trace, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not found"):
        inspect_trace(tmp_path / "missing.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(TraceError, match="cannot read"):
        inspect_trace(junk)
    nocol = tmp_path / "nocol.parquet"
    pq.write_table(pa.table({"ts_s": [0.0], "user_id": [1]}), nocol)
    with pytest.raises(TraceError, match="missing column 'new_items'"):
        inspect_trace(nocol)
    empty = tmp_path / "empty.parquet"
    pq.write_table(trace.empty_table(), empty)
    with pytest.raises(TraceError, match="empty"):
        inspect_trace(empty)
    badtype = tmp_path / "badtype.parquet"
    pq.write_table(
        pa.table({"ts_s": [0.0], "user_id": ["a"], "new_items": [[1]], "n_candidates": [1]}),
        badtype,
    )
    with pytest.raises(TraceError, match="column 'user_id' has type string"):
        inspect_trace(badtype)


def test_unsorted_trace_is_rejected_with_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import small_table

    from helm_plan.errors import TraceError
    from helm_plan.inspect import inspect_trace

    t = small_table(50)
    ts = t.column("ts_s").to_numpy().copy()
    ts[30], ts[31] = ts[31], ts[30]
    p = tmp_path / "unsorted.parquet"
    pq.write_table(t.set_column(0, "ts_s", pa.array(ts)), p)
    with pytest.raises(TraceError, match="row 31, column 'ts_s': timestamps not sorted"):
        inspect_trace(p)


BAD_TRACES = {
    "null user_id": {"user_id": [0, None, 2]},
    "negative item id": {"new_items": [[1], [2, -5], [3]]},
    "candidates length": {"candidates": [[1, 2], [3], [4, 5]]},
    "negative ts_s": {"ts_s": [-1.0, 0.5, 1.0]},
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_inspect_rejects_exactly_what_every_other_command_rejects(tmp_path: Path, case: str):
    cols = {"ts_s": [0.0, 0.5, 1.0], "user_id": [0, 1, 2], "new_items": [[1], [2], [3]],
            "n_candidates": [2, 2, 2], "candidates": [[1, 2], [3, 1], [2, 3]]}  # fmt: skip
    cols.update(BAD_TRACES[case])
    p = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table(
            {
                "ts_s": pa.array(cols["ts_s"], pa.float64()),
                "user_id": pa.array(cols["user_id"], pa.int64()),
                "new_items": pa.array(cols["new_items"], pa.list_(pa.int64())),
                "n_candidates": pa.array(cols["n_candidates"], pa.int32()),
                "candidates": pa.array(cols["candidates"], pa.list_(pa.int64())),
            }
        ),
        p,
    )
    with pytest.raises(TraceError) as by_read:
        trace.read(p)
    with pytest.raises(TraceError) as by_inspect:
        inspect_trace(p)
    assert by_inspect.value.one_line() == by_read.value.one_line()


def test_zipf_alpha_is_bit_identical_across_runs_and_threads(tmp_path: Path) -> None:
    p = tmp_path / "s.parquet"
    synth.write(synth.SynthConfig(qps=200.0, duration_s=60.0, items=20_000, seed=5), p)
    alphas = {inspect_trace(p, threads=k).zipf_alpha for k in (1, 4, 4, 2)}
    assert len(alphas) == 1
    # and it is the documented weighted least-squares fit, computed independently
    t = trace.read(p)
    items = np.concatenate(t.column("new_items").to_numpy(zero_copy_only=False))
    c = np.sort(np.bincount(items)[np.bincount(items) >= ZIPF_MIN_COUNT])[::-1].astype(float)
    rk = np.arange(1, len(c) + 1, dtype=float)
    slope = np.polyfit(np.log(rk), np.log(c), 1, w=np.sqrt(1 / rk))[0]
    assert alphas.pop() == pytest.approx(-slope, rel=1e-9)
