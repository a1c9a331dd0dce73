"""Synthetic generator: regimes, users, items, caps, determinism, --like, validation, CLI.

Every property is measured with independent numpy on the generated table,
not read back from the generator's internals (only the burst intervals of the
rate shape are taken from it, to know where to look).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import synth, trace
from helm_plan.errors import ConfigError
from helm_plan.synth import users as synth_users


def _arrays(t: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ts, user, per-request item counts, offsets, flat items."""
    ni = t.column("new_items").combine_chunks()
    off = ni.offsets.to_numpy().astype(np.int64)
    return (
        t.column("ts_s").to_numpy(),
        t.column("user_id").to_numpy(),
        off - off[0],
        ni.values.to_numpy()[off[0] : off[-1]],
    )


def _first_mask(user: np.ndarray) -> np.ndarray:
    """True where a request is its user's first (independent of the generator)."""
    _, first = np.unique(user, return_index=True)
    m = np.zeros(len(user), bool)
    m[first] = True
    return m


def _top_share(items: np.ndarray, k: int) -> float:
    """Share of occurrences covered by the k most frequent items."""
    _, c = np.unique(items, return_counts=True)
    c = np.sort(c)[::-1]
    return float(c[:k].sum() / c.sum())


def _top_set(items: np.ndarray, k: int) -> set[int]:
    v, c = np.unique(items, return_counts=True)
    return set(v[np.argsort(-c, kind="stable")[:k]].tolist())


def _request_items(off: np.ndarray, vals: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Flat items of the requests selected by ``mask``."""
    tok_req = np.repeat(np.arange(len(off) - 1), np.diff(off))
    return vals[mask[tok_req]]


# --- regimes -------------------------------------------------------------------------------


def test_steady_is_poisson_at_qps() -> None:
    cfg = synth.SynthConfig(regime="steady", qps=400.0, duration_s=300.0, items=50_000, seed=4)
    t = synth.synthesize(cfg)
    ts, *_ = _arrays(t)
    assert np.all(np.diff(ts) >= 0) and ts.min() >= 0 and ts.max() <= 300.0
    counts = np.bincount(np.floor(ts).astype(int), minlength=300)[:300]
    assert abs(counts.mean() - 400) < 400 * 0.02
    cv = counts.std() / counts.mean()
    assert abs(cv - 1 / math.sqrt(400)) < 0.25 / math.sqrt(400)  # Poisson: CV = 1/sqrt(rate)


def test_burst_windows_have_rate_cold_users_and_hot_items() -> None:
    cfg = synth.SynthConfig(
        regime="burst",
        qps=150.0,
        duration_s=400.0,
        items=200_000,
        zipf_alpha=0.8,
        returning_share=0.0,
        burst_new_item_share=0.0,  # hot sets only here; new items: test_bursts.py
        seed=7,
    )
    pl = synth.plan(cfg)
    t = synth.synthesize(cfg)
    ts, user, off, vals = _arrays(t)
    bursts = pl.shape.bursts
    assert len(bursts) == cfg.bursts
    inside = np.zeros(len(ts), bool)
    for a, b in bursts:
        inside |= (ts >= a) & (ts < b)
    burst_s = sum(b - a for a, b in bursts)
    rate_in = inside.sum() / burst_s
    rate_out = (~inside).sum() / (cfg.duration_s - burst_s)
    assert rate_in / rate_out == pytest.approx(cfg.burst_factor, rel=0.1)
    first = _first_mask(user)
    cold_in, cold_out = first[inside].mean(), first[~inside].mean()
    assert cold_in > 0.7 and cold_out < 0.15
    # Per burst, a few hundred items cover most of the burst's items; outside they do not.
    for a, b in bursts:
        m = (ts >= a) & (ts < b)
        share_in = _top_share(_request_items(off, vals, m), cfg.burst_hot_items)
        assert share_in > 0.8
    share_out = _top_share(_request_items(off, vals, ~inside), cfg.burst_hot_items)
    assert share_out < 0.45


def test_trend_ramps_rate_and_drifts_popularity() -> None:
    kw = {"qps": 300.0, "duration_s": 300.0, "items": 100_000, "returning_share": 0.0, "seed": 2}
    tr = synth.synthesize(synth.SynthConfig(regime="trend", **kw))
    st = synth.synthesize(synth.SynthConfig(regime="steady", **kw))

    def tenths(t: pa.Table) -> tuple[int, int, float]:
        ts, _, off, vals = _arrays(t)
        first, last = ts < 30.0, ts >= 270.0
        a = _top_set(_request_items(off, vals, first), 100)
        b = _top_set(_request_items(off, vals, last), 100)
        return int(first.sum()), int(last.sum()), len(a & b) / 100

    n0, n9, overlap = tenths(tr)
    assert n9 / n0 == pytest.approx(1.45 / 0.55, rel=0.1)  # linear ramp 0.5x -> 1.5x
    s0, s9, s_overlap = tenths(st)
    assert s9 / s0 == pytest.approx(1.0, rel=0.1)
    assert overlap < 0.1 and s_overlap > 0.5


def test_mixed_has_steady_trend_burst_thirds() -> None:
    cfg = synth.SynthConfig(
        regime="mixed", qps=200.0, duration_s=600.0, items=100_000, returning_share=0.0, seed=3
    )
    pl = synth.plan(cfg)
    third = cfg.duration_s / 3
    assert pl.shape.trend_span == pytest.approx((third, 2 * third))
    assert pl.shape.bursts and all(a >= 2 * third for a, _ in pl.shape.bursts)
    ts, user, off, vals = _arrays(synth.synthesize(cfg))
    n = [((ts >= i * third) & (ts < (i + 1) * third)).sum() for i in range(3)]
    assert n[1] == pytest.approx(n[0], rel=0.1)  # the ramp averages qps
    assert n[2] > 1.2 * n[0]  # bursts add on top
    # Popularity is stable in the first third and drifts across the second.
    q = [
        ts < 0.1 * third,
        (ts >= 0.9 * third) & (ts < third),
        (ts >= 1.9 * third) & (ts < 2 * third),
    ]
    sets = [_top_set(_request_items(off, vals, m), 100) for m in q]
    assert len(sets[0] & sets[1]) > 50 and len(sets[1] & sets[2]) < 10


# --- users and items -------------------------------------------------------------------


def test_users_items_and_history_cap() -> None:
    cfg = synth.SynthConfig(
        qps=300.0,
        duration_s=300.0,
        users=3000,
        items=20_000,
        max_seq_len=120,
        returning_share=0.0,  # new users only here; returning users: test_history.py
        seed=5,
    )
    t = synth.synthesize(cfg)
    ts, user, off, vals = _arrays(t)
    k = np.diff(off)
    first = _first_mask(user)
    # Users are numbered by first appearance and their count is about `users`.
    assert np.array_equal(user[first], np.arange(first.sum()))
    assert abs(first.sum() - 3000) < 4 * math.sqrt(3000)
    assert vals.min() >= 0 and vals.max() < cfg.items
    # History per user, accumulated independently, never exceeds the cap and reaches it.
    hist = np.zeros(user.max() + 1, np.int64)
    np.add.at(hist, user, k)
    assert hist.max() == cfg.max_seq_len
    assert (hist == cfg.max_seq_len).sum() > 10
    # Revisits grow by a few items (geometric, mean new_items_mean, before the cap).
    running = np.zeros_like(hist)
    below = np.zeros(len(user), bool)
    for i in range(len(user)):  # reference loop over 90k rows (test only)
        below[i] = running[user[i]] + 20 < cfg.max_seq_len
        running[user[i]] += k[i]
    rev = ~first & below
    assert k[rev].mean() == pytest.approx(cfg.new_items_mean, rel=0.05)
    # First requests: 1 + rounded lognormal initial history (mean 64, sigma 1) capped at 120.
    x = np.random.default_rng(123).lognormal(math.log(63.0) - 0.5, 1.0, size=1_000_000)
    assert k[first].mean() == pytest.approx(np.minimum(1 + np.round(x), 120).mean(), rel=0.05)
    # Heavy-tailed revisit gaps: the 99th percentile is far above the median.
    order = np.lexsort((np.arange(len(user)), user))
    same = user[order][1:] == user[order][:-1]
    gaps = np.diff(ts[order])[same]
    p50, p99 = np.percentile(gaps, [50, 99])
    assert p99 > 10 * p50


def test_zipf_ranks_match_exact_pmf() -> None:
    n, alpha = 40, 1.1
    rng = np.random.default_rng(0)
    r = synth.zipf_ranks(rng.random(400_000), n, alpha)
    emp = np.bincount(r, minlength=n) / len(r)
    k = np.arange(1, n + 1)
    e = 1 - alpha
    mass = ((k + 0.5) ** e - (k - 0.5) ** e) / e
    pmf = mass / mass.sum()
    assert np.abs(emp - pmf).max() < 0.004
    # alpha = 1 (log form) and alpha = 0 (uniform)
    r1 = synth.zipf_ranks(rng.random(200_000), n, 1.0)
    m1 = np.log((k + 0.5) / (k - 0.5))
    assert np.abs(np.bincount(r1, minlength=n) / 2e5 - m1 / m1.sum()).max() < 0.005
    r0 = synth.zipf_ranks(rng.random(200_000), n, 0.0)
    assert np.abs(np.bincount(r0, minlength=n) / 2e5 - 1 / n).max() < 0.004


def test_candidates_column_absent_and_n_candidates_set() -> None:
    t = synth.synthesize(synth.SynthConfig(qps=50.0, duration_s=20.0, candidates=0, seed=1))
    assert "candidates" not in t.column_names
    assert t.schema.field("n_candidates").type == pa.int32()
    assert set(t.column("n_candidates").to_numpy().tolist()) == {0}
    t2 = synth.synthesize(synth.SynthConfig(qps=50.0, duration_s=20.0, candidates=64, seed=1))
    assert set(t2.column("n_candidates").to_numpy().tolist()) == {64}


# --- determinism, streaming, provenance ----------------------------------------------------


def test_deterministic_bytes_and_seed_sensitivity(tmp_path: Path) -> None:
    cfg = synth.SynthConfig(regime="mixed", qps=100.0, duration_s=120.0, items=5000, seed=11)
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    synth.write(cfg, a)
    synth.write(cfg, b)
    synth.write(dataclasses.replace(cfg, seed=12), c)
    assert trace.sha256(a) == trace.sha256(b)
    assert trace.sha256(a) != trace.sha256(c)
    assert synth.synthesize(cfg).equals(synth.synthesize(cfg))
    assert trace.read(a).equals(synth.synthesize(cfg))
    names = sorted(x.name for x in tmp_path.iterdir())
    assert names == ["a.parquet", "b.parquet", "c.parquet"]  # no temporary files left


def test_streaming_row_groups_match_one_table(tmp_path: Path, monkeypatch) -> None:
    cfg = synth.SynthConfig(qps=200.0, duration_s=60.0, users=300, max_seq_len=80, seed=9)
    monkeypatch.setattr(synth.core, "ROW_GROUP_ROWS", 1000)
    monkeypatch.setattr(synth.core, "ROW_GROUP_TOKENS", 1 << 40)
    monkeypatch.setattr(synth.like, "ROW_GROUP_ROWS", 1000)
    p = tmp_path / "s.parquet"
    res = synth.write(cfg, p)
    assert pq.ParquetFile(p).metadata.num_row_groups == math.ceil(res.requests / 1000)
    t = trace.read(p)
    assert t.equals(synth.synthesize(cfg))
    _, user, off, _ = _arrays(t)
    hist = np.zeros(user.max() + 1, np.int64)
    np.add.at(hist, user, np.diff(off))
    assert hist.max() <= 80  # the cap holds across row groups
    assert res.users == len(np.unique(user)) and res.history_tokens == off[-1]


def test_rows_do_not_depend_on_row_group_size(monkeypatch) -> None:
    # Default history knobs: returning users' first requests may pass the token cap alone.
    cfg = synth.SynthConfig(regime="mixed", qps=100.0, duration_s=60.0, items=5000, seed=6)
    whole = synth.synthesize(cfg)
    monkeypatch.setattr(synth.core, "ROW_GROUP_ROWS", 777)
    chunks = list(synth.iter_chunks(cfg))
    assert len(chunks) > 5
    assert [c.num_rows for c in chunks[:-1]] == [777] * (len(chunks) - 1)
    assert pa.concat_tables(chunks).equals(whole)
    # Row groups also close at ROW_GROUP_TOKENS items (past their first row).
    monkeypatch.setattr(synth.core, "ROW_GROUP_ROWS", 1 << 18)
    monkeypatch.setattr(synth.core, "ROW_GROUP_TOKENS", 5000)
    chunks = list(synth.iter_chunks(cfg))
    sizes = [int(pc.sum(pc.list_value_length(c.column("new_items"))).as_py()) for c in chunks]
    firsts = [len(c.column("new_items")[0]) for c in chunks]
    assert len(chunks) > 5 and all(s - f <= 5000 for s, f in zip(sizes, firsts, strict=True))
    assert all(
        s + len(nxt.column("new_items")[0]) > 5000
        for s, nxt in zip(sizes, chunks[1:], strict=False)
    )
    assert pa.concat_tables(chunks).equals(whole)


def _stream_footprint(cfg: synth.SynthConfig) -> tuple[int, int, int]:
    """Requests, most rows generated but not yet yielded, most carried-state bytes."""
    seen: list[tuple[int, int]] = []  # (rows generated so far, state bytes) per segment
    real = synth_users.segment

    def spy(*args):
        out = real(*args)
        seen.append(((seen[-1][0] if seen else 0) + len(out[0]), args[2].nbytes))
        return out

    pending, rows = 0, 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(synth_users, "segment", spy)
        for chunk in synth.iter_chunks(cfg):
            rows += chunk.num_rows
            pending = max(pending, seen[-1][0] - rows)
    return rows, pending, max(b for _, b in seen)


def test_streaming_memory_does_not_grow_with_requests(monkeypatch) -> None:
    """Structural: the generator holds at most one row group plus one segment, and its
    carried state (users' histories, pending session continuations) does not grow with
    the number of requests."""
    monkeypatch.setattr(synth_users, "SEGMENT_REQUESTS", 2000)
    monkeypatch.setattr(synth.core, "ROW_GROUP_ROWS", 5000)
    kw = {"qps": 400.0, "users": 300, "items": 5000, "revisit_gap_s": 2.0, "seed": 2}
    kw |= {"returning_share": 0.0}
    short = _stream_footprint(synth.SynthConfig(duration_s=100.0, **kw))
    long = _stream_footprint(synth.SynthConfig(duration_s=800.0, **kw))
    assert long[0] > 7 * short[0]  # 8x the requests ...
    # ... never more than a row group plus a segment buffered ...
    assert max(short[1], long[1]) < 5000 + 3 * 2000
    assert long[2] < 1.5 * short[2] and long[2] < long[0]  # ... and no O(requests) state


def test_provenance(tmp_path: Path) -> None:
    cfg = synth.SynthConfig(qps=20.0, duration_s=30.0, seed=3)
    p = tmp_path / "p.parquet"
    synth.write(cfg, p)
    prov = trace.provenance(p)
    assert prov["source"] == "synth" and prov["seed"] == 3
    assert prov["schema_version"] == trace.SCHEMA_VERSION
    assert prov["arguments"] == json.loads(json.dumps(dataclasses.asdict(cfg)))
    meta = pq.read_schema(p).metadata
    assert meta[b"helm_plan.schema_version"] == trace.SCHEMA_VERSION.encode()


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"qps": -3.0}, "qps must be positive, got -3"),
        ({"duration_s": 0.0}, "duration_s must be positive, got 0"),
        ({"regime": "spiky"}, "unknown regime 'spiky'"),
        ({"users": 0}, r"users must be >= 1, got 0"),
        ({"items": 0}, r"items must be in \[1, 2000000000\], got 0"),
        ({"zipf_alpha": 7.0}, r"zipf_alpha must be in \[0.0, 5.0\], got 7"),
        ({"candidates": -1}, "candidates must be in"),
        ({"max_seq_len": 0}, "max_seq_len must be >= 1, got 0"),
        ({"burst_cold_share": 1.5}, "burst_cold_share must be in"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"users": 2.5}, "users must be an integer, got 2.5"),
        ({"returning_share": 1.5}, "returning_share must be in"),
        ({"returning_history_mean": 0.5}, "returning_history_mean must be in"),
        ({"burst_returning_share": -0.1}, "burst_returning_share must be in"),
        ({"burst_new_item_share": 2.0}, "burst_new_item_share must be in"),
        ({"burst_new_items": 0}, "burst_new_items must be >= 1, got 0"),
        ({"drift_ranks_per_s": -1.0}, "drift_ranks_per_s must be in"),
    ],
)
def test_config_validation(kw: dict, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg) as e:
        synth.SynthConfig(**kw)
    assert e.value.hint  # every synth config error says how to fix it


def test_field_docs_cover_every_field() -> None:
    from helm_plan.config import field_docs

    docs = field_docs(synth.SynthConfig)
    assert set(docs) == {f.name for f in dataclasses.fields(synth.SynthConfig)}


# --- CLI -----------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_synth_writes_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    r = runner.invoke(
        app,
        ["synth", "-o", str(out), "--regime", "burst", "--qps", "50", "--duration-s", "60"]
        + ["--users", "200", "--items", "3000", "--zipf-alpha", "1.1", "--candidates", "16"]
        + ["--seed", "4", "-q"],
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"wrote {out}:")
    cfg = synth.SynthConfig(
        regime="burst",
        qps=50.0,
        duration_s=60.0,
        users=200,
        items=3000,
        zipf_alpha=1.1,
        candidates=16,
        seed=4,
    )
    assert trace.read(out).equals(synth.synthesize(cfg))


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--qps", "-3"], "error: qps must be positive, got -3"),
        (["--regime", "spiky"], "error: unknown regime 'spiky'; use one of"),
        (
            ["--like", "/nonexistent/t.parquet"],
            "error: trace file /nonexistent/t.parquet not found",
        ),
        (["--items", "0"], "error: items must be in"),
    ],
)
def test_cli_synth_bad_input_one_line(tmp_path: Path, args: list[str], msg: str) -> None:
    out = tmp_path / "x.parquet"
    r = runner.invoke(app, ["synth", "-o", str(out), "-q", *args])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(msg), r.stderr
    assert not out.exists()


# --- the committed sample -----------------------------------------------------------------


def test_committed_sample_regenerates_from_its_provenance(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[2] / "datasets" / "samples" / "mixed-small.parquet"
    assert sample.exists(), "run datasets/make_samples.sh"
    assert sample.stat().st_size < 200_000
    prov = trace.provenance(sample)
    assert prov["source"] == "synth"
    cfg = synth.SynthConfig(**prov["arguments"])
    again = tmp_path / "again.parquet"
    synth.write(cfg, again)
    assert trace.sha256(again) == trace.sha256(sample)
