"""Degenerate traces in every command: a correct answer, or one clear error line.

The traces: one request; five requests at one instant (zero span); one user making every
request; one request at an epoch timestamp (rebased, with a note). Each command either
answers (and the answer is checked against what the trace must give) or exits 2 with one
``error:`` line (notes aside) and no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_table
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import trace
from helm_plan.controller.runtime import DEFAULT_PATH
from helm_plan.oracle import read_labels

runner = CliRunner()
POOL = ["--pool-fraction", "0.5"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, tuple[Path, int, int]]:
    """name -> (path, requests, users)."""
    d = tmp_path_factory.mktemp("degenerate")
    one = small_table(1)
    zero = small_table(5)
    zero = zero.set_column(0, "ts_s", pa.array([0.0] * 5))
    user = small_table(300, n_users=1)
    epoch = one.set_column(0, "ts_s", pa.array([1.7e9]))
    out = {}
    for name, t in [("one", one), ("zero-span", zero), ("one-user", user), ("epoch", epoch)]:
        trace.write(t, d / f"{name}.parquet", {"source": "tests"})
        out[name] = (d / f"{name}.parquet", t.num_rows, len(set(t.column("user_id").to_pylist())))
    return out


NAMES = ["one", "zero-span", "one-user", "epoch"]
INSTANT = {"one", "zero-span", "epoch"}  # all requests at one instant: no arrival rate


def _run(args: list[str]):
    r = runner.invoke(app, args)
    assert "Traceback" not in r.output, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    others = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
    if r.exit_code != 0:
        assert r.exit_code == 2 and len(errors) == 1 and others == errors, r.stderr
        assert "; " in errors[0]
    return r


def _ok(args: list[str]) -> dict:
    r = _run([*args, "--json", "-q"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", NAMES)
def test_inspect_simulate_cluster_count_every_request(traces, name):
    path, n, users = traces[name]
    t = str(path)
    ins = _ok(["inspect", t])
    assert ins["requests"] == n and ins["users"] == users
    sim = _ok(["simulate", t, "--policy", "static:0.5", *POOL])
    assert sim["overall"]["requests"] == n
    p50, p99 = sim["overall"]["p50_ms"], sim["overall"]["p99_ms"]
    assert 0 < p50 <= p99
    if n == 1:  # a lone request waits for nothing: its sojourn is its service, P50 = P99
        assert p50 == p99
    cl = _ok(["cluster", t, "--nodes", "3", "--router", "jsq", "--policy", "static:0.5", *POOL])
    assert cl["points"][0]["overall"]["requests"] == n
    if n == 1:  # one node of the fleet serves it from the same cold caches
        assert cl["points"][0]["overall"]["p99_ms"] == pytest.approx(p99, rel=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_oracle_and_profile_answer(traces, name, tmp_path):
    path, n, _ = traces[name]
    doc = _ok(["oracle", str(path), "-o", str(tmp_path / "l.parquet"), "--grid", "0.5", *POOL])
    lab = read_labels(tmp_path / "l.parquet")
    assert doc["windows"] == len(lab.r_star) >= 1 and doc["windows_with_requests"] >= 1
    assert int(lab.table["requests"].sum()) == n
    prof = _ok(["profile", str(path), "-o", str(tmp_path / "c.parquet"), *POOL])
    assert prof["hit_rates"] and (tmp_path / "c.parquet").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_plan_and_analyze_need_an_arrival_rate(traces, name, tmp_path):
    path, n, _ = traces[name]
    args = ["plan", str(path), "--gpus", "a100-80g", "--routers", "jsq", "--policies", "kv-max",
            "--no-load-curve", "--max-nodes", "4", *POOL]  # fmt: skip
    if name in INSTANT:
        r = _run(args)
        assert r.exit_code == 2 and "arrive at one instant" in r.stderr
        r = _run(["analyze", str(path), "-o", str(tmp_path / "run"), "-q", *POOL])
        assert r.exit_code == 2 and "--no-capacity" in r.stderr
        assert not (tmp_path / "run").exists()  # refused before any stage
        doc = _ok(["analyze", str(path), "-o", str(tmp_path / "run"), "--no-capacity", *POOL])
        assert doc["summary"]["trace"]["requests"] == n
    else:
        doc = _ok(args)
        assert [r["nodes"] for r in doc["capacity"]] and all(
            r["nodes"] is None or r["nodes"] >= 1 for r in doc["capacity"])  # fmt: skip
        # (its capacity is the plan above: analyze's one node is what is left to check)
        run = _ok(["analyze", str(path), "-o", str(tmp_path / "run"), "--no-capacity", *POOL])
        assert run["summary"]["trace"]["requests"] == n and run["summary"]["trace"]["users"] == 1


@pytest.mark.parametrize("name", NAMES)
def test_train_refuses_before_labelling_and_validate_answers(traces, name, tmp_path):
    path, _, _ = traces[name]
    r = _run(["train", str(path), "-o", str(tmp_path / "c.npz"), "-q"])
    assert r.exit_code == 2 and "training needs 2 or more" in r.stderr
    doc = _ok(["validate", str(DEFAULT_PATH), str(path), *POOL])
    (fig,) = doc["traces"]
    assert fig["windows"] == 1 and fig["p99_ms"]["controller"] > 0
    assert fig["latency_us"]["n"] == 0  # no window boundary, no decision to time


@pytest.mark.parametrize("name", NAMES)
def test_synth_like_fits_or_says_why(traces, name, tmp_path):
    path, _, _ = traces[name]
    r = _run(["synth", "--like", str(path), "-o", str(tmp_path / "s.parquet"), "--duration-s",
              "5", "-q"])  # fmt: skip
    if r.exit_code == 2:
        assert "too few repeated items" in r.stderr and not (tmp_path / "s.parquet").exists()
    else:
        assert (tmp_path / "s.parquet").is_file()
