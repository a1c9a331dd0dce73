"""Named scenarios: the detectability scenario's regimes have the statistics they promise.

Regime A (KV is everything): returning users with long histories who come back
within seconds, over a tiny item set. Regime B (EMB is everything): only new
users (nothing to reuse), short histories over a huge, churning catalog.
Every figure is measured on the generated table; the regime boundaries come
from the file metadata (``helm_plan.regimes``) and are checked to be exact.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from helm_plan_cli.main import app
from scipy.stats import norm
from typer.testing import CliRunner

from helm_plan import regimes, synth, trace
from helm_plan.errors import ConfigError

OPTS = {"qps": 100.0, "phase_s": 30.0, "phases": 4, "max_seq_len": 4096, "seed": 3}
REUSE_S = 30.0  # "reuse opportunity": the user had a request in the last REUSE_S seconds


@pytest.fixture(scope="module")
def scen(tmp_path_factory) -> tuple[synth.Scenario, Path, dict[str, np.ndarray]]:
    sc = synth.detectability(**OPTS)
    path = tmp_path_factory.mktemp("scen") / "d.parquet"
    synth.write_scenario(sc, path)
    t = trace.read(path)
    ni = t.column("new_items").combine_chunks()
    off = ni.offsets.to_numpy().astype(np.int64)
    cols = {
        "ts": t.column("ts_s").to_numpy(),
        "user": t.column("user_id").to_numpy(),
        "k": np.diff(off),
        "off": off,
        "vals": ni.values.to_numpy(),
    }
    return sc, path, cols


def _first(user: np.ndarray) -> np.ndarray:
    _, idx = np.unique(user, return_index=True)
    m = np.zeros(len(user), bool)
    m[idx] = True
    return m


def _recent(ts: np.ndarray, user: np.ndarray, within_s: float) -> np.ndarray:
    """Whether each request's user had a request in the previous ``within_s`` seconds."""
    order = np.lexsort((np.arange(len(user)), user))
    same = np.r_[False, user[order][1:] == user[order][:-1]]
    gap = np.r_[np.inf, np.diff(ts[order])]
    out = np.zeros(len(user), bool)
    out[order] = same & (gap <= within_s)
    return out


def _lognormal_count_mean(mean: float, sigma: float, cap: int) -> float:
    """E[min(1 + round(X), cap)], X lognormal with mean ``mean - 1`` (documented draw)."""
    mu = math.log(mean - 1.0) - sigma * sigma / 2
    m = np.arange(cap)  # round(X) = m for m < cap - 1, else capped
    cdf = norm.cdf((np.log(m + 0.5) - mu) / sigma)
    p = np.diff(np.r_[0.0, cdf])
    p[-1] = 1.0 - cdf[-2]
    return float((p * np.minimum(m + 1, cap)).sum())


def test_spans_are_exact_and_recorded(scen) -> None:
    sc, path, c = scen
    want = [(i * 30.0, (i + 1) * 30.0, "AB"[i % 2]) for i in range(4)]
    assert [tuple(s) for s in sc.spans()] == want
    assert regimes.read_spans(path) == sc.spans()
    assert c["ts"].min() >= 0 and c["ts"].max() < sc.duration_s
    prov = trace.provenance(path)
    assert prov["scenario"] == "detectability" and prov["arguments"]["phase_s"] == 30.0
    assert [p["name"] for p in prov["phases"]] == ["A", "B", "A", "B"]
    # Users are numbered by first appearance across phases and never span two phases.
    first = _first(c["user"])
    assert np.array_equal(c["user"][first], np.arange(first.sum()))
    phase = np.floor(c["ts"] / 30.0).astype(int)
    per_user = np.unique(np.c_[c["user"], phase], axis=0)
    assert len(per_user) == len(np.unique(c["user"]))


def test_rate_is_steady_across_regimes(scen) -> None:
    _, _, c = scen
    counts = np.bincount(np.floor(c["ts"] / 30.0).astype(int), minlength=4)
    assert np.all(np.abs(counts - 3000) < 4 * math.sqrt(3000))


def test_regime_statistics(scen) -> None:
    sc, _, c = scen
    o = synth.DetectabilityConfig(**OPTS)
    first = _first(c["user"])
    recent = _recent(c["ts"], c["user"], REUSE_S)
    for span in sc.spans():
        m = (c["ts"] >= span.start_s) & (c["ts"] < span.end_s)
        n = int(m.sum())
        if span.name == "A":
            # Cold share: users / requests = 1 / a_requests_per_user (Poisson count of users).
            users = first[m].sum()
            assert abs(users - n / o.a_requests_per_user) < 4 * math.sqrt(n / o.a_requests_per_user)
            # Reuse opportunity: at least the session continuations whose lag (lognormal,
            # median 2 s, sigma 1) is below REUSE_S: (1 - cold) * 0.9 * F(30 s).
            f30 = norm.cdf(math.log(REUSE_S / o.a_revisit_gap_s))
            floor_ = (1 - 1 / o.a_requests_per_user) * 0.9 * f30
            assert recent[m].mean() > floor_ - 4 * math.sqrt(floor_ * (1 - floor_) / n)
        else:
            assert first[m].all()  # every request is a new user's: cold share 1
            assert not recent[m].any()  # nothing to reuse
    # Histories: A's first requests carry the long pre-existing history, B's are short.
    for name, mean, sigma in (
        ("A", o.a_history_mean, o.a_history_sigma),
        ("B", o.b_history_mean, 0.5),
    ):
        m = np.zeros(len(first), bool)
        for s in sc.spans():
            if s.name == name:
                m |= (c["ts"] >= s.start_s) & (c["ts"] < s.end_s)
        kf = c["k"][first & m]
        want = _lognormal_count_mean(mean, sigma, o.max_seq_len)
        sd = want * math.sqrt(math.exp(sigma**2) - 1)  # lognormal sd (cap and rounding: less)
        assert abs(kf.mean() - want) < 4 * sd / math.sqrt(len(kf)), name


def test_distinct_items_per_window_and_churn(scen) -> None:
    sc, _, c = scen
    o = synth.DetectabilityConfig(**OPTS)
    tok_t = np.repeat(c["ts"], c["k"])
    vals = c["vals"]
    a_ids = vals[np.isin(np.floor(tok_t / 30.0).astype(int), [0, 2])]
    b_ids = vals[np.isin(np.floor(tok_t / 30.0).astype(int), [1, 3])]
    assert a_ids.max() < o.a_items and b_ids.min() >= o.a_items  # disjoint catalogs
    assert b_ids.max() < o.a_items + o.b_items
    window = 10.0
    distinct = {"A": [], "B": []}
    tops = {"A": [], "B": []}
    for w in range(int(sc.duration_s / window)):
        m = (tok_t >= w * window) & (tok_t < (w + 1) * window)
        name = "AB"[int(w * window // 30.0) % 2]
        v, cnt = np.unique(vals[m], return_counts=True)
        distinct[name].append(len(v))
        tops[name].append(set(v[np.argsort(-cnt, kind="stable")[:100]].tolist()))
    assert max(distinct["A"]) <= o.a_items  # the EMB hot set is tiny in A ...
    assert min(distinct["B"]) > 50 * max(distinct["A"])  # ... and huge in B
    # A's popular items stay put; B's churn within a phase (200 ranks/s: the top 100
    # rotate out within a second) and between phases (a new bijection each B phase).
    assert len(tops["A"][0] & tops["A"][2]) > 60
    assert len(tops["B"][0] & tops["B"][2]) < 10 and len(tops["B"][0] & tops["B"][3]) < 10


def test_deterministic_and_seeded(tmp_path: Path) -> None:
    small = {**OPTS, "qps": 40.0, "phase_s": 10.0, "b_items": 100_000}
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    synth.write_scenario(synth.detectability(**small), a)
    synth.write_scenario(synth.detectability(**small), b)
    synth.write_scenario(synth.detectability(**{**small, "seed": 4}), c)
    assert trace.sha256(a) == trace.sha256(b) != trace.sha256(c)
    assert trace.read(a).equals(synth.synthesize_scenario(synth.detectability(**small)))
    sc = synth.scenario("detectability", **small)
    assert len({p.config.seed for p in sc.phases}) == len(sc.phases)  # own stream per phase


def test_scenario_errors() -> None:
    with pytest.raises(ConfigError, match="unknown scenario 'nope'") as e:
        synth.scenario("nope")
    assert "detectability" in (e.value.hint or "")
    with pytest.raises(ConfigError, match="unknown option 'a_itemz'"):
        synth.detectability(a_itemz=5)
    with pytest.raises(ConfigError, match="phase_s must be positive") as e:
        synth.detectability(phase_s=0.0)
    assert e.value.hint
    with pytest.raises(ConfigError, match="phases must be"):
        synth.detectability(phases=0)


# --- CLI -----------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_scenario(tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    args = ["synth", "-o", str(out), "--scenario", "detectability", "--qps", "40"]
    args += ["--duration-s", "40", "--set", "b_items=100000", "--set", "a_items=500", "--seed", "2"]
    r = runner.invoke(app, [*args, "-q"])
    assert r.exit_code == 0, r.output
    assert "scenario detectability, 4 phases, 40 s" in r.stdout
    want = synth.detectability(qps=40.0, phase_s=10.0, b_items=100_000, a_items=500, seed=2)
    assert trace.read(out).equals(synth.synthesize_scenario(want))
    assert regimes.read_spans(out) == want.spans()


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--scenario", "nope"], "error: unknown scenario 'nope'; use one of detectability"),
        (["--scenario", "detectability", "--items", "5"], "error: --items cannot be combined"),
        (
            ["--scenario", "detectability", "--set", "zz=1"],
            "error: [scenario detectability] unknown option 'zz'",
        ),
        (["--set", "bogus=1"], "error: unknown option 'bogus' for SynthConfig"),
        (["--set", "users"], "error: --set 'users' is not KEY=VALUE"),
        (["--users", "5", "--set", "users=6"], "error: --set users repeats an option"),
        (
            ["--scenario", "detectability", "--duration-s", "40", "--set", "phase_s=5"],
            "error: --duration-s and --set phase_s both set the phase length",
        ),
    ],
)
def test_cli_scenario_and_set_errors(tmp_path: Path, args: list[str], msg: str) -> None:
    out = tmp_path / "x.parquet"
    r = runner.invoke(app, ["synth", "-o", str(out), "-q", *args])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(msg), r.stderr
    assert not out.exists()


def test_cli_set_reaches_any_knob(tmp_path: Path) -> None:
    out = tmp_path / "k.parquet"
    args = ["synth", "-o", str(out), "--regime", "burst", "--qps", "30", "--duration-s", "60"]
    args += ["--set", "bursts=2", "--set", "drift-ranks-per-s=50"]
    args += ["--burst-new-item-share", "0.2", "--returning-history-mean", "300", "--seed", "1"]
    r = runner.invoke(app, [*args, "-q"])
    assert r.exit_code == 0, r.output
    cfg = synth.SynthConfig(
        regime="burst",
        qps=30.0,
        duration_s=60.0,
        bursts=2,
        drift_ranks_per_s=50.0,
        burst_new_item_share=0.2,
        returning_history_mean=300.0,
        seed=1,
    )
    assert trace.provenance(out)["arguments"] == dataclasses.asdict(cfg)
    assert trace.read(out).equals(synth.synthesize(cfg))
