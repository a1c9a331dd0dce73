"""One SLO default for every command: the model profile's ``default_slo_ms``.

Read from the typer app (every ``--slo-ms`` defaults to None and says the rule) and the
library configs (every ``slo_ms`` field defaults to None); then run the commands and check the
SLO each one used is the model's.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from file_options import commands
from helm_plan_cli.main import app
from helm_plan_cli.options import SLO_HELP
from typer.testing import CliRunner

from helm_plan import sim
from helm_plan.analyze import AnalyzeConfig, build_config
from helm_plan.controller import training
from helm_plan.plan import PlanConfig
from helm_plan.profiles import available, load_model, resolve_slo_ms
from helm_plan.sim import NodeConfig, load_context

runner = CliRunner()


def _slo_option(name: str):
    return next((p for p in commands()[name].params if "--slo-ms" in p.opts), None)


def test_every_command_with_an_slo_defaults_to_the_models_default_slo():
    with_slo = {name for name in commands() if _slo_option(name) is not None}
    assert with_slo >= {"analyze", "oracle", "train", "validate", "plan", "simulate", "cluster"}
    for name in with_slo:
        opt = _slo_option(name)
        assert opt.default is None, f"{name} --slo-ms defaults to {opt.default}"
        assert opt.help == SLO_HELP, name
    assert "default_slo_ms" in SLO_HELP


@pytest.mark.parametrize("model", available("model"))
def test_every_library_config_resolves_to_the_models_default_slo(model):
    m = load_model(model)
    assert m.default_slo_ms > 0 and m.slo_source
    defaults = [
        NodeConfig().slo_ms,
        AnalyzeConfig().slo_ms,
        PlanConfig().slo_ms,
        training.DEFAULT_NODE.slo_ms,
        build_config().slo_ms,
        build_config().node.slo_ms,
    ]
    for slo in defaults:  # fmt: skip
        assert slo is None
        assert resolve_slo_ms(m, slo) == m.default_slo_ms
    assert resolve_slo_ms(m, 7.5) == 7.5  # an explicit SLO wins
    ctx = SimpleNamespace(model=m)  # what for_context reads of a node context
    assert NodeConfig().for_context(ctx).slo_ms == m.default_slo_ms
    assert NodeConfig(slo_ms=3.0).for_context(ctx).slo_ms == 3.0
    assert not hasattr(sim, "DEFAULT_SLO_MS")  # no second default


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    from conftest import small_table

    from helm_plan import trace

    p = tmp_path_factory.mktemp("slo") / "t.parquet"
    trace.write(small_table(300), p, {"source": "tests"})
    return p


def _json(args: list[str]) -> dict:
    r = runner.invoke(app, [*args, "--json", "-q"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("model", ["gr-large", "gr-small"])
def test_the_commands_run_at_the_models_slo(trace_file, tmp_path, model):
    want = load_model(model).default_slo_ms
    t, common = str(trace_file), ["--model", model, "--pool-fraction", "0.5"]
    assert _json(["simulate", t, "--policy", "static:0.5", *common])["slo_ms"] == want
    assert _json(["cluster", t, "--nodes", "2", "--policy", "kv-max", *common])["slo_ms"] == want
    doc = _json(["oracle", t, "-o", str(tmp_path / "l.parquet"), "--grid", "0.5", *common])
    assert doc["slo_ms"] == want
    assert _json(["plan", t, "--gpus", "a100-80g", "--routers", "jsq", "--policies", "kv-max",
                  "--no-load-curve", "--max-nodes", "4", *common])["slo_ms"] == want  # fmt: skip
    run = _json(["analyze", t, "-o", str(tmp_path / "run"), "--no-capacity", *common])
    assert run["summary"]["setup"]["slo_ms"] == want
    assert run["summary"]["setup"]["slo_source"].startswith(f"model {model} default_slo_ms")
    given = _json(["simulate", t, "--policy", "static:0.5", "--slo-ms", "3", *common])
    assert given["slo_ms"] == 3.0


def test_train_and_validate_run_at_the_models_slo(trace_file, tmp_path):
    from helm_plan.controller import dataset
    from helm_plan.controller.runtime import DEFAULT_PATH

    want = load_model("gr-small").default_slo_ms  # train and validate read gr-small traces
    ctx = load_context(trace_file, pool_fraction=0.5)
    labels = training.label_traces([("t", ctx, NodeConfig(window_s=2.0))])
    assert labels[0].slo_ms == want
    dataset.save(labels, tmp_path / "set.npz")
    assert dataset.load(tmp_path / "set.npz")[0].slo_ms == want
    doc = _json(["validate", str(DEFAULT_PATH), str(trace_file), "--window-s", "2",
                 "--pool-fraction", "0.5"])  # fmt: skip
    assert [t["slo_ms"] for t in doc["traces"]] == [want]
