"""Finished stages are reused only when they are what a stage wrote; anything else is recomputed."""

from __future__ import annotations

import json

import polars as pl
import pytest

from helm_plan.analyze.stage_cache import StageCache
from helm_plan.analyze.stages import StageOutput


def test_roundtrip_and_wrong_shapes_are_recomputed(tmp_path):
    c = StageCache(tmp_path)
    out = StageOutput(tables={"t": pl.DataFrame({"a": [1, 2], "b": [0.5, None]})}, meta={"k": 1})
    c.save("curves", "abc", out)
    got = c.load("curves", "abc")
    assert got is not None and got.meta == {"k": 1} and got.tables["t"].equals(out.tables["t"])
    p = c.path("curves", "abc", "json")
    for bad in ({"stage": "curves", "key": "abc", "meta": {}},  # no tables
                {"stage": "curves", "key": "abc", "meta": {}, "tables": {"t": {"schema": 3}}},
                {"stage": "oracle", "key": "abc", "meta": {}, "tables": {}},  # another stage
                [1, 2, 3]):  # fmt: skip
        p.write_text(json.dumps(bad))
        assert c.load("curves", "abc") is None
    p.write_text("{truncated")
    assert c.load("curves", "abc") is None


@pytest.mark.parametrize("dtype", ["Int64", "Float64", "String", "Boolean"])
def test_every_stored_dtype_roundtrips(tmp_path, dtype):
    vals = {"Int64": [1, None], "Float64": [1.5, None], "String": ["x", None],
            "Boolean": [True, None]}[dtype]  # fmt: skip
    c = StageCache(tmp_path)
    df = pl.DataFrame({"c": vals})
    c.save("s", "k", StageOutput(tables={"t": df}, meta={}))
    assert c.load("s", "k").tables["t"].equals(df)
