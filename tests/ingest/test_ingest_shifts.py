"""Mix shifts: `ingest --shift` and `synth --like --shift` put the asked-for mix in the bursts.

Measured on the written traces with numpy alone: a request is cold when it is
its user's first; an injected request is one the same ingest without shifts
does not have.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import regimes, synth, trace
from helm_plan.errors import ConfigError
from helm_plan.ingest import IngestConfig, ingest_to_file
from helm_plan.mixshift import MixShift, parse_shift

runner = CliRunner()
SHIFTS = (MixShift("flash-crowd", 0.6), MixShift("new-items", 0.3), MixShift("returning-wave", 0.2))


def _log(path: Path, users: int = 1500, seed: int = 0) -> Path:
    """A CSV log: each user a few sessions a day apart, Zipf items."""
    rng = np.random.default_rng(seed)
    rows = ["user,item,ts"]
    for u in range(users):
        t0 = rng.uniform(0, 30 * 86400)
        for s in range(rng.integers(1, 6)):
            for _ in range(rng.integers(1, 5)):
                rows.append(f"{u},{rng.zipf(1.3) % 5000},{t0 + s * 86400 + rng.uniform(0, 60):.1f}")
    path.write_text("\n".join(rows) + "\n")
    return path


def _arrays(p: Path):
    t = trace.read(p)
    ni = t.column("new_items").combine_chunks()
    off = ni.offsets.to_numpy().astype(np.int64)
    return (t.column("ts_s").to_numpy(), t.column("user_id").to_numpy(), off - off[0],
            ni.values.to_numpy()[off[0] : off[-1]])  # fmt: skip


def _first(user: np.ndarray) -> np.ndarray:
    out = np.zeros(len(user), bool)
    out[np.unique(user, return_index=True)[1]] = True
    return out


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    d = tmp_path_factory.mktemp("shifts")
    log = _log(d / "log.csv")
    kw = {"kind": "csv", "user_col": "user", "item_col": "item", "ts_col": "ts",
          "regime": "burst", "qps": 100.0, "seed": 4}  # fmt: skip
    ingest_to_file(log, d / "base.parquet", IngestConfig(**kw))
    rep = ingest_to_file(log, d / "shifted.parquet", IngestConfig(**kw, shifts=SHIFTS))
    return d, rep


def test_ingest_bursts_get_the_shares_asked_for(shifted):
    d, rep = shifted
    spans = regimes.read_spans(d / "shifted.parquet")
    bursts = [(s.start_s, s.end_s) for s in spans if s.name == "burst"]
    assert len(bursts) == 4 and regimes.read_spans(d / "base.parquet") == spans
    ts0, u0, off0, it0 = _arrays(d / "base.parquet")
    ts, u, off, it = _arrays(d / "shifted.parquet")
    base = set(zip(ts0.tolist(), u0.tolist(), strict=True))
    added = np.array([(t, x) not in base for t, x in zip(ts.tolist(), u.tolist(), strict=True)])
    assert len(ts) - len(ts0) == added.sum() > 0
    first = _first(u)
    seen_before = {}
    for a, e in bursts:
        inside = (ts >= a) & (ts < e)
        n = int(inside.sum())
        # cold: exactly the share asked for, up to rounding one request
        assert first[inside].mean() == pytest.approx(0.6, abs=1.5 / n)
        # returning wave: injected requests by users who came before the burst
        early = set(u[(ts < a)].tolist())
        wave = inside & added & np.isin(u, list(early))
        assert wave.sum() / n == pytest.approx(0.2, abs=1.5 / n)
        seen_before[(a, e)] = early
        # new items: never seen before the burst, a Bernoulli(0.3) share of the burst's items
        lo, hi = off[np.searchsorted(ts, a)], off[np.searchsorted(ts, e)]
        items = it[lo:hi]
        fresh = items > it0.max()
        sigma = (0.3 * 0.7 / len(items)) ** 0.5
        assert fresh.mean() == pytest.approx(0.3, abs=4 * sigma)
        assert not np.isin(items[fresh], it[:lo]).any()
    # outside the bursts nothing changed
    out0 = ~np.any([(ts0 >= a) & (ts0 < e) for a, e in bursts], axis=0)
    out = ~np.any([(ts >= a) & (ts < e) for a, e in bursts], axis=0)
    assert np.array_equal(ts[out], ts0[out0]) and np.array_equal(u[out], u0[out0])
    # the report and the provenance say the same
    prov = trace.provenance(d / "shifted.parquet")
    assert prov["arguments"]["shifts"] == ["flash-crowd=0.6", "new-items=0.3", "returning-wave=0.2"]
    assert [b["cold_share"] for b in prov["mix_shifts"]] == [
        b["cold_share"] for b in rep.shift_bursts
    ]


def test_ingest_shifts_are_seeded(shifted, tmp_path):
    d, _ = shifted
    kw = {"kind": "csv", "user_col": "user", "item_col": "item", "ts_col": "ts",
          "regime": "burst", "qps": 100.0, "shifts": SHIFTS}  # fmt: skip
    ingest_to_file(d / "log.csv", tmp_path / "a.parquet", IngestConfig(**kw, seed=4))
    ingest_to_file(d / "log.csv", tmp_path / "b.parquet", IngestConfig(**kw, seed=5))
    a = pq.read_table(tmp_path / "a.parquet")
    assert a.equals(pq.read_table(d / "shifted.parquet"))
    assert not a.equals(pq.read_table(tmp_path / "b.parquet"))


def test_ingest_cli_shift_and_errors(shifted, tmp_path):
    d, _ = shifted
    args = ["ingest", "csv", str(d / "log.csv"), "--map", "user=user,item=item,ts=ts",
            "--qps", "100", "--seed", "4"]  # fmt: skip
    out = tmp_path / "t.parquet"
    r = runner.invoke(app, [*args, "-o", str(out), "--regime", "burst",
                            "--shift", "flash-crowd=0.6", "--shift", "new-items=0.3",
                            "--shift", "returning-wave=0.2"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "cold share" in r.stdout
    assert pq.read_table(out).equals(pq.read_table(d / "shifted.parquet"))
    for extra, msg in [
        (["--shift", "flash-crowd=0.5"], "add --regime burst"),
        (["--regime", "burst", "--shift", "storm=0.5"], "unknown mix shift 'storm'"),
        (["--regime", "burst", "--shift", "flash-crowd=1.5"], "must be in [0, 1)"),
        (["--regime", "burst", "--shift", "flash-crowd=0.6", "--shift", "returning-wave=0.5"],
         "must stay below 1"),
        (["--regime", "burst", "--shift", "new-items"], "is not KIND=SHARE"),
    ]:  # fmt: skip
        r = runner.invoke(app, [*args, "-o", str(tmp_path / "x.parquet"), *extra])
        assert r.exit_code == 2 and msg in r.output, (extra, r.output)
        assert not (tmp_path / "x.parquet").exists()


def test_like_shift_sets_the_burst_mix(tmp_path):
    src = tmp_path / "src.parquet"
    synth.write(synth.SynthConfig(qps=50.0, duration_s=600.0, items=20_000, returning_share=0.0,
                                  seed=2), src)  # fmt: skip
    out = tmp_path / "like.parquet"
    r = runner.invoke(app, ["synth", "-o", str(out), "--like", str(src), "--scale", "4",
                            "--shift", "flash-crowd=0.5", "--shift", "returning-wave=0.2",
                            "--shift", "new-items=0.3", "--seed", "3", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    prov = trace.provenance(out)
    assert prov["like"]["mix_shifts"] == ["flash-crowd=0.5", "returning-wave=0.2", "new-items=0.3"]
    args = prov["arguments"]
    assert args["regime"] == "burst" and args["burst_cold_share"] == pytest.approx(0.7)
    assert args["burst_returning_share"] == pytest.approx(0.2 / 0.7)
    assert args["items"] > 4 * 10_000  # the catalogue scales with --scale
    spans = regimes.read_spans(out)
    bursts = [(s.start_s, s.end_s) for s in spans if s.name == "burst"]
    assert len(bursts) == 4
    ts, u, off, it = _arrays(out)
    first = _first(u)
    inside = np.any([(ts >= a) & (ts < e) for a, e in bursts], axis=0)
    n = int(inside.sum())
    # each burst request is a user's first with probability 0.7: binomial sampling error
    assert first[inside].mean() == pytest.approx(0.7, abs=4 * (0.7 * 0.3 / n) ** 0.5)
    # a burst user's first request: a new user's initial history (the fitted mean) or, for
    # 0.2 / 0.7 of them, a returning user's history (the source's median length)
    lens = np.diff(off)[inside & first]
    like = prov["like"]
    want = (0.5 * like["cold_history_mean"] + 0.2 * like["history_len_p50"]) / 0.7
    assert lens.mean() == pytest.approx(want, rel=0.03)  # without the wave: 11% short


def test_parse_shift_and_like_refuses_a_steady_regime():
    assert parse_shift("flash-crowd=0.25") == MixShift("flash-crowd", 0.25)
    f = synth.LikeFit("x", 10, 5, 5, 20, 5, "distinct", 10.0, 1.0, 1.0, 0.5, 1.0, 1.0, 2.0, 4.0,
                      3.0, 9.0)  # fmt: skip
    with pytest.raises(ConfigError, match="regime is steady"):
        synth.like_config(f, shifts=[MixShift("flash-crowd", 0.5)], regime="steady")
