"""One atlas cell: its model, GPU and trace, and what analyze would say about it.

A cell is measured the way ``helm-plan analyze --no-capacity`` measures a trace
(the same library calls, the same definitions), on a trace and profiles built
from the cell's settings:

- **model** (:func:`cell_model`): an HSTU stack of the cell's ``stack``, bf16
  KV, ``max_seq_len`` 2048 sliding in 256-token chunks, and one fp16 item
  table keyed by the item itself, ``emb_row_bytes`` a row, looked up by every
  computed history token and every candidate. Its ``default_slo_ms`` follows
  the shipped profiles' rule: 10x the roofline service time of its typical
  request on an a100-80g, to two significant digits (:func:`default_slo_ms`);
  every cell's SLO is that default (``profiles.resolve_slo_ms``);
- **GPU**: the atlas GPU with the cell's H2D bandwidth; latency coefficients
  by roofline (``latency.roofline.derive_profile``), as analyze derives them
  for profiles it does not ship;
- **trace** (:func:`cell_synth`): ``synth``'s burst regime, two bursts each a
  tenth of the trace at ``swing`` x the base rate bringing ``burst_cold_share``
  cold users and ``burst_new_item_share`` new items, returning users with
  ``history`` tokens outside them; about ``requests`` requests;
- **pool**: ``pool_fraction`` x the trace's EMB+KV footprint, resolved once to
  bytes (``pool.resolve_pool``);
- **load**: the trace's times are scaled (request order and every cache
  outcome unchanged) so that its mean arrival rate times the lowest mean
  service time over the static splits :data:`CALIBRATION` is ``utilisation``.
  A static split's service times do not depend on arrival times (batches of
  one, no refill), so the calibration runs once on the unscaled trace;
- **windows**: ``windows`` of equal length over the scaled trace.

Then, as analyze: the carry oracle labels every window; best static is the
golden-section search; ``adaptive`` replays the oracle schedule with throttled
refill; the oracle's pooled figures are its own run of its schedule (never
worse than best static); both gains are window-bootstrap intervals
(:func:`helm_plan.oracle.adaptivity_ci`, the analyze seed).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from helm_plan import io, regimes, synth, trace
from helm_plan.analyze.stages import oracle_pooled, stage_oracle
from helm_plan.arrays import from_table
from helm_plan.atlas.config import AtlasConfig, Cell, parse_stack
from helm_plan.cache.core import Workload
from helm_plan.latency.model import build_latency_model
from helm_plan.latency.roofline import derive_profile, typical_request
from helm_plan.oracle import OracleConfig, adaptivity_ci, best_static
from helm_plan.oracle.static import StaticRuns
from helm_plan.policies import PolicyEnv, parse_policy
from helm_plan.profiles import EmbTable, GpuProfile, ModelProfile, load_gpu, resolve_slo_ms
from helm_plan.sim import NodeConfig, NodeContext, NodeResult, prepare_context, simulate_node
from helm_plan.sim.regime_figures import regime_table

MAX_SEQ_LEN = 2048
"""The atlas model's longest context, tokens."""
SLIDE_CHUNK = 256
"""Tokens its context start moves by past MAX_SEQ_LEN."""
CALIBRATION = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Static splits whose mean service time sets the load (the lowest of them)."""
BURSTS = 2
"""Bursts per cell trace."""
BURST_LEN_FRAC = 0.2
"""Length of each burst, share of the trace."""
NOMINAL_QPS = 100.0
"""Base rate the trace is drawn at before its times are scaled to the cell's load."""
BURST_HOT_SHARE = 0.3
"""Share of burst items from the burst's hot set (500 items): the rest is the catalogue's
Zipf and the burst's new items, so a burst brings a working set of its own."""
COLD_HISTORY = 256.0
"""Mean history a new user's first request carries, tokens."""
SESSION_SHARE = 0.9
"""Share of revisits that continue a recent request (the rest return at random)."""
REVISIT_GAP_S = 0.3
"""Median lag of a session continuation at NOMINAL_QPS (about 30 requests between)."""


def cell_model(cell: Cell) -> ModelProfile:
    """The atlas model of ``cell`` (module docstring)."""
    layers, d = parse_stack(cell.stack)
    table = EmbTable(name="item", dim=cell.emb_row_bytes // 2, dtype_bytes=2)
    weights = -(-(layers * 5 * d * d * 2 + (64 << 20)) // (1 << 20)) << 20  # + towers, MiB
    m = ModelProfile(
        name=f"atlas-{cell.stack}-row{cell.emb_row_bytes}", layers=layers, d_model=d,
        kv_dtype_bytes=2, max_seq_len=MAX_SEQ_LEN, n_candidates=cell.candidates,
        weights_bytes=weights, reserve_bytes=8 << 30, tables=(table,),
        kv_slide_chunk=SLIDE_CHUNK,
        source=f"helm-plan atlas: HSTU stack {layers}x{d} (UVQK + output projections), one fp16 "
               f"item table of {cell.emb_row_bytes} B rows looked up per computed history token "
               "and per candidate; weights = 5·d²·layers bf16 + 64 MiB of towers",
    )  # fmt: skip
    slo = default_slo_ms(m)
    return dataclasses.replace(m, default_slo_ms=slo, slo_source=(
        f"10x the roofline service time of a typical request on a100-80g, rounded "
        f"({slo / 10:g} ms; helm_plan.latency.roofline.typical_request), the shipped profiles' rule"))  # fmt: skip


def default_slo_ms(model: ModelProfile) -> float:
    """10x the roofline service time of ``model``'s typical request on an a100-80g, to two
    significant digits: the rule the shipped profiles' ``default_slo_ms`` follow."""
    gpu = load_gpu("a100-80g")
    lat = build_latency_model(gpu, model, derive_profile(gpu, model))
    ms = float(lat.service_time_s(**typical_request(model))) * 1e4
    digits = 1 - int(math.floor(math.log10(ms)))
    return round(ms, digits)


def cell_gpu(cell: Cell, gpu: str) -> GpuProfile:
    """The atlas GPU with the cell's H2D bandwidth."""
    g = load_gpu(gpu)
    return dataclasses.replace(g, name=f"{g.name}-h2d{cell.h2d_gbps:g}",
                               h2d_bw_Bps=cell.h2d_gbps * 1e9,
                               source=f"{g.source}; H2D bandwidth set to {cell.h2d_gbps:g} GB/s by "
                                      "helm-plan atlas")  # fmt: skip


def cell_synth(cell: Cell, cfg: AtlasConfig) -> synth.SynthConfig:
    """The synth config of ``cell``'s trace (times before the load is set)."""
    outside = 1.0 - BURSTS * BURST_LEN_FRAC
    per_s = NOMINAL_QPS * (outside + BURSTS * BURST_LEN_FRAC * cell.swing)
    return synth.SynthConfig(
        regime="burst", qps=NOMINAL_QPS, duration_s=cfg.requests / per_s, items=cell.items,
        zipf_alpha=cell.zipf_alpha, candidates=cell.candidates, max_seq_len=MAX_SEQ_LEN,
        returning_share=cell.returning_share, returning_history_mean=cell.history,
        returning_history_sigma=0.5, session_share=SESSION_SHARE, revisit_gap_s=REVISIT_GAP_S,
        revisit_gap_sigma=1.0, burst_factor=cell.swing, burst_len_frac=BURST_LEN_FRAC,
        bursts=BURSTS, burst_cold_share=cell.burst_cold_share, burst_hot_share=BURST_HOT_SHARE,
        cold_history_mean=COLD_HISTORY,
        burst_new_item_share=cell.burst_new_item_share, seed=cfg.seed,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True, eq=False)
class CellSetup:
    """A cell ready to measure: the loaded, scaled trace on its node, and what set its load."""

    ctx: NodeContext
    """The scaled trace on the cell's GPU, model and pool."""
    node: NodeConfig
    """Node config: the model's default SLO and the cell's window."""
    oracle: OracleConfig
    """The oracle (carry, the atlas's trials and coarse grid)."""
    table: pa.Table
    """The scaled trace as a canonical table (what an export writes)."""
    synth: synth.SynthConfig
    """The trace's synth config."""
    time_scale: float
    """Arrival times were multiplied by this."""
    service_ms: dict[float, float]
    """Mean service time at each calibration split, ms."""


def setup(cell: Cell, cfg: AtlasConfig) -> CellSetup:
    """Build ``cell``'s model, GPU and trace, size its pool and set its load (module docstring)."""
    model, gpu = cell_model(cell), cell_gpu(cell, cfg.gpu)
    prof = derive_profile(gpu, model)
    lat = build_latency_model(gpu, model, prof)
    scfg = cell_synth(cell, cfg)
    tab = synth.synthesize(scfg)
    wl = Workload.of(from_table(tab, seed=cfg.seed), model)
    ctx0 = prepare_context(wl, gpu, model, lat, pool_fraction=cell.pool_fraction,
                           latency_profile=prof)  # fmt: skip
    slo = resolve_slo_ms(model)
    one = NodeConfig(slo_ms=slo, window_s=scfg.duration_s * 2, warmup_windows=0)  # one window
    service = {r: float(simulate_node(ctx0, np.array([r]), one).service_s.mean())
               for r in CALIBRATION}  # fmt: skip
    n = wl.arrays.n_requests
    rate = n / scfg.duration_s
    scale = rate * min(service.values()) / cell.utilisation
    ts = np.asarray(wl.arrays.ts_s) * scale
    scaled = Workload(dataclasses.replace(wl.arrays, ts_s=ts), wl.keys, wl.max_seq_len,
                      wl.kv_slide_chunk)  # fmt: skip
    ctx = prepare_context(scaled, gpu, model, lat, pool_bytes=ctx0.pool_bytes,
                          latency_profile=prof)  # fmt: skip
    node = NodeConfig(slo_ms=slo, window_s=scfg.duration_s * scale / cfg.windows)
    ocfg = OracleConfig(trials=cfg.trials, coarse_step=cfg.coarse_step, seed=cfg.seed,
                        warmup="carry")  # fmt: skip
    table = tab.set_column(0, "ts_s", pa.array(np.asarray(tab.column("ts_s")) * scale))
    return CellSetup(ctx, node, ocfg, table, scfg, scale,
                     {r: v * 1e3 for r, v in service.items()})  # fmt: skip


def cell_spans(s: CellSetup) -> list[regimes.RegimeSpan]:
    """The steady stretches and bursts of the cell's trace, on its scaled times."""
    k = s.time_scale
    return [regimes.RegimeSpan(a * k, b * k, n) for a, b, n in synth.plan(s.synth).shape.spans()]


def _gain(static: NodeResult, other: NodeResult, cfg: AtlasConfig) -> tuple[float, float, float]:
    i0 = len(static.sojourn_s) - static.requests
    ci = adaptivity_ci(static.sojourn_s[i0:], other.sojourn_s[i0:], static.window_idx[i0:],
                       n_boot=cfg.n_boot, level=cfg.confidence, seed=cfg.seed)  # fmt: skip
    return 1.0 - other.p99_ms / static.p99_ms, ci.lo, ci.hi


def measure(cell: Cell, cfg: AtlasConfig) -> dict[str, Any]:
    """The figures of ``cell`` (one row of the atlas table: :data:`helm_plan.atlas.COLUMNS`)."""
    t0 = time.perf_counter()
    s = setup(cell, cfg)
    ctx, ncfg, ocfg = s.ctx, s.node, s.oracle
    # analyze's searches (its oracle stage; best static by bracketing, as its policies stage
    # searches it), so a cell is what `analyze --no-capacity` says of it
    labels = stage_oracle(ctx, ncfg, ocfg)
    runs = StaticRuns(ctx, ncfg)
    runs.get([0.0, 1.0])
    bs = best_static(ctx, ncfg, ocfg, runs=runs, grid=False)
    static = runs.get([bs.ratio])[0]
    built = parse_policy("adaptive").build(ctx, ncfg, PolicyEnv(oracle=ocfg, labels=labels))
    adaptive = simulate_node(ctx, built.policy, dataclasses.replace(ncfg, refill=built.refill))
    sched = oracle_pooled(ctx, labels, ncfg, ocfg)
    assert isinstance(sched, NodeResult)  # the carry oracle keeps its schedule's run
    # best static is a schedule the oracle could have chosen (analyze's rule)
    oracle = sched if sched.p99_ms <= bs.p99_ms else static
    g, lo, hi = _gain(static, adaptive, cfg)
    og, olo, ohi = _gain(static, oracle, cfg) if oracle is sched else (0.0, 0.0, 0.0)
    r = labels.r_star[np.isfinite(labels.r_star)]
    fp, pool = ctx.footprint_bytes, ctx.pool_bytes
    by = regime_table({"static": static, "oracle": oracle}, ctx.arrays.ts_s, cell_spans(s),
                      ncfg.slo_ms)  # fmt: skip
    regime = {}
    for reg in ("steady", "burst"):
        p = {row["policy"]: row["p99_ms"] for row in by.filter(pl.col("regime") == reg).to_dicts()}
        st, orc = p.get("static", float("nan")), p.get("oracle", float("nan"))
        regime |= {f"{reg}_static_p99_ms": st, f"{reg}_oracle_p99_ms": orc,
                   f"{reg}_gain": 1.0 - orc / st if st > 0 else float("nan")}  # fmt: skip
    return {
        **dataclasses.asdict(cell),
        "requests": int(ctx.arrays.n_requests),
        "qps": float(ctx.arrays.n_requests / (s.synth.duration_s * s.time_scale)),
        "window_s": ncfg.window_s,
        "slo_ms": ncfg.slo_ms,
        "pool_bytes": int(pool),
        "footprint_bytes": int(fp),
        "service_ms_min": min(s.service_ms.values()),
        "service_ms_max": max(s.service_ms.values()),
        "static_ratio": bs.ratio,
        "static_p99_ms": bs.p99_ms,
        "static_attainment": bs.slo_attainment,
        "emb_max_p99_ms": runs.get([1.0])[0].p99_ms,
        "kv_max_p99_ms": runs.get([0.0])[0].p99_ms,
        "oracle_p99_ms": oracle.p99_ms,
        "oracle_attainment": oracle.slo_attainment,
        "oracle_gain": og,
        "oracle_gain_lo": olo,
        "oracle_gain_hi": ohi,
        "r_star_min": float(r.min()) if len(r) else float("nan"),
        "r_star_max": float(r.max()) if len(r) else float("nan"),
        "adaptive_p99_ms": adaptive.p99_ms,
        "adaptive_attainment": adaptive.slo_attainment,
        "gain": g,
        "gain_lo": lo,
        "gain_hi": hi,
        **regime,
        "emb_hit_rate": static.emb_hit_rate,
        "kv_reuse_rate": static.kv_reuse_rate,
        "seconds": time.perf_counter() - t0,
    }


EXPORT_FILES = {
    "trace": "trace.parquet",
    "model": "model.toml",
    "gpu": "gpu.toml",
    "plan": "plan.toml",
}
"""The files :func:`export` writes into a cell's folder."""


def export(cell: Cell, cfg: AtlasConfig, folder: str | Path) -> dict[str, Any]:
    """Write ``cell``'s trace, model and GPU profiles and an analyze plan file into ``folder``,
    and return their paths and the ``helm-plan analyze`` command that re-measures the cell."""
    s = setup(cell, cfg)
    d = Path(folder)
    model, gpu = s.ctx.model, s.ctx.gpu
    paths = {k: d / name for k, name in EXPORT_FILES.items()}
    prov = {**synth.provenance(s.synth), "atlas_cell": dataclasses.asdict(cell),
            "time_scale": s.time_scale}  # fmt: skip
    spans = cell_spans(s)
    io.write_parquet(paths["trace"], trace.validate(s.table), metadata={
        "helm_plan.schema_version": trace.SCHEMA_VERSION,
        "helm_plan.provenance": json.dumps(prov, sort_keys=True, default=str),
        regimes.SPANS_KEY: regimes.spans_json(spans)})  # fmt: skip
    io.write_toml(paths["model"], dataclasses.asdict(model))
    io.write_toml(paths["gpu"], dataclasses.asdict(gpu))
    io.write_toml(paths["plan"], analyze_plan(s, cell, cfg))
    cmd = (f"helm-plan analyze {paths['trace']} --gpu {paths['gpu']} --model {paths['model']} "
           f"--config {paths['plan']} -o {d / 'analyze'}")  # fmt: skip
    return {**{k: str(v) for k, v in paths.items()}, "command": cmd}


def analyze_plan(s: CellSetup, cell: Cell, cfg: AtlasConfig) -> dict[str, Any]:
    """The analyze plan file that measures the cell as the atlas does (``--no-capacity``)."""
    return {
        "analyze": {"slo_ms": s.node.slo_ms, "window_s": s.node.window_s,
                    "pool_fraction": cell.pool_fraction, "seed": cfg.seed, "n_boot": cfg.n_boot,
                    "confidence": cfg.confidence, "capacity": False},
        "oracle": {"trials": cfg.trials, "coarse_step": cfg.coarse_step, "warmup": "carry"},
    }  # fmt: skip
