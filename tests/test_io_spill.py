"""Arrays spilled to disk (``io.spill_array``): the same results, pages dropped, nothing left.

Every consumer of a spilled token array is compared with the same computation
over the array in memory: the dense load, a replay cut into spans, a scaled
copy, the workers' view of a shared context, and a whole ``analyze``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import small_table, untimed

from helm_plan import io, trace
from helm_plan.analyze import build_config, run_analyze
from helm_plan.arrays import TraceArrays, from_file
from helm_plan.cache import core
from helm_plan.errors import InputFileError
from helm_plan.exec import blocks
from helm_plan.exec.local import ProcessExecutor
from helm_plan.oracle import read_labels
from helm_plan.oracle.static import static_task
from helm_plan.plan import dense, scale_arrays
from helm_plan.profiles import DEFAULT_MODEL, load_model
from helm_plan.sim import NodeConfig, load_context


def _smaps_field(a: np.ndarray, field: str) -> list[str]:
    """The ``field`` line (split) of the mapping that holds ``a`` (/proc/self/smaps)."""
    lo = int(a.ctypes.data)
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            s, e = (int(x, 16) for x in head.split("-"))
            if s <= lo < e:
                for nxt in lines[i + 1 :]:
                    if nxt.startswith(field + ":"):
                        return nxt.split()[1:]
    raise AssertionError("no mapping holds the array")


def _mapped_kib(a: np.ndarray) -> int:
    """Resident KiB of the mapping that holds ``a``."""
    return int(_smaps_field(a, "Rss")[0])


def test_spill_mappings_read_no_ahead(tmp_path):
    # with read-ahead (8 MiB on this machine's disk) a fault filled large folios that it then
    # mapped whole: the 10M-request load held 2-3 GB of the token file and wrote 600 GB back
    a = io.spill_array(1 << 20, np.int32, tmp_path)
    assert "rr" in _smaps_field(a, "VmFlags")  # MADV_RANDOM
    (path,) = [p for s, _, p in io.spill_mappings() if s == int(a.ctypes.data)]
    assert "rr" in _smaps_field(np.frombuffer(io.map_spill(path), np.uint8), "VmFlags")


def test_spilled_array_keeps_its_data_while_its_pages_are_dropped(tmp_path):
    n = 1 << 20  # 4 MiB of int32
    a = io.spill_array(n, np.int32, tmp_path)
    assert not list(tmp_path.iterdir()), "the spill file must be unlinked at once"
    a[:] = np.arange(n, dtype=np.int32)
    assert io.is_spilled(a) and io.is_spilled(a[n // 2 :]) and not io.is_spilled(np.arange(3))
    assert _mapped_kib(a) >= 4096
    io.release_spilled()
    assert _mapped_kib(a) < 64  # the pages went back to the page cache
    assert np.array_equal(a, np.arange(n, dtype=np.int32))  # and read back the same
    assert io.spill_array(0, np.int32, tmp_path).size == 0


def test_spans_cover_the_range_and_drop_the_pages_after_each_piece(tmp_path):
    a = io.spill_array(1 << 18, np.int32, tmp_path)  # 1 MiB
    a[:] = 1
    pieces, mapped_at_start = [], []
    for i, j in io.spans(5, 1000, 300):
        pieces.append((i, j))
        mapped_at_start.append(_mapped_kib(a))
        assert int(a.sum()) == len(a)  # maps every page of the file
    assert pieces == [(5, 305), (305, 605), (605, 905), (905, 1000)]
    assert mapped_at_start[0] >= 1024 and max(mapped_at_start[1:]) < 64
    assert _mapped_kib(a) < 64  # after the last piece too
    assert list(io.spans(7, 7, 300)) == []


def test_a_spill_another_process_maps_sees_the_same_data(tmp_path):
    a = io.spill_array(1000, np.int64, tmp_path)
    a[:] = np.arange(1000) * 7
    (path,) = [p for s, _, p in io.spill_mappings() if s == int(a.ctypes.data)]
    assert path.startswith("/proc/")
    b = np.frombuffer(io.map_spill(path), np.int64)
    assert np.array_equal(a, b)


def test_spill_errors_are_clear(tmp_path, monkeypatch):
    with pytest.raises(InputFileError, match=r"cannot spill to .*missing"):
        io.spill_array(10, np.int32, tmp_path / "missing")
    monkeypatch.setattr(io.shutil, "disk_usage", lambda d: type("U", (), {"free": 1 << 20})())
    with pytest.raises(InputFileError, match=r"spilling 4 MiB to .* but it has 1 MiB free"):
        io.spill_array(1 << 20, np.int32, tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def tr(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("spill")
    # drawn candidates (no list in the trace): the replay's token ring is exercised
    t = small_table(
        1500, n_users=120, n_items=2500, max_new=8, n_candidates=12, seed=5, with_candidates=False
    )
    return trace.write(t, d / "t.parquet", {"source": "tests.small_table", "seed": 5})


def _fields_equal(got: TraceArrays, want: TraceArrays) -> None:
    for f in dataclasses.fields(TraceArrays):
        g, w = getattr(got, f.name), getattr(want, f.name)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and np.array_equal(g, w), f.name
        else:
            assert g == w, f.name


def test_a_spilled_load_equals_the_load_in_memory(tr, tmp_path):
    got = from_file(tr, seed=2, spill_dir=tmp_path, batch_rows=97)
    _fields_equal(got, from_file(tr, seed=2))
    assert io.is_spilled(got.hist_values) and not io.is_spilled(got.ts_s)


def test_a_replay_cut_into_spans_over_spilled_tokens_equals_one_call(tr, tmp_path, monkeypatch):
    model = load_model(DEFAULT_MODEL)
    wl_mem = core.Workload.of(from_file(tr), model)
    wl_sp = core.Workload.of(from_file(tr, spill_dir=tmp_path), model)
    monkeypatch.setattr(core, "SPILL_SPAN", 97)  # many spans, the ring carried across them
    # a refill's prefetch list, landing across the spans (its ready times out of order: each
    # span must go on from the first key not landed, as one call does)
    rng = np.random.default_rng(0)
    ts = wl_mem.arrays.ts_s
    pf_keys = rng.choice(wl_mem.n_keys, 400, replace=False).astype(np.int32)
    pf_t = np.sort(rng.uniform(ts[11], ts[-1], 400))
    pf_t[0::2], pf_t[1::2] = pf_t[1::2].copy(), pf_t[0::2].copy()  # each pair out of order

    def run(wl: core.Workload) -> tuple[core.ReplayResult, core.CacheState]:
        # room left in the EMB cache for the prefetched keys to land in
        emb_cap = int(0.6 * wl.keys.key_bytes.sum())
        st = core.CacheState.empty(wl.keys.key_bytes, wl.arrays.n_users, emb_cap, 5_000)
        counts = np.zeros(wl.n_keys, np.float32)
        res = core.replay(wl, st, 11, wl.arrays.n_requests, prefetch_keys=pf_keys,
                          prefetch_ready_s=pf_t, counts=counts)  # fmt: skip
        return res, st, counts

    (a, sa, ca), (b, sb, cb) = run(wl_mem), run(wl_sp)
    n = wl_sp.arrays.n_requests
    assert list(io.spans(11, n, core._span_size(wl_sp.arrays, 11, n)))[1] == (108, 205)
    assert a.prefetched == b.prefetched > 0 and np.array_equal(ca, cb)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.array_equal(x, y), f.name
    assert np.array_equal(sa.emb_last, sb.emb_last) and np.array_equal(sa.kv_len, sb.kv_len)


@pytest.mark.parametrize("factor", [0.6, 2.5])
def test_a_scaled_copy_of_spilled_tokens_equals_the_copy_in_memory(tr, tmp_path, monkeypatch,
                                                                    factor):  # fmt: skip
    monkeypatch.setattr(dense, "SPAN", 101)  # the passes over the tokens in many spans
    mem, info_mem = scale_arrays(from_file(tr), factor, seed=4)
    sp, info_sp = scale_arrays(from_file(tr, spill_dir=tmp_path), factor, seed=4,
                               spill_dir=tmp_path)  # fmt: skip
    _fields_equal(sp, mem)
    assert info_sp == info_mem and io.is_spilled(sp.hist_values)


def test_workers_map_the_spill_file_instead_of_copying_the_tokens(tr, tmp_path):
    ctx = load_context(tr, pool_fraction=0.3, spill_dir=tmp_path)
    sizes = []
    for c in (ctx, load_context(tr, pool_fraction=0.3)):
        ref, block = blocks.pack(c, 1, [])
        sizes.append(block.size)
        block.close()
        block.unlink()
        files = [n for src, _, n in ref[3] if src.startswith("/proc/")]
        assert files == ([ctx.arrays.hist_values.nbytes] if c is ctx else [])
    assert sizes[1] - sizes[0] >= ctx.arrays.hist_values.nbytes  # the tokens are not in the block
    want = [static_task((ctx, NodeConfig()), r) for r in (0.2, 0.7)]
    with ProcessExecutor(2) as ex:
        shared = ex.share(ctx)
        del ctx  # the driver's load goes: the shared view keeps the file open for the workers
        got = ex.map(static_task, [0.2, 0.7], shared=(shared, NodeConfig()))
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g.sojourn_s, w.sojourn_s)


def test_analyze_with_spilled_tokens_gives_the_same_results(tr, tmp_path):
    plan = {"analyze": {"window_s": 5.0, "pool_fraction": 0.3, "n_boot": 50, "slo_ms": 0.5,
                        "seed": 3, "capacity": False},
            "oracle": {"trials": 3, "coarse_step": 0.25}, "curves": {"n_points": 11}}  # fmt: skip
    spill = tmp_path / "spill"
    spill.mkdir()
    r1 = run_analyze(tr, build_config(plan), tmp_path / "mem")
    sp_plan = {**plan, "analyze": {**plan["analyze"], "workers": 2, "spill_dir": str(spill)}}
    r2 = run_analyze(tr, build_config(sp_plan), tmp_path / "sp")
    assert read_labels(r1.labels_path).table.equals(read_labels(r2.labels_path).table)
    s1, s2 = (
        json.dumps(untimed(r.summary), sort_keys=True, default=str).replace(str(r.out_dir), "")
        for r in (r1, r2)
    )  # fmt: skip
    assert s1 == s2
    assert not list(spill.iterdir())
