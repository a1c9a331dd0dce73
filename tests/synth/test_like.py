"""``synth --like``: fit a real trace's statistics (skew, catalog, gaps, item counts) and scale them.

Every property is measured with independent numpy or DuckDB (``inspect``) on the
generated tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import synth, trace
from helm_plan.errors import ConfigError, TraceError
from helm_plan.inspect import inspect_trace

runner = CliRunner()


def _arrays(t):
    ni = t.column("new_items").combine_chunks()
    off = ni.offsets.to_numpy().astype(np.int64)
    return (
        t.column("ts_s").to_numpy(),
        t.column("user_id").to_numpy(),
        off - off[0],
        ni.values.to_numpy()[off[0] : off[-1]],
    )


@pytest.mark.parametrize("alpha", [0.7, 1.0, 1.3])
def test_like_recovers_zipf_alpha_item_counts_and_catalog(tmp_path: Path, alpha: float) -> None:
    src = tmp_path / "src.parquet"
    cfg = synth.SynthConfig(
        qps=200.0,
        duration_s=300.0,
        items=50_000,
        zipf_alpha=alpha,
        max_seq_len=100_000,
        returning_share=0.0,
        seed=1,
    )
    synth.write(cfg, src)
    f = synth.fit(src)
    assert f.zipf_alpha == pytest.approx(alpha, abs=0.05)
    assert f.new_items_mean == pytest.approx(cfg.new_items_mean, rel=0.05)
    assert f.cold_history_mean == pytest.approx(cfg.cold_history_mean, rel=0.05)
    ts, user, off, vals = _arrays(trace.read(src))
    assert f.cold_share == pytest.approx(len(np.unique(user)) / len(user))
    assert f.items == len(np.unique(vals)) and f.history_tokens == len(vals)
    # The catalog behind the distinct items: with the true skew, the estimate is off only
    # by the sampling noise of the distinct count (sd < sqrt(D), a fraction of a percent);
    # the fit uses the fitted skew, whose error it inherits.
    assert f.items < cfg.items and f.catalog_fit == "zipf"
    assert synth.catalog.estimate_catalog(f.items, len(vals), alpha)[0] == pytest.approx(
        cfg.items, rel=0.03
    )
    assert f.catalog_items == synth.catalog.estimate_catalog(f.items, len(vals), f.zipf_alpha)[0]
    big = synth.like_config(f, scale=4.0, seed=2)
    assert big.users == round(4 * f.users) and big.items == round(4 * f.catalog_items)
    assert big.qps == pytest.approx(4 * f.mean_qps) and big.returning_share == 0.0
    # The scaled trace keeps the skew, the cold share and the catalog's unseen tail: its
    # distinct items are what 4x the draws from the 4x catalog give.
    out = tmp_path / "big.parquet"
    synth.write(big, out, like=f.to_json())
    st = inspect_trace(out)
    assert st.zipf_alpha == pytest.approx(alpha, abs=0.07)
    assert st.cold_share == pytest.approx(f.cold_share, rel=0.1)
    e = synth.catalog.expected_distinct(big.items, st.history_tokens, big.zipf_alpha)
    assert abs(st.items - e) < 4 * math.sqrt(e)
    if alpha < 1:  # self-similar below alpha 1: 4x catalog and draws show 4x distinct items
        assert st.items / f.items == pytest.approx(4.0, rel=0.02)
    assert trace.provenance(out)["like"]["zipf_alpha"] == pytest.approx(f.zipf_alpha)


def test_like_overrides_and_errors(tmp_path: Path, small_trace: Path) -> None:
    f = synth.fit(small_trace)
    cfg = synth.like_config(f, scale=2.0, qps=7.0, users=None, items=333)
    assert cfg.qps == 7.0 and cfg.items == 333 and cfg.users == round(2 * f.users)
    with pytest.raises(ConfigError, match="scale must be positive, got 0"):
        synth.like_config(f, scale=0)
    with pytest.raises(TraceError, match="not found"):
        synth.fit(tmp_path / "missing.parquet")
    one = tmp_path / "one.parquet"
    trace.write(trace.make_table([0.0, 1.0], [0, 1], [0, 1, 2], [5, 6], [0, 0]), one, {})
    with pytest.raises(TraceError, match="too few repeated items"):
        synth.fit(one)


def test_cli_synth_like(tmp_path: Path, small_trace: Path) -> None:
    out = tmp_path / "like.parquet"
    r = runner.invoke(
        app, ["synth", "-o", str(out), "--like", str(small_trace), "--scale", "3", "-q"]
    )
    assert r.exit_code == 0, r.output
    prov = trace.provenance(out)
    f = synth.fit(small_trace)
    assert prov["like"] == json.loads(json.dumps(f.to_json()))
    assert prov["arguments"]["users"] == round(3 * f.users)


def test_like_on_movielens_derived_trace(tmp_path: Path, datasets: Path) -> None:
    """Fit MovieLens 100K (one request per rating, timestamp order) and scale it 2x."""
    raw = np.loadtxt(
        datasets / "movielens-100k.inter.tsv", skiprows=1, dtype=np.int64, usecols=(0, 1, 3)
    )
    order = np.argsort(raw[:, 2], kind="stable")
    u, item, stamp = raw[order, 0], raw[order, 1], raw[order, 2]
    n = len(u)
    src = tmp_path / "ml.parquet"
    ts = (stamp - stamp[0]) / 1000.0
    trace.write(trace.make_table(ts, u, np.arange(n + 1), item, np.full(n, 10)), src, {})
    f = synth.fit(src)
    # Independent: cold share, items per request, and the rank/frequency slope.
    assert f.cold_share == pytest.approx(943 / 100_000)
    assert f.new_items_mean == 1.0 and f.cold_history_mean == 1.0
    _, c = np.unique(item, return_counts=True)
    c = np.sort(c)[::-1]
    c = c[c >= 5]
    r = np.arange(1, len(c) + 1)
    assert f.zipf_alpha == pytest.approx(-np.polyfit(np.log(r), np.log(c), 1, w=r**-0.5)[0])
    out = tmp_path / "like.parquet"
    cfg = synth.like_config(f, scale=2.0, seed=1)
    synth.write(cfg, out, like=f.to_json())
    st = inspect_trace(out)
    assert st.requests == pytest.approx(2 * n, rel=0.02)
    assert st.users == pytest.approx(2 * 943, rel=0.1)
    # MovieLens rates every one of its 1682 movies: the catalog estimate finds them all
    # seen (no unseen tail), and the 2x trace draws from a 2x catalog.
    assert f.catalog_items == pytest.approx(1682, abs=2) and cfg.items == 2 * f.catalog_items
    e = synth.catalog.expected_distinct(cfg.items, st.history_tokens, f.zipf_alpha)
    assert abs(st.items - e) < 4 * math.sqrt(e)
    assert st.zipf_alpha == pytest.approx(f.zipf_alpha, abs=0.05)
    assert st.new_items_mean == pytest.approx(1.0, abs=0.02)
    assert st.history_len_p50 == pytest.approx(f.history_len_p50, rel=0.25)
    assert st.history_len_p95 == pytest.approx(f.history_len_p95, rel=0.25)
