"""Named scenarios: the detectability scenario's regimes have the statistics they promise.

Regime A (KV is everything): a fixed population of returning users with long
histories, each coming back every period, over a tiny item set. Regime B (EMB
is everything): only new users (nothing to reuse) over a large uniform catalog.
Every figure is measured on the generated table; the regime boundaries come
from the file metadata (``helm_plan.regimes``) and are checked to be exact.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helm_plan_cli.main import app
from scipy.stats import norm
from typer.testing import CliRunner

from helm_plan import regimes, synth, trace
from helm_plan.errors import ConfigError

OPTS = {"qps": 100.0, "phase_s": 30.0, "phases": 4, "max_seq_len": 4096, "seed": 3,
        "a_users": 300, "b_items": 100_000}  # fmt: skip


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
    sc, _, c = scen
    counts = np.bincount(np.floor(c["ts"] / 30.0).astype(int), minlength=4)
    for ph, n in zip(sc.phases, counts, strict=True):
        # A: a_users who join over a_join_periods periods, then one request a period each;
        # B: a Poisson count at qps
        want = ph.config.expected_requests if ph.name == "A" else 100.0 * 30.0
        assert abs(n - want) < 4 * math.sqrt(want), ph.name


def test_regime_statistics(scen) -> None:
    sc, _, c = scen
    o = synth.DetectabilityConfig(**OPTS)
    first = _first(c["user"])
    period = o.a_users / o.qps
    for span in sc.spans():
        m = (c["ts"] >= span.start_s) & (c["ts"] < span.end_s)
        if span.name == "A":
            # every user of the phase comes back exactly every period ...
            u, ts = c["user"][m], c["ts"][m]
            order = np.lexsort((ts, u))
            same = u[order][1:] == u[order][:-1]
            gaps = np.diff(ts[order])[same]
            np.testing.assert_allclose(gaps, period, rtol=1e-9)
            assert len(np.unique(u)) == o.a_users
            # ... so once all have joined, every other user requests once between two of its
            # requests: the KV reuse distance of every revisit is the whole population
            joined = span.start_s + o.a_join_periods * period
            late = np.flatnonzero(m & (c["ts"] >= joined + period))
            for i in late[:: max(1, len(late) // 50)]:
                prev = np.flatnonzero((c["user"] == c["user"][i]) & (np.arange(len(m)) < i))[-1]
                assert len(np.unique(c["user"][prev + 1 : i])) == o.a_users - 1
            assert (c["k"][m & ~first] == 0).all()  # a refresh adds no items (mean 0)
        else:
            assert first[m].all()  # every request is a new user's: cold share 1
    # Histories: A's first requests carry the long pre-existing history, B's are shorter.
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
        assert abs(kf.mean() - want) < 4 * sd / math.sqrt(len(kf)) + 0.5, name


def test_distinct_items_per_window(scen) -> None:
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
    for w in range(int(sc.duration_s / window)):
        m = (tok_t >= w * window) & (tok_t < (w + 1) * window)
        distinct["AB"[int(w * window // 30.0) % 2]].append(len(np.unique(vals[m])))
    assert max(distinct["A"]) <= o.a_items  # the EMB hot set is tiny in A ...
    assert min(distinct["B"]) > 20 * o.a_items  # ... and large in B
    # B's popularity is uniform (b_zipf_alpha 0): no item much above its share
    _, cnt = np.unique(b_ids, return_counts=True)
    assert cnt.max() < 10 * len(b_ids) / o.b_items + 10


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
    assert want.phases[0].config.duration_s == 10.0
    assert trace.read(out).equals(synth.synthesize_scenario(want))
    assert regimes.read_spans(out) == want.spans()


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--scenario", "nope"], "error: unknown scenario 'nope'; use one of detectability, flat"),
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


def test_flat_is_one_steady_regime(tmp_path: Path) -> None:
    out = tmp_path / "f.parquet"
    r = runner.invoke(app, ["synth", "-o", str(out), "--scenario", "flat", "--duration-s", "20",
                            "--set", "users=200", "--qps", "50", "-q"])  # fmt: skip
    assert r.exit_code == 0, r.output
    sc = synth.scenario("flat", users=200, qps=50.0, duration_s=20.0)
    assert regimes.read_spans(out) == sc.spans() == [regimes.RegimeSpan(0.0, 20.0, "steady")]
    t = trace.read(out)
    u, ts = t.column("user_id").to_numpy(), t.column("ts_s").to_numpy()
    order = np.lexsort((ts, u))
    gaps = np.diff(ts[order])[u[order][1:] == u[order][:-1]]
    np.testing.assert_allclose(gaps, 200 / 50.0, rtol=1e-9)  # every user each users/qps s


def test_cyclic_cap_and_join() -> None:
    from helm_plan.synth.cyclic import CyclicConfig, iter_cyclic

    cfg = CyclicConfig(users=50, period_s=1.0, duration_s=10.0, history_mean=300.0,
                       new_items_mean=50.0, max_seq_len=400, join_periods=2.0, seed=1)  # fmt: skip
    t = pa.concat_tables(list(iter_cyclic(cfg)))
    u, ts = t.column("user_id").to_numpy(), t.column("ts_s").to_numpy()
    k = np.asarray(t.column("new_items").combine_chunks().value_lengths())
    assert np.all(np.diff(ts) >= 0) and ts.max() < 10.0
    # histories never pass max_seq_len: the cap drops the items past it
    hist = np.zeros(u.max() + 1, np.int64)
    np.add.at(hist, u, k)
    assert hist.max() <= 400 and (hist == 400).sum() > 10
    first = np.unique(u, return_index=True)[1]
    assert ts[first].max() < 2.0  # everyone joined within join_periods periods
    assert abs(len(ts) - cfg.expected_requests) < 4 * math.sqrt(cfg.expected_requests)
