"""The flat band resolved on the lattice, against a brute force over every lattice ratio.

The brute force steps the node the labels leave behind (simulate_node with lazy refill on the
schedule ``r*_0..r*_{w-1}, r``, as the carry oracle's equality test pins) at every lattice
ratio of every window; the resolved band's edges must be lattice points inside the label's
tolerance whose neighbour outwards is outside it, the full band where the brute force's is
one run of ratios, and the label's band wherever nothing was asked.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from brute import coeff_latency
from conftest import small_table

from helm_plan import arrays as A
from helm_plan.errors import ConfigError
from helm_plan.oracle import OracleConfig, label_windows
from helm_plan.oracle.band import distance_to_band, resolve_bands
from helm_plan.profiles import load_gpu, load_model
from helm_plan.sim import NodeConfig, prepare_context, simulate_node

STEP = 0.05


@pytest.fixture(scope="module", params=[True, False], ids=["grid", "bracket"])
def case(request):
    t = small_table(2400, n_users=150, n_items=4000, max_new=10, n_candidates=24, rate_qps=40.0)
    g, m = load_gpu("a100-80g"), load_model("gr-small")
    ctx = prepare_context(A.from_table(t), g, m, coeff_latency(), pool_fraction=0.15)
    ncfg = NodeConfig(slo_ms=1.0, window_s=10.0, refill="lazy", warmup_windows=0)
    ocfg = (OracleConfig(grid_step=0.5, coarse_step=0.5, ratio_step=STEP, warmup="carry")
            if request.param
            else OracleConfig(trials=2, ratio_step=STEP, warmup="carry"))  # fmt: skip
    # grid: training's labels (the coarse grid stored); bracket: analyze's (every point stored)
    return ctx, ncfg, ocfg, label_windows(ctx, ncfg, ocfg, grid=request.param)


def brute_p99(ctx, ncfg, r_star, w, extra):
    """Window w's P99 at every lattice ratio and at ``extra`` (the points the labels evaluated
    off the lattice), from the node the labels leave behind."""
    lattice = np.unique(np.round([*np.arange(round(1 / STEP) + 1) * STEP, *extra], 9))
    n_w = len(r_star)
    out = []
    for r in lattice:
        sched = np.concatenate([r_star[:w], [r], np.full(n_w - w - 1, r)])
        out.append(simulate_node(ctx, sched, ncfg).windows["p99_ms"][w])
    return lattice, np.array(out)


def test_resolved_edges_are_the_brute_force_band_edges(case):
    ctx, ncfg, ocfg, lab = case
    t = lab.table
    r_star = lab.r_star
    n_w = len(r_star)
    assert n_w >= 5 and np.all(np.isfinite(r_star))
    ask = np.zeros(n_w, bool)
    ask[[0, 2, n_w - 1]] = True
    bands = resolve_bands(ctx, ncfg, lab, ocfg, ask)
    lo0, hi0 = t["r_flat_lo"].to_numpy(), t["r_flat_hi"].to_numpy()
    assert np.all(np.isnan(bands.lo[~ask])) and np.all(np.isnan(bands.hi[~ask]))
    widened = 0
    for w in map(int, np.flatnonzero(ask)):
        seen = lab.points().filter(pl.col("window") == w)["ratio"].to_list()
        lattice, p = brute_p99(ctx, ncfg, r_star, w, (*seen, lo0[w], hi0[w]))
        inside = p <= t["p99_ms"][w] * (1 + ocfg.flat_tol)
        k = {round(float(r), 9): i for i, r in enumerate(lattice)}
        lo, hi = k[bands.lo[w]], k[bands.hi[w]]
        assert bands.lo[w] <= lo0[w] and bands.hi[w] >= hi0[w]
        assert inside[lo] and inside[hi]
        # the neighbour outwards is outside the band (or the lattice ends there)
        assert lo == 0 or not inside[lo - 1]
        assert hi == len(lattice) - 1 or not inside[hi + 1]
        # where the brute force's band around the label's is one run, it is found whole
        run_lo, run_hi = k[lo0[w]], k[hi0[w]]
        while run_lo > 0 and inside[run_lo - 1]:
            run_lo -= 1
        while run_hi < len(lattice) - 1 and inside[run_hi + 1]:
            run_hi += 1
        assert (lo, hi) == (run_lo, run_hi)
        widened += (lo, hi) != (k[lo0[w]], k[hi0[w]])
    assert widened >= 1, "no window's band widened: the test would not see a broken search"
    assert 0 < bands.probes <= 3 * 2 * 4  # two bisections of a 0.5 gap on 0.05 steps at most


def test_distance_to_band_and_window_labels_refused():
    lo, hi = np.array([0.1, 0.1, 0.1]), np.array([0.3, 0.3, 0.3])
    np.testing.assert_allclose(distance_to_band(np.array([0.05, 0.2, 0.45]), lo, hi),
                               [0.05, 0.0, 0.15])  # fmt: skip
    with pytest.raises(ConfigError, match="needs carry labels"):
        resolve_bands(None, None, None, OracleConfig(warmup="window"), np.zeros(1, bool))
