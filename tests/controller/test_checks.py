"""Controller and label-set files are checked on load (helm_plan/controller/checks.py).

Each malformed file is one HelmPlanError naming the file and the problem, with a fix; none is
unpickled, none is run. The valid files load back to what was saved.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from helm_plan.cache.ghost import GRID_POINTS
from helm_plan.controller import dataset
from helm_plan.controller.runtime import DEFAULT_PATH, Controller
from helm_plan.errors import HelmPlanError
from helm_plan.oracle import read_labels
from helm_plan.oracle.labels import Labels, write_labels

with np.load(DEFAULT_PATH, allow_pickle=False) as _z:
    SHIPPED = {k: _z[k] for k in _z.files}


def _controller(tmp_path, name, **changes):
    """The shipped controller's arrays with ``changes`` (None deletes one), saved as ``name``."""
    d = {k: v for k, v in ({**SHIPPED, **changes}).items() if v is not None}
    p = tmp_path / name
    np.savez(p, **d)
    return p


def _nan(a: np.ndarray, k: int | None = None) -> np.ndarray:
    a = a.astype(np.float64).copy()
    if k is None:
        a[...] = np.nan
    else:
        a.flat[k] = np.nan
    return a


BAD_CONTROLLERS = {
    "card-not-json": ({"card": np.array("{not json")}, "card is not JSON"),
    "card-a-list": ({"card": np.array("[1, 2]")}, "card is a JSON list"),
    "W0-1-D": ({"W0": SHIPPED["W0"].ravel()}, "W0 is 1-D"),
    "W1-mismatched": ({"W1": SHIPPED["W1"][:, :5]}, "W1 takes 5 inputs, W0 gives 32"),
    "no-b0": ({"b0": None}, "no b0"),
    "b2-short": ({"b2": SHIPPED["b2"][:3]}, "b2 has shape (3,)"),
    "no-shifts-left": ({"shifts": np.zeros(0)}, "shifts has shape (0,)"),
    "zero-shifts": ({"shifts": np.zeros(len(SHIPPED["shifts"]))}, "must be distinct shifts"),
    "nan-weights": ({"W0": _nan(SHIPPED["W0"])}, f"W0 holds {SHIPPED['W0'].size} NaN"),
    "nan-bias": ({"b1": _nan(SHIPPED["b1"], 3)}, "b1 holds 1 NaN"),
    # the shipped actor's one NaN shift is its jump action: a second is refused
    "nan-shift": ({"shifts": _nan(SHIPPED["shifts"], 0)}, "shifts holds 2 NaN"),
    "inf-shift": (
        {"shifts": np.where(np.isnan(SHIPPED["shifts"]), np.inf, SHIPPED["shifts"])},
        "shifts holds 1 NaN or infinite",
    ),
    "text-weights": ({"W0": np.full(SHIPPED["W0"].shape, "x")}, "W0 holds <U1 values"),
    "other-features": ({"feature_version": np.array("0")}, "trained on feature version 0"),
    "pickled": ({"W0": np.array([object()], dtype=object)}, "cannot read"),
}


@pytest.mark.parametrize(("changes", "needle"), BAD_CONTROLLERS.values(), ids=BAD_CONTROLLERS)
def test_a_malformed_controller_is_refused_with_one_line(tmp_path, changes, needle):
    p = _controller(tmp_path, "c.npz", **changes)
    with pytest.raises(HelmPlanError, match=re.escape(needle)) as e:
        Controller.load(p)
    assert "\n" not in e.value.one_line() and e.value.hint
    assert str(p) in str(e.value) or "c.npz" in str(e.value)


def test_a_truncated_or_foreign_controller_is_refused(tmp_path):
    whole = DEFAULT_PATH.read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "text.npz").write_text("not a zip\n")
    for name in ("cut.npz", "text.npz"):
        with pytest.raises(HelmPlanError, match=f"cannot read .*{name} as a controller"):
            Controller.load(tmp_path / name)


def test_the_shipped_controller_loads_and_decides_like_its_arrays():
    c = Controller.load(DEFAULT_PATH)
    np.testing.assert_array_equal(c.shifts, SHIPPED["shifts"])
    x = np.linspace(-1, 1, c._W[0].shape[1])
    h = x
    for i in range(len(c._W) - 1):
        h = np.tanh(SHIPPED[f"W{i}"] @ h + SHIPPED[f"b{i}"])
    last = len(c._W) - 1
    logits = SHIPPED[f"W{last}"] @ h + SHIPPED[f"b{last}"]
    c0 = c.with_config(dataclasses.replace(c.cfg, hold_margin=0.0))
    # the shift of the argmax logit (NaN: the jump to the curve's optimum)
    assert np.array_equal([c0.base_shift(x)], [SHIPPED["shifts"][int(np.argmax(logits))]],
                          equal_nan=True)  # fmt: skip


# --------------------------------------------------------------------------- label sets


def _label_trace(n_w: int = 3, g: int = 4) -> dataset.LabelTrace:
    rng = np.random.default_rng(0)
    grid = np.tile(np.linspace(0, 1, g), (n_w, 1))
    return dataset.LabelTrace(
        name="hand", window_s=10.0, slo_ms=2.5,
        arrival=rng.uniform(0, 1, (n_w, len(dataset.ARRIVAL_KEYS))),
        grid_r=grid, grid_p99_ms=rng.uniform(1, 2, (n_w, g)),
        grid_emb_hit=rng.uniform(0, 1, (n_w, g)), grid_kv_reuse=rng.uniform(0, 1, (n_w, g)),
        r_star=np.array([0.2, np.nan, 0.6])[:n_w], p99_star_ms=np.array([1.0, np.nan, 1.5])[:n_w],
        flat_lo=np.zeros(n_w), flat_hi=np.ones(n_w), h2d_util_star=np.zeros(n_w),
        ghost_emb=rng.uniform(0, 1, (n_w, GRID_POINTS)),
        ghost_kv=rng.uniform(0, 1, (n_w, GRID_POINTS)),
        ghost_lookup_bytes=np.full(n_w, 100.0), ghost_ctx_tokens=np.full(n_w, 50.0),
        grid_slo_att=rng.uniform(0.9, 1, (n_w, g)), busy_s=np.full(n_w, 3.0),
        gain=rng.uniform(-0.1, 0.1, (n_w, GRID_POINTS)), sched_r=np.full(n_w, 0.4),
        emb_s_per_byte=1e-9, kv_s_per_token=1e-7, slots=1, max_seq_len=1024,
    )  # fmt: skip


def test_a_label_set_loads_back_to_what_was_saved(tmp_path):
    tr = _label_trace()
    dataset.save([tr, tr], tmp_path / "set.npz")
    back = dataset.load(tmp_path / "set.npz")
    assert len(back) == 2
    for f in dataclasses.fields(tr):
        a, b = getattr(tr, f.name), getattr(back[1], f.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b, f.name


def _label_set(tmp_path, **changes):
    """A saved one-trace label set's arrays with ``changes`` (None deletes one)."""
    dataset.save([_label_trace()], tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz", allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    d = {k: v for k, v in ({**d, **changes}).items() if v is not None}
    np.savez(tmp_path / "bad.npz", **d)
    return tmp_path / "bad.npz"


BAD_SETS = {
    "ragged-r_star": ({"0.r_star": np.zeros(2)}, "has shape"),
    "nan-window": ({"0.window_s": np.array(np.nan)}, "window_s must be positive and finite"),
    "zero-slo": ({"0.slo_ms": np.array(0.0)}, "slo_ms must be positive and finite"),
    "ratio-above-1": ({"0.grid_r": np.full((3, 4), 1.5)}, "ratios outside"),
    "r_star-below-0": ({"0.r_star": np.array([-0.1, 0.2, 0.3])}, "ratios outside"),
    "nan-ghost": ({"0.ghost_emb": np.full((3, GRID_POINTS), np.nan)}, "ghost_emb holds"),
    "inf-p99": ({"0.grid_p99_ms": np.full((3, 4), np.inf)}, "grid_p99_ms holds infinite"),
    "ghost-short": ({"0.ghost_kv": np.zeros((3, 7))}, "ghost_kv has shape"),
    "missing-field": ({"0.flat_hi": None}, "has no flat_hi"),
    "other-version": ({"set_version": np.array("0")}, "not a helm-plan label set of version"),
    "count-not-a-count": ({"n": np.array("two")}, "trace count n"),
    "pickled": ({"0.name": np.array([object()], dtype=object)}, "cannot read"),
}


@pytest.mark.parametrize(("changes", "needle"), BAD_SETS.values(), ids=BAD_SETS)
def test_a_malformed_label_set_is_refused_with_one_line(tmp_path, changes, needle):
    p = _label_set(tmp_path, **changes)
    with pytest.raises(HelmPlanError, match=re.escape(needle)) as e:
        dataset.load(p)
    assert "\n" not in e.value.one_line() and e.value.hint and "bad.npz" in str(e.value)


def test_a_truncated_label_set_is_refused(tmp_path):
    dataset.save([_label_trace()], tmp_path / "ok.npz")
    whole = (tmp_path / "ok.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[: len(whole) // 3])
    with pytest.raises(HelmPlanError, match="cannot read .*cut.npz as a label set"):
        dataset.load(tmp_path / "cut.npz")


# --------------------------------------------------------------------- oracle labels parquet


def _labels_file(tmp_path, r_star=(0.1, float("nan"), 0.9), meta=None):
    n = len(r_star)
    table = pl.DataFrame({"window": np.arange(n), "start_s": np.arange(n) * 10.0,
                          "end_s": np.arange(1, n + 1) * 10.0, "requests": np.ones(n, np.int64),
                          "r_star": np.array(r_star), "p99_ms": np.ones(n),
                          "slo_attainment": np.ones(n)})  # fmt: skip
    p = write_labels(Labels(table, 10.0, (0.0, 0.5, 1.0), {}), tmp_path / "labels.parquet")
    if meta:
        t = pq.read_table(p)
        md = {**(t.schema.metadata or {}), **{k.encode(): v.encode() for k, v in meta.items()}}
        pq.write_table(t.replace_schema_metadata(md), p)
    return p


def test_oracle_labels_load_back_and_bad_ones_are_refused(tmp_path):
    lab = read_labels(_labels_file(tmp_path))
    assert lab.window_s == 10.0 and lab.coarse_grid == (0.0, 0.5, 1.0)
    np.testing.assert_array_equal(lab.r_star, [0.1, np.nan, 0.9])
    for kw, needle in [
        ({"r_star": (0.1, 1.5)}, "r_star holds ratios outside"),
        ({"meta": {"helm_plan.labels_schema_version": "9"}}, "labels schema 9"),
        ({"meta": {"helm_plan.window_s": "soon"}}, "unreadable metadata"),
        ({"meta": {"helm_plan.coarse_grid": "[0.0, 2.0]"}}, "out of range"),
        ({"meta": {"helm_plan.window_s": "-1"}}, "out of range"),
    ]:
        with pytest.raises(HelmPlanError, match=needle):
            read_labels(_labels_file(tmp_path, **kw))


def test_a_nan_controller_is_never_run(tmp_path, small_trace):
    """The issue's case: all-NaN weights were accepted and walked r from 0.5 to 0."""
    from helm_plan_cli.main import app
    from typer.testing import CliRunner

    p = _controller(tmp_path, "nan.npz", W0=_nan(SHIPPED["W0"]), W1=_nan(SHIPPED["W1"]))
    for args in (["simulate", str(small_trace), "--policy", f"controller:{p}"],
                 ["validate", str(p), str(small_trace)]):  # fmt: skip
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and r.stdout == "", (args, r.output)
        assert r.stderr.startswith("error: ") and f"W0 holds {SHIPPED['W0'].size} NaN" in r.stderr
        assert json.dumps(r.stderr).count("\\n") == 1  # one line
