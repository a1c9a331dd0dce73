"""Scaling dense arrays equals densifying the scaled table, array for array."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import small_table

from helm_plan import trace
from helm_plan.arrays import TraceArrays, from_table
from helm_plan.errors import ConfigError, TraceError
from helm_plan.plan import scale, scale_arrays


def _irregular_table(seed: int, *, with_candidates: bool, latency: bool) -> trace.pa.Table:
    """Sparse ids, a non-zero start, empty requests, items only among the candidates."""
    rng = np.random.default_rng(seed)
    n = 700
    ts = 1234.5 + np.cumsum(rng.exponential(0.02, size=n))
    users = rng.choice(np.array([7, 10**9 + 3, 42, 5_000_000_017, 99, 123_456]), size=n,
                       p=[0.3, 0.25, 0.2, 0.1, 0.1, 0.05])  # fmt: skip
    k = rng.integers(0, 5, size=n)  # some requests add no tokens
    off = np.zeros(n + 1, np.int64)
    np.cumsum(k, out=off[1:])
    vals = rng.zipf(1.3, size=int(off[-1])) % 400 + 10**10
    kw: dict = {}
    m = rng.integers(1, 6, size=n)
    if with_candidates:
        coff = np.zeros(n + 1, np.int64)
        np.cumsum(m, out=coff[1:])
        # ids 10**11 + ... appear only as candidates, some only once
        kw = {"candidates_offsets": coff,
              "candidates_values": rng.integers(0, 3_000, size=int(coff[-1])) + 10**11}  # fmt: skip
    if latency:
        kw["latency_ms"] = rng.gamma(2.0, 10.0, size=n)
    return trace.make_table(ts, users, off, vals, m, **kw)


def _assert_equal(got: TraceArrays, want: TraceArrays) -> None:
    for f in dataclasses.fields(TraceArrays):
        g, w = getattr(got, f.name), getattr(want, f.name)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype, f.name
            np.testing.assert_array_equal(g, w, err_msg=f.name, strict=True)
        else:
            assert g == w, f.name


TABLES = {
    "small+cands": lambda: small_table(900, n_users=60, n_items=250, seed=5),
    "small implicit": lambda: small_table(900, n_users=60, seed=6, with_candidates=False),
    "irregular+cands+latency": lambda: _irregular_table(1, with_candidates=True, latency=True),
    "irregular implicit": lambda: _irregular_table(2, with_candidates=False, latency=False),
}


@pytest.mark.parametrize("name", sorted(TABLES))
@pytest.mark.parametrize(
    ("factor", "by"),
    [(1.0, "users"), (3.0, "users"), (2.37, "users"), (0.31, "users"), (0.6, "users"),
     (3.0, "users-shifted"), (2.37, "users-shifted"), (0.6, "users-shifted"),
     (4.0, "time"), (0.5, "time")],
)  # fmt: skip
def test_scale_arrays_equals_densifying_the_scaled_table(name, factor, by):
    table = TABLES[name]()
    seed = 11
    want_t, want_info = scale(table, factor, by=by, window_s=0.5, seed=seed)
    want = from_table(want_t, seed=seed)
    got, info = scale_arrays(from_table(table, seed=3), factor, by=by, window_s=0.5, seed=seed)
    _assert_equal(got, want)
    assert info == want_info


def test_a_fractional_clone_drops_the_items_only_its_missing_users_named():
    table = _irregular_table(1, with_candidates=True, latency=False)
    a = from_table(table)
    got, _ = scale_arrays(a, 0.2, seed=4)
    assert got.n_items < a.n_items  # the test would prove nothing if every item stayed
    used = np.union1d(got.item_ids[got.hist_values], got.item_ids[got.cand_values])
    np.testing.assert_array_equal(used, got.item_ids)


@pytest.mark.parametrize(("factor", "by"), [(2.0, "time"), (1.0, "users")])
def test_time_scaling_and_one_clone_share_every_array_but_the_times(factor, by):
    a = from_table(small_table(300, seed=2))
    got, _ = scale_arrays(a, factor, by=by)
    assert got.hist_values is a.hist_values and got.tok_off is a.tok_off
    assert got.user is a.user and got.user_hist_offsets is a.user_hist_offsets
    assert got.ts_s is not a.ts_s


def test_bad_factors_and_columns_only_loads_are_refused():
    a = from_table(small_table(50, seed=1))
    with pytest.raises(ConfigError, match="scale factor must be positive"):
        scale_arrays(a, -2.0)
    with pytest.raises(ConfigError, match="unknown scaling 'rows'"):
        scale_arrays(a, 2.0, by="rows")
    with pytest.raises(TraceError, match=r"^scaled trace is empty \(0 requests\)$"):
        scale_arrays(a, 1e-6)  # no user draws under 1e-6
    cols_only = dataclasses.replace(a, hist_values=np.zeros(0, np.int32))
    with pytest.raises(ConfigError, match="columns-only load"):
        scale_arrays(cols_only, 2.0)
