"""`helm-plan validate` reports each figure per regime span of a trace that records them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helm_plan_cli.main import app
from typer.testing import CliRunner

from helm_plan import regimes, synth
from helm_plan.controller.runtime import DEFAULT_PATH
from helm_plan.oracle import OracleConfig, best_static
from helm_plan.sim import NodeConfig, load_context, simulate_node


def test_validate_per_regime(tmp_path):
    cfg = synth.SynthConfig(regime="mixed", qps=30.0, duration_s=60.0, items=5_000,
                            candidates=16, returning_history_mean=200.0, seed=4)  # fmt: skip
    tp = synth.write(cfg, tmp_path / "mixed.parquet").path
    args = ["validate", str(DEFAULT_PATH), str(tp), "--window-s", "5", "--slo-ms", "1",
            "--pool-fraction", "0.1", "--seed", "4"]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    (f,) = json.loads(res.stdout)["traces"]
    rows = {(r["regime"], r["policy"]): r for r in f["regimes"]}
    assert {p for _, p in rows} == {"best-static", "oracle", "controller"}
    # best static by itself, cut by the trace's spans by hand
    ctx = load_context(tp, pool_fraction=0.1, seed=4)
    ncfg = NodeConfig(window_s=5.0, slo_ms=1.0)
    bs = best_static(ctx, ncfg, OracleConfig())
    r = simulate_node(ctx, np.array([bs.ratio]), ncfg)
    ts = ctx.arrays.ts_s
    spans = regimes.read_spans(tp)
    measured = np.arange(len(ts)) >= len(ts) - r.requests
    for sp in spans:
        inside = (ts >= sp.start_s) & ((ts < sp.end_s) | (sp is spans[-1])) & measured
        row = rows[(sp.name, "best-static")]
        assert row["p99_ms"] == pytest.approx(np.percentile(r.sojourn_s[inside], 99) * 1e3)
        assert row["requests"] == int(inside.sum())
    res = CliRunner().invoke(app, [*args, "--quiet"])
    assert res.exit_code == 0, res.output
    assert "per regime" in res.stdout and "trend" in res.stdout
