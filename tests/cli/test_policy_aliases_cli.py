"""A policy typed by an alias runs as its spec and every output spells the spec's name."""

from __future__ import annotations

import json

from conftest import small_table
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import trace

runner = CliRunner()
POOL = ["--pool-fraction", "0.5"]


def _ok(args: list[str]) -> dict:
    r = runner.invoke(app, [*args, "--json", "-q"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_simulate_and_cluster_spell_an_alias_by_the_name(tmp_path):
    t = tmp_path / "t.parquet"
    trace.write(small_table(200), t, {"source": "tests"})
    assert _ok(["simulate", str(t), "--policy", "kv_max", *POOL])["policy"] == "kv-max"
    doc = _ok(["cluster", str(t), "--nodes", "2", "--router", "jsq",
               "--policies", "kv_max,kv-max,emb_max", *POOL])  # fmt: skip
    assert [p["policy"] for p in doc["points"]] == ["kv-max", "emb-max"]  # one run each
