"""`helm-plan profile` and `helm-plan profiles` through typer's CliRunner."""

from __future__ import annotations

import json

import polars as pl
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan.cache import curves as C
from helm_plan.cache import sampled
from helm_plan.pool import Pool, pool_bytes
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import load_context

runner = CliRunner()


def test_profile_writes_curves_and_notes_when_footprint_fits(small_trace, tmp_path):
    out = tmp_path / "curves.parquet"
    r = runner.invoke(app, ["profile", str(small_trace), "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("note:")]
    assert len(warn) == 1 and "fits" in warn[0]
    df = C.read_table(out)
    assert set(df["kind"].unique()) == set(C.KINDS)
    meta = json.loads(
        __import__("pyarrow.parquet", fromlist=["x"]).read_schema(out).metadata[b"helm_plan.curves"]
    )
    whole = df.filter(pl.col("window") == -1)
    caps = sorted(set(whole["capacity_bytes"].to_list()))
    assert whole.height == 3 * len(caps)
    # 0, 100 log-spaced sizes up to the pool, the split point and both footprints (below it)
    B, fp = meta["pool_bytes"], meta["footprint"]
    assert {0, B, B // 2, fp["emb_bytes"], fp["kv_bytes"]} <= set(caps)
    assert len(caps) == 104
    assert "100%" in r.stdout and "knee" in r.stdout
    assert meta["gpu"] == "a100-80g" and meta["model"] == "gr-small"
    m = load_model("gr-small")
    assert meta["pool_bytes"] == pool_bytes(load_gpu("a100-80g"), m)
    assert [t["row_bytes"] for t in meta["tables"]] == [t.row_bytes for t in m.tables]


def test_profile_pool_fraction_no_warning_and_sampling(small_trace, tmp_path):
    out = tmp_path / "c.parquet"
    args = ["profile", str(small_trace), "-o", str(out), "--pool-fraction", "0.5"]
    r = runner.invoke(app, [*args, "--window-s", "2", "--sample-rate", "0.5", "-q"])
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr
    df = C.read_table(out)
    assert df["window"].max() >= 1
    assert not df.filter(pl.col("kind") == "emb")["exact"].any()


def test_profile_sampled_load_writes_the_full_loads_curves(small_trace, tmp_path, monkeypatch):
    """Below rate 1 the CLI holds only the sampled tokens; the curves are the full arrays'."""
    loads = []
    real = sampled.load
    monkeypatch.setattr(sampled, "load", lambda *a, **k: loads.append(k) or real(*a, **k))
    out = tmp_path / "c.parquet"
    args = ["profile", str(small_trace), "-o", str(out), "--pool-fraction", "0.3"]
    r = runner.invoke(app, [*args, "--sample-rate", "0.2", "--seed", "3", "-q"])
    assert r.exit_code == 0, r.output
    assert loads == [{"sample_rate": 0.2, "seed": 3, "candidate_seed": 3}]
    ctx = load_context(small_trace, pool_fraction=0.3, seed=3)
    cfg = C.CurvesConfig(sample_rate=0.2, seed=3)
    want = C.compute_curves(ctx.workload, ctx.gpu, ctx.model, Pool(ctx.pool_bytes, "x"), cfg)
    assert C.read_table(out).equals(want.table, null_equal=True)
    # a stream sink needs every token: the full load
    r = runner.invoke(app, [*args, "--sample-rate", "0.2", "--stream-out",
                            str(tmp_path / "s.parquet"), "--seed", "3", "-q"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert len(loads) == 1
    assert C.read_table(out).equals(want.table, null_equal=True)


def test_profile_unknown_gpu_is_one_error_line_and_no_file(small_trace, tmp_path):
    out = tmp_path / "c.parquet"
    r = runner.invoke(app, ["profile", str(small_trace), "-o", str(out), "--gpu", "nope"])
    assert r.exit_code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "nope" in lines[0]
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["small.parquet"]


def test_profile_bad_option_value(small_trace, tmp_path):
    out = tmp_path / "c.parquet"
    r = runner.invoke(app, ["profile", str(small_trace), "-o", str(out), "--sample-rate", "2"])
    assert r.exit_code != 0 and r.stderr.startswith("error:") and "sample_rate" in r.stderr
    assert not out.exists()


def test_profiles_lists_pairs():
    r = runner.invoke(app, ["profiles", "--json"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    pairs = {(p["gpu"], p["model"]): p for p in obj["pairs"]}
    g, m = load_gpu("h100-80g"), load_model("gr-large")
    p = pairs[("h100-80g", "gr-large")]
    assert p["pool_bytes"] == g.hbm_bytes - m.weights_bytes - m.reserve_bytes
    assert p["emb_bytes_per_token"] == 1 * 128 * 2 and p["kv_bytes_per_token"] == 2 * 24 * 1024 * 2
    prod = next(x for x in obj["models"] if x["name"] == "gr-prod")
    assert len(prod["tables"]) > 1  # a production model lists several tables
    assert prod["emb_bytes_per_token"] == sum(
        t["dim"] * t["dtype_bytes"] * t["per_history_token"] for t in prod["tables"]
    )
    r = runner.invoke(app, ["profiles"])
    assert r.exit_code == 0 and "a100-40g" in r.stdout and "gr-small" in r.stdout


def test_profile_sampled_load_of_a_bad_file_is_one_error_line(tmp_path):
    """The SHARDS load reads the file itself: a missing or non-parquet trace still gets one line."""
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    for src in (tmp_path / "missing.parquet", bad):
        out = tmp_path / "c.parquet"
        r = runner.invoke(app, ["profile", str(src), "-o", str(out), "--sample-rate", "0.1"])
        assert r.exit_code != 0
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and src.name in lines[0], lines
        assert not out.exists()
