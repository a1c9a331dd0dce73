"""Label traces against the oracle's labels and an independent replay of the schedule, and
their ``.npz`` round trip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from controller_fixtures import NODE, small_ctx, small_label_trace

from helm_plan.cache.ghost import Ghost
from helm_plan.controller import dataset as D
from helm_plan.controller.dataset import LabelTrace, cost_coefficients
from helm_plan.controller.features import p99_gain
from helm_plan.errors import InputFileError
from helm_plan.oracle import OracleConfig, label_windows
from helm_plan.sim import simulate_node
from helm_plan.sim.policy import SchedulePolicy, fill_forward


def test_grids_are_the_labels_with_the_oracle_point_inserted():
    ctx = small_ctx()
    tr = small_label_trace()
    lab = label_windows(ctx, NODE, OracleConfig(trials=0))
    cg = np.array(lab.coarse_grid)
    t = lab.table
    for w in range(tr.n_windows):
        rs = tr.r_star[w]
        assert np.all(np.diff(tr.grid_r[w]) >= 0)
        if not np.isfinite(rs):
            continue
        k = int(np.flatnonzero(tr.grid_r[w] == rs)[-1])
        assert tr.grid_p99_ms[w, k] == t["p99_ms"][w] and tr.grid_slo_att[w, k] == t[
            "slo_attainment"][w]  # fmt: skip
        rest = np.delete(np.arange(len(cg) + 1), k)
        np.testing.assert_array_equal(tr.grid_r[w, rest], cg)
        np.testing.assert_array_equal(tr.grid_p99_ms[w, rest], lab.grid("p99_ms")[w])
        np.testing.assert_array_equal(tr.grid_slo_att[w, rest], lab.grid("slo_att")[w])
    assert (tr.slots, tr.max_seq_len) == (NODE.slots, ctx.model.max_seq_len)


def test_busy_seconds_ghost_and_gain_are_those_of_the_schedules_replay():
    ctx = small_ctx()
    tr = small_label_trace()
    sched = fill_forward(tr.r_star)
    np.testing.assert_array_equal(tr.sched_r, sched)
    run = simulate_node(ctx, SchedulePolicy(sched), dataclasses.replace(NODE, refill="lazy"))
    w_of = run.window_idx
    busy = np.bincount(w_of, weights=run.service_s, minlength=tr.n_windows)
    np.testing.assert_allclose(tr.busy_s, busy, rtol=1e-12)
    # the ghost and the counterfactual P99 of the same windows, computed here on their own
    ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token)
    e, k = cost_coefficients(ctx)
    edges = ctx.edges(NODE.window_s)
    for w in range(tr.n_windows):
        s, t = int(edges[w]), int(edges[w + 1])
        c = ghost.observe_requests(np.arange(s, t), run.n_computed[s:t], per_request=True)
        np.testing.assert_array_equal(tr.ghost_emb[w], c.emb_hit_bytes)
        np.testing.assert_array_equal(tr.ghost_kv[w], c.kv_reused_tokens)
        saved = c.emb_hit_bytes_req * e + c.kv_reused_tokens_req * k
        want = p99_gain(run.service_s[s:t], run.sojourn_s[s:t], sched[w], NODE.window_s, 1, saved)
        np.testing.assert_allclose(tr.gain[w], want, atol=1e-12)
        assert tr.gain[w][int(round(sched[w] * 100))] == 0.0


def test_save_load_round_trip(tmp_path):
    tr = small_label_trace()
    other = dataclasses.replace(tr, name="second", slo_ms=7.0)
    p = D.save([tr, other], tmp_path / "set.npz")
    back = D.load(p)
    assert [b.name for b in back] == ["small-burst", "second"]
    for a, b in zip(back, [tr, other], strict=True):
        for f in dataclasses.fields(LabelTrace):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(y, np.ndarray):
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y and type(x) is type(y), f.name


def test_load_errors(tmp_path):
    make = "make one with `helm-plan train TRACE... --save-labels FILE`"
    with pytest.raises(InputFileError, match="label set .*missing.npz not found") as e:
        D.load(tmp_path / "missing.npz")
    assert e.value.hint == make
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz")
    with pytest.raises(InputFileError, match="cannot read .*bad.npz as a label set"):
        D.load(bad)
    for arrays in ({"n": np.array(0)}, {"set_version": np.array("1"), "n": np.array(0)}):
        p = D.write_npz(tmp_path / "old.npz", arrays)
        with pytest.raises(InputFileError, match="not a helm-plan label set of version 2") as e:
            D.load(p)
        assert e.value.hint == "rebuild it with `helm-plan train TRACE... --save-labels FILE`"
    p = D.write_npz(tmp_path / "empty.npz", {"set_version": np.array("2"), "n": np.array(0)})
    assert D.load(p) == []
