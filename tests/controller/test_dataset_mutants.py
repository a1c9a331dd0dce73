"""Label traces (``controller/dataset.py``) gathered from hand-made oracle labels and a scripted
node, and their ``.npz`` round trip (issue 16, item 4).

The labels have three windows on the grid (0, 0.5, 1): r* = 0.3 (inserted between 0 and 0.5),
NaN (an empty window: its slot sits at 0.5, after the grid's own 0.5) and 0.5 (after the grid's
0.5 again), so every row of the gathered grids is written out by hand. The ghost replay runs
the oracle schedule (NaN filled forward) on a stand-in node whose windows are scripted.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from helm_plan.controller import dataset as D
from helm_plan.controller.dataset import ARRIVAL_KEYS, LabelTrace
from helm_plan.errors import InputFileError
from helm_plan.sim import NodeConfig

NAN = np.nan
CG = (0.0, 0.5, 1.0)
GRIDS = {
    "p99_ms": [[10.0, 6.0, 8.0], [20.0, 15.0, 12.0], [5.0, 4.0, 3.0]],
    "emb_hit": [[0.0, 0.5, 0.9], [0.1, 0.2, 0.3], [0.4, 0.5, 0.6]],
    "kv_reuse": [[0.9, 0.5, 0.1], [0.8, 0.7, 0.6], [0.3, 0.2, 0.1]],
}


def _labels(r_star=(0.3, NAN, 0.5)):
    cols = {"r_star": list(r_star), "p99_ms": [5.0, NAN, 3.5], "emb_hit_rate": [0.35, NAN, 0.55],
            "kv_reuse_rate": [0.6, NAN, 0.25], "r_flat_lo": [0.2, NAN, 0.4],
            "r_flat_hi": [0.4, NAN, 0.7], "h2d_util": [0.11, 0.0, 0.33]}  # fmt: skip
    cols |= {k: [10.0 * i + w for w in range(3)] for i, k in enumerate(ARRIVAL_KEYS)}
    return SimpleNamespace(table=pl.DataFrame(cols), coarse_grid=CG,
                           grid=lambda metric: np.array(GRIDS[metric]))  # fmt: skip


CTX = SimpleNamespace(workload="WL", pool_bytes=321, model=SimpleNamespace(kv_bytes_per_token=6),
                      latency=SimpleNamespace(h2d_bw_Bps=100.0, host_gather_Bps=400.0,
                                              dense_s_per_token=0.003))  # fmt: skip
NCFG = NodeConfig(window_s=5.0, slo_ms=8.0)
# per window of the replay: requests, first request
SCRIPT = [(5, 0), (0, 5), (3, 5)]


@pytest.fixture
def node(monkeypatch):
    log = SimpleNamespace(calls=[], steps=[])

    class Runner:
        def __init__(self, ctx, cfg):
            log.calls.append(("runner", ctx, cfg))
            self.i = 0

        def step(self, r):
            log.steps.append(r)
            n, first = SCRIPT[self.i]
            self.i += 1
            return SimpleNamespace(requests=n, first=first, n_computed=f"NC{first}")

    class Ghost:
        def __init__(self, *a):
            log.calls.append(("ghost", *a))

        def observe(self, a, b, nc):
            log.calls.append(("observe", a, b, nc))
            return SimpleNamespace(emb_hit_bytes=np.full(101, 10.0 * (a + 1)),
                                   kv_reused_tokens=np.full(101, 7.0 * (a + 1)),
                                   lookup_bytes=100.0 + a, ctx_tokens=50.0 + a)  # fmt: skip

    def label_windows(ctx, ncfg, ocfg, progress):
        log.calls.append(("label_windows", ctx, ncfg, ocfg, progress))
        return _labels()

    monkeypatch.setattr(D, "NodeRunner", Runner)
    monkeypatch.setattr(D, "Ghost", Ghost)
    monkeypatch.setattr(D, "label_windows", label_windows)
    return log


def test_cost_coefficients_by_hand():
    assert D.cost_coefficients(CTX) == (1 / 100.0 + 1 / 400.0, 0.003)


def test_build_gathers_the_grids_by_hand(node):
    tr = D.build(CTX, NCFG, "OCFG", "trace-x", labels=_labels())
    assert tr.name == "trace-x" and tr.window_s == 5.0 and tr.slo_ms == 8.0
    np.testing.assert_array_equal(tr.grid_r, [[0.0, 0.3, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0],
                                              [0.0, 0.5, 0.5, 1.0]])  # fmt: skip
    np.testing.assert_array_equal(tr.grid_p99_ms, [[10.0, 5.0, 6.0, 8.0], [20.0, 15.0, NAN, 12.0],
                                                   [5.0, 4.0, 3.5, 3.0]])  # fmt: skip
    np.testing.assert_array_equal(tr.grid_emb_hit, [[0.0, 0.35, 0.5, 0.9], [0.1, 0.2, NAN, 0.3],
                                                    [0.4, 0.5, 0.55, 0.6]])  # fmt: skip
    np.testing.assert_array_equal(tr.grid_kv_reuse, [[0.9, 0.6, 0.5, 0.1], [0.8, 0.7, NAN, 0.6],
                                                     [0.3, 0.2, 0.25, 0.1]])  # fmt: skip
    np.testing.assert_array_equal(tr.r_star, [0.3, NAN, 0.5])
    np.testing.assert_array_equal(tr.p99_star_ms, [5.0, NAN, 3.5])
    np.testing.assert_array_equal(tr.flat_lo, [0.2, NAN, 0.4])
    np.testing.assert_array_equal(tr.flat_hi, [0.4, NAN, 0.7])
    np.testing.assert_array_equal(tr.h2d_util_star, [0.11, 0.0, 0.33])
    assert tr.arrival.shape == (3, len(ARRIVAL_KEYS))
    np.testing.assert_array_equal(tr.arrival[:, 2], [20.0, 21.0, 22.0])
    np.testing.assert_array_equal(tr.arrival[1], [10.0 * i + 1 for i in range(len(ARRIVAL_KEYS))])
    assert tr.emb_s_per_byte == 1 / 100.0 + 1 / 400.0 and tr.kv_s_per_token == 0.003
    assert tr.n_windows == 3


def test_build_replays_the_schedule_for_the_ghost(node):
    tr = D.build(CTX, NCFG, "OCFG", "trace-x", labels=_labels())
    (ghost, runner, *observed) = node.calls
    assert runner[0] == "runner" and runner[1] is CTX
    assert runner[2] == dataclasses.replace(NCFG, refill="lazy")  # the carry oracle's refill
    assert ghost == ("ghost", "WL", 321, 6)
    # the schedule: r* with the empty window filled forward
    assert node.steps == [0.3, 0.3, 0.5] and all(type(r) is float for r in node.steps)
    assert observed == [("observe", 0, 5, "NC0"), ("observe", 5, 8, "NC5")]
    assert tr.ghost_emb.shape == (3, 101) and tr.ghost_kv.shape == (3, 101)
    np.testing.assert_array_equal(tr.ghost_emb[:, 50], [10.0, 0.0, 60.0])
    np.testing.assert_array_equal(tr.ghost_kv[:, 7], [7.0, 0.0, 42.0])
    np.testing.assert_array_equal(tr.ghost_lookup_bytes, [100.0, 0.0, 105.0])
    np.testing.assert_array_equal(tr.ghost_ctx_tokens, [50.0, 0.0, 55.0])


def test_build_all_empty_schedule_and_labelling(node, monkeypatch):
    monkeypatch.setattr(D, "label_windows", lambda *a: (node.calls.append(("lw", *a)),
                                                         _labels((NAN, NAN, NAN)))[1])  # fmt: skip
    tr = D.build(CTX, NCFG, "OCFG", "t", progress="PROG")
    assert node.calls[0] == ("lw", CTX, NCFG, "OCFG", "PROG")  # labels made when not given
    assert node.steps == [0.5, 0.5, 0.5]  # no r* anywhere: the middle split
    np.testing.assert_array_equal(tr.grid_r[0], [0.0, 0.5, 0.5, 1.0])


# ---- save / load ---------------------------------------------------------------------------


def _trace(name, k):
    rng = np.random.default_rng(k)
    return LabelTrace(
        name=name, window_s=5.0 + k, slo_ms=8.0 + k, arrival=rng.random((2, len(ARRIVAL_KEYS))),
        grid_r=rng.random((2, 4)), grid_p99_ms=rng.random((2, 4)), grid_emb_hit=rng.random((2, 4)),
        grid_kv_reuse=rng.random((2, 4)), r_star=np.array([0.3, NAN]),
        p99_star_ms=rng.random(2), flat_lo=rng.random(2), flat_hi=rng.random(2),
        h2d_util_star=rng.random(2), ghost_emb=rng.random((2, 101)), ghost_kv=rng.random((2, 101)),
        ghost_lookup_bytes=rng.random(2), ghost_ctx_tokens=rng.random(2),
        emb_s_per_byte=1e-3 * (k + 1), kv_s_per_token=2e-3 * (k + 1),
    )  # fmt: skip


def test_save_load_round_trip(tmp_path):
    trs = [_trace("first", 0), _trace("second", 1)]
    p = D.save(trs, tmp_path / "set.npz")
    assert p == tmp_path / "set.npz" and p.is_file()
    with np.load(p, allow_pickle=False) as z:
        assert str(z["set_version"]) == "1" and int(z["n"]) == 2
        np.testing.assert_array_equal(z["1.ghost_kv"], trs[1].ghost_kv)
        assert str(z["0.name"]) == "first"
    back = D.load(p)
    assert len(back) == 2
    for a, b in zip(back, trs, strict=True):
        for f in dataclasses.fields(LabelTrace):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(y, np.ndarray):
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y and type(x) is type(y), f.name


def test_write_npz(tmp_path):
    p = D.write_npz(tmp_path / "a.npz", {"x": np.arange(3), "y": np.array("s")})
    assert p == tmp_path / "a.npz"
    with np.load(p) as z:
        assert z["x"].tolist() == [0, 1, 2] and str(z["y"]) == "s"


def test_load_errors(tmp_path):
    with pytest.raises(InputFileError, match="label set .*missing.npz not found") as e:
        D.load(tmp_path / "missing.npz")
    make = "make one with `helm-plan train TRACE... --save-labels FILE`"
    assert e.value.hint == make
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz")
    with pytest.raises(InputFileError, match="cannot read .*bad.npz as a label set") as e:
        D.load(bad)
    assert e.value.hint == make
    for arrays in ({"n": np.array(0)}, {"set_version": np.array("2"), "n": np.array(0)}):
        p = D.write_npz(tmp_path / "old.npz", arrays)
        with pytest.raises(InputFileError, match="not a helm-plan label set of version 1") as e:
            D.load(p)
        assert e.value.hint == "rebuild it with `helm-plan train TRACE... --save-labels FILE`"
    p = D.write_npz(tmp_path / "empty.npz", {"set_version": np.array("1"), "n": np.array(0)})
    assert D.load(p) == []
