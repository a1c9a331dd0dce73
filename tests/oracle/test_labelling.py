"""The label rows and the label table (oracle/labelling.py) from made-up evaluations: a
stand-in for the span evaluation (window mode) and for the carry oracle, a tiny made-up
trace, and every figure worked out by hand (r*, the flat band with the configured tolerance,
h2d_util, the grid columns, the warm-up span, the previous window's rates, the column order,
the metadata)."""

from __future__ import annotations

import math
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from conftest import spy_search_seeds

import helm_plan.oracle.labelling as lb
from helm_plan.exec.base import Executor
from helm_plan.oracle.config import OracleConfig
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.span import SpanEval

NAN = float("nan")
BW = 1000.0


def _ev(r, p99, att=1.0, mean=1.0, miss=0, emb=None, kv=None):
    return SpanEval(ratio=r, p50_ms=p99 / 2, p99_ms=p99, slo_attainment=att, mean_ms=mean,
                    emb_hit_rate=r / 4 if emb is None else emb,
                    kv_reuse_rate=1 - r if kv is None else kv, miss_bytes=miss)  # fmt: skip


def _ctx(ts=(), edges=(0,), bw=BW):
    ts = np.asarray(ts, np.float64)
    return SimpleNamespace(
        latency=SimpleNamespace(h2d_bw_Bps=bw),
        arrays=SimpleNamespace(ts_s=ts),
        first_visit=np.ones(len(ts), bool),
        ctx_len=np.arange(len(ts), dtype=np.int64) + 10,
        gpu=SimpleNamespace(name="gpu-x"),
        model=SimpleNamespace(name="model-y", default_slo_ms=100.0),
        pool_bytes=12345,
        pool_source="fraction 0.3",
        edges=lambda window_s: np.asarray(edges, np.int64),
    )


def test_label_row_by_hand():
    ocfg = OracleConfig(coarse_step=0.5, flat_tol=0.1)
    ncfg = NodeConfig(window_s=2.0, slo_ms=100.0)
    pts = {0.0: 12.0, 0.3: 10.5, 0.5: 10.0, 0.7: 11.5, 1.0: 20.0}
    full = {r: _ev(r, p, miss=int(r * 1000)) for r, p in pts.items()}
    evals = {r: (e.p99_ms, e.slo_attainment, e.mean_ms) for r, e in full.items()}
    row = lb.label_row(3, evals, full, _ctx(), ncfg, ocfg)
    assert row["window"] == 3 and row["r_star"] == 0.5 and row["p99_ms"] == 10.0
    assert row["p50_ms"] == 5.0 and row["slo_attainment"] == 1.0
    # flat band at tol 0.1: P99 <= 11 -> 0.3 and 0.5 (the 2% default would give 0.5 alone)
    assert (row["r_flat_lo"], row["r_flat_hi"]) == (0.3, 0.5)
    assert row["flatness"] == pytest.approx(0.2)
    assert row["n_evals"] == 5
    assert row["emb_hit_rate"] == 0.125 and row["kv_reuse_rate"] == 0.5
    assert row["h2d_util"] == 500 / (BW * 2.0)  # demand-miss bytes / (h2d_bw · window_s)
    for r, sfx in ((0.0, "r000"), (0.5, "r050"), (1.0, "r100")):
        assert row[f"p99_ms_{sfx}"] == pts[r]
        assert row[f"slo_att_{sfx}"] == 1.0
        assert row[f"emb_hit_{sfx}"] == r / 4
        assert row[f"kv_reuse_{sfx}"] == 1 - r
    assert "p99_ms_r030" not in row and len(row) == 12 + 4 * 3


def test_label_row_grid_keys_are_rounded_and_prev_r_breaks_ties():
    ocfg = OracleConfig(coarse_step=0.1)
    ncfg = NodeConfig(window_s=1.0)
    # two equal best points; the grid values are looked up at round(r, 9) (0.3, not 0.1·3)
    full = {round(k * 0.1, 9): _ev(round(k * 0.1, 9), 50.0) for k in range(11)}
    full[0.3] = _ev(0.3, 7.0, miss=40)
    full[0.7] = _ev(0.7, 7.0, miss=80)
    evals = {r: (e.p99_ms, e.slo_attainment, e.mean_ms) for r, e in full.items()}
    near_low = lb.label_row(0, evals, full, _ctx(bw=10.0), ncfg, ocfg)
    near_high = lb.label_row(0, evals, full, _ctx(bw=10.0), ncfg, ocfg, prev_r=0.9)
    assert near_low["r_star"] == 0.3 and near_low["h2d_util"] == 4.0
    assert near_high["r_star"] == 0.7 and near_high["h2d_util"] == 8.0
    assert near_low["p99_ms_r030"] == 7.0 and near_low["p99_ms_r020"] == 50.0
    assert len(near_low) == 12 + 4 * 11


def test_empty_row_is_all_nan_with_no_evaluations():
    row = lb.empty_row(4, OracleConfig(coarse_step=0.5))
    assert row["window"] == 4 and row["n_evals"] == 0
    keys = ["r_star", "p99_ms", "p50_ms", "slo_attainment", "flatness", "r_flat_lo",
            "r_flat_hi", "emb_hit_rate", "kv_reuse_rate", "h2d_util"]  # fmt: skip
    grid = [f"{m}_{s}" for s in ("r000", "r050", "r100")
            for m in ("p99_ms", "slo_att", "emb_hit", "kv_reuse")]  # fmt: skip
    assert list(row) == ["window", "r_star", "p99_ms", "p50_ms", "slo_attainment", "flatness",
                         "r_flat_lo", "r_flat_hi", "n_evals", "emb_hit_rate", "kv_reuse_rate",
                         "h2d_util", *grid]  # fmt: skip
    assert all(math.isnan(row[k]) for k in keys + grid)


# a made-up trace, window_s = 2: 3 requests, none, 4, 1
TS = [0.1, 0.5, 1.9, 4.2, 4.4, 5.0, 5.5, 6.5]
EDGES = [0, 3, 3, 7, 8]
GRID = [0.0, 0.02, 0.25, 0.5, 0.75, 0.98, 1.0]
TARGET = {0: 0.75, 3: 0.25, 7: 1.0}  # by the window's first request


def _span_p99(r, s, ws):
    return 10.0 + (r - TARGET[s]) ** 2 + 0.01 * (s - ws)


@pytest.fixture
def spans(monkeypatch):
    calls = []

    def evaluate_span(ctx, r, ws, s, e, ncfg):
        calls.append((ctx, r, ws, s, e, ncfg))
        return _ev(r, _span_p99(r, s, ws), miss=s * 100 + int(r * 100), emb=s + r, kv=e + r)

    monkeypatch.setattr(lb, "evaluate_span", evaluate_span)
    return calls, spy_search_seeds(monkeypatch, lb)


def test_window_task_warms_on_the_previous_windows(spans):
    calls, seeds = spans
    ctx, ncfg = _ctx(TS, EDGES), NodeConfig(window_s=2.0, slo_ms=100.0)
    ocfg = OracleConfig(grid_step=0.25, coarse_step=0.5, seed=9, warmup_windows=2)
    edges = np.array(EDGES)
    row = lb.window_task((ctx, ncfg, ocfg, edges, True), 3)
    # window 3 is [7, 8); warm-up from window 1's start (3)
    assert {c[1] for c in calls} == set(GRID) and len(calls) == len(GRID)
    assert all(c[0] is ctx and c[2:] == (3, 7, 8, ncfg) for c in calls)
    assert row["window"] == 3 and row["r_star"] == 1.0 and row["n_evals"] == 7
    assert row["p99_ms"] == pytest.approx(10.04)
    assert row["emb_hit_rate"] == 8.0 and row["kv_reuse_rate"] == 9.0
    assert row["h2d_util"] == (700 + 100) / (BW * 2.0)
    assert seeds == [int(np.random.SeedSequence([9, 3]).generate_state(1)[0])]
    calls.clear()
    row = lb.window_task((ctx, ncfg, ocfg, edges, True), 0)  # warm-up clipped at window 0
    assert all(c[2:5] == (0, 0, 3) for c in calls) and row["r_star"] == 0.75
    calls.clear()
    row = lb.window_task((ctx, ncfg, ocfg, edges, True), 1)  # empty: no evaluation
    assert calls == [] and row["n_evals"] == 0 and math.isnan(row["r_star"])
    assert "p99_ms_r050" in row and "p99_ms_r025" not in row


class Recording(Executor):
    def __init__(self) -> None:
        self.maps: list[dict] = []

    @property
    def workers(self) -> int:
        return 1

    def map(self, fn, items, *, shared=None, progress=None, label=None):
        self.maps.append({"items": list(items), "shared": shared, "progress": progress,
                          "label": label})  # fmt: skip
        return [fn(shared, it) for it in items]


HEAD = ["window", "start_s", "end_s", "requests", "warmup_start_s", "arrival_rate_rps",
        "rate_trend", "burst_score", "interarrival_cv", "cold_user_share", "hist_len_mean",
        "hist_len_p95", "emb_hit_rate", "kv_reuse_rate", "h2d_util", "emb_hit_prev",
        "kv_reuse_prev", "r_star", "p99_ms", "p50_ms", "slo_attainment", "flatness",
        "r_flat_lo", "r_flat_hi", "n_evals"]  # fmt: skip
GRID_COLS = {f"{m}_{s}" for s in ("r000", "r050", "r100")
             for m in ("p99_ms", "slo_att", "emb_hit", "kv_reuse")}  # fmt: skip


def test_label_windows_in_window_mode(spans):
    ctx, ncfg = _ctx(TS, EDGES), NodeConfig(window_s=2.0, slo_ms=100.0)
    ocfg = OracleConfig(grid_step=0.25, coarse_step=0.5, warmup="window", warmup_windows=1)
    ex = Recording()
    seen = []
    lab = lb.label_windows(ctx, ncfg, ocfg, progress=lambda d, t: seen.append((d, t)),
                           executor=ex)  # fmt: skip
    t = lab.table
    assert t.columns[: len(HEAD)] == HEAD and set(t.columns[len(HEAD) :]) == GRID_COLS
    assert t["window"].dtype == pl.Int64 and t["n_evals"].dtype == pl.Int64
    assert t["requests"].dtype == pl.Int64
    assert t["window"].to_list() == [0, 1, 2, 3]
    assert t["start_s"].to_list() == [0.0, 2.0, 4.0, 6.0]
    assert t["end_s"].to_list() == [2.0, 4.0, 6.0, 8.0]
    assert t["requests"].to_list() == [3, 0, 4, 1]
    assert t["warmup_start_s"].to_list() == [0.0, 0.0, 2.0, 4.0]
    assert t["arrival_rate_rps"].to_list() == [1.5, 0.0, 2.0, 0.5]
    r_star = t["r_star"].to_numpy()
    assert r_star[[0, 2, 3]].tolist() == [0.75, 0.25, 1.0] and math.isnan(r_star[1])
    assert t["n_evals"].to_list() == [7, 0, 7, 7]
    emb = t["emb_hit_rate"].to_numpy()
    assert emb[[0, 2, 3]].tolist() == [0.75, 3.25, 8.0]
    kv = t["kv_reuse_rate"].to_numpy()
    # the previous window's rates; NaN (not null) at window 0 and after the empty window
    for col, base in (("emb_hit_prev", emb), ("kv_reuse_prev", kv)):
        prev = t[col].to_numpy()
        assert t[col].null_count() == 0 and math.isnan(prev[0]) and math.isnan(prev[2])
        assert prev[1] == base[0] and prev[3] == base[2]
    assert t["p99_ms_r050"].null_count() == 0 and math.isnan(t["p99_ms_r050"][1])
    # window 2 warms from window 1, which is empty: span start = request 3 = its own start
    assert t["p99_ms_r050"][2] == 10.0625
    assert t["p99_ms_r050"][3] == pytest.approx(10.0 + 0.25 + 0.01 * 4)
    # the executor ran one task per window with the trace, configs and edges, the most
    # requests replayed first (window + warm-up: 3, 0 + 3, 4 + 0, 1 + 4; ties by window)
    (m,) = ex.maps
    assert m["items"] == [3, 2, 0, 1] and m["label"](2) == "window 2"
    assert m["shared"][0] is ctx and m["shared"][1] is ncfg and m["shared"][2] is ocfg
    assert m["shared"][3].tolist() == EDGES and m["progress"] is not None
    assert lab.window_s == 2.0 and lab.coarse_grid == (0.0, 0.5, 1.0)
    assert all(type(r) is float for r in lab.coarse_grid)
    assert lab.schedule_run is None
    assert lab.meta == {
        "node": asdict(ncfg), "oracle": asdict(ocfg), "gpu": "gpu-x", "model": "model-y",
        "pool_bytes": 12345, "pool_source": "fraction 0.3",
    }  # fmt: skip


def test_label_windows_window_mode_runs_serially_by_default(spans):
    calls, _ = spans
    ctx, ncfg = _ctx(TS, EDGES), NodeConfig(window_s=2.0, slo_ms=100.0)
    ocfg = OracleConfig(grid_step=0.25, coarse_step=0.5, warmup="window", warmup_windows=0)
    seen = []
    lab = lb.label_windows(ctx, ncfg, ocfg, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    assert lab.table["warmup_start_s"].to_list() == [0.0, 2.0, 4.0, 6.0]
    assert {c[2] for c in calls} == {0, 3, 7}  # no warm-up: each window starts cold


def test_label_windows_in_carry_mode(monkeypatch):
    got = {}

    def carry_rows(ctx, ncfg, ocfg, label_row, empty_row, progress, executor, grid):
        got.update(ctx=ctx, ncfg=ncfg, ocfg=ocfg, progress=progress, executor=executor, grid=grid)
        full = {r: _ev(r, 5.0, miss=300) for r in (0.0, 0.5, 1.0)}
        full[0.5] = _ev(0.5, 5.0, miss=300, emb=0.9)
        evals = {r: (e.p99_ms, e.slo_attainment, e.mean_ms) for r, e in full.items()}
        # three equal points: prev_r = 1 picks 1.0 in window 2, none picks 0.0 in window 0
        rows = [label_row(2, evals, full, 1.0), empty_row(1), label_row(0, evals, full, None)]
        rows.append(empty_row(3))
        return rows, "the run"

    monkeypatch.setattr(lb, "carry_rows", carry_rows)
    ctx, ncfg = _ctx(TS, EDGES, bw=50.0), NodeConfig(window_s=2.0, slo_ms=100.0)
    ocfg = OracleConfig(coarse_step=0.5, flat_tol=0.0)
    ex, prog = object(), object()
    lab = lb.label_windows(ctx, ncfg, ocfg, progress=prog, executor=ex)
    want = {"ctx": ctx, "ncfg": ncfg, "ocfg": ocfg, "progress": prog, "executor": ex}
    assert got == {**want, "grid": True}
    t = lab.table
    assert t["window"].to_list() == [0, 1, 2, 3]  # sorted by window
    r_star = t["r_star"].to_numpy()
    assert r_star[0] == 0.0 and r_star[2] == 1.0 and math.isnan(r_star[1])
    assert t["n_evals"].to_list() == [3, 0, 3, 0]  # the empty rows are windows 1 and 3
    assert t["h2d_util"][0] == 300 / (50.0 * 2.0)
    assert t["flatness"][0] == 1.0  # three equal P99s: the band is [0, 1]
    assert t["warmup_start_s"].to_list() == [0.0] * 4  # the whole past warms every window
    assert t["emb_hit_r050"][2] == 0.9
    assert t.columns[: len(HEAD)] == HEAD and set(t.columns[len(HEAD) :]) == GRID_COLS
    assert lab.schedule_run == "the run"
    assert lab.coarse_grid == (0.0, 0.5, 1.0)


def test_label_windows_time_columns_are_float_for_an_int_window(spans):
    # NodeConfig takes window_s=2 (an int): the bounds and warm-up starts stay Float64
    ctx, ncfg = _ctx(TS, EDGES), NodeConfig(window_s=2)
    ocfg = OracleConfig(grid_step=0.5, coarse_step=0.5, warmup="window", warmup_windows=1)
    t = lb.label_windows(ctx, ncfg, ocfg).table
    for col, want in (("start_s", [0, 2, 4, 6]), ("end_s", [2, 4, 6, 8]),
                      ("warmup_start_s", [0, 0, 2, 4])):  # fmt: skip
        assert t[col].dtype == pl.Float64 and t[col].to_list() == want


def test_window_tasks_run_longest_first():
    from helm_plan.oracle.labelling import longest_first

    # hand-worked: a window's cost is its requests plus its warm-up windows' requests
    edges = np.array([0, 10, 12, 30, 31])
    assert longest_first(edges, 1) == [2, 3, 1, 0]  # costs 10, 12, 20, 19
    assert longest_first(edges, 0) == [2, 0, 1, 3]  # costs 10, 2, 18, 1
    assert longest_first(edges, 5) == [3, 2, 1, 0]  # costs 10, 12, 30, 31
    assert longest_first(np.array([0, 5, 10, 10]), 0) == [0, 1, 2]  # ties: lower window first
