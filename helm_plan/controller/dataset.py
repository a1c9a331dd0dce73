"""Label traces: the oracle's per-window labels of one trace, arranged for the training environment.

A :class:`LabelTrace` holds, per window, what :class:`~helm_plan.controller.env.LabelEnv`
needs to score any ratio without replaying: the coarse P99(r) and SLO
attainment grids with the oracle's own ``(r*, P99*, attainment*)`` inserted
(labels from the full oracle: coarse grid, edge points and Optuna trials),
the hit rates on that grid, the flat band, the arrival features, and the
*ghost curves* of the oracle schedule's own lookups
(:mod:`helm_plan.cache.ghost`; the schedule is replayed once with lazy
refill, as the carry oracle runs it) with that replay's busy seconds, so the
ghost gains and the measured curve at any ``r`` come from the same machinery
a live node uses.

A set of label traces is saved as one ``.npz`` (:func:`save`, :func:`load`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import numpy as np

from helm_plan import io
from helm_plan.cache.ghost import GRID_POINTS, Ghost
from helm_plan.controller import checks
from helm_plan.controller.features import p99_gain
from helm_plan.errors import InputFileError
from helm_plan.exec import Progress
from helm_plan.oracle import Labels, OracleConfig, label_windows
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.policy import fill_forward
from helm_plan.sim.step import NodeRunner

ARRIVAL_KEYS = ("arrival_rate_rps", "rate_trend", "burst_score", "interarrival_cv",
                "cold_user_share", "hist_len_mean", "hist_len_p95")  # fmt: skip
"""Per-window arrival features copied from the label table (independent of r)."""

SET_VERSION = "2"


@dataclass(frozen=True, eq=False)
class LabelTrace:
    """One labelled trace (arrays have one row per window)."""

    name: str
    """Where it came from (trace file or scenario)."""
    window_s: float
    """Window length, seconds."""
    slo_ms: float
    """P99 SLO, ms."""
    arrival: np.ndarray
    """(windows, len(ARRIVAL_KEYS)) arrival features."""
    grid_r: np.ndarray
    """(windows, G) ratios of the P99 grid per window (coarse grid plus r*), sorted."""
    grid_p99_ms: np.ndarray
    """(windows, G) P99 at ``grid_r``, ms."""
    grid_emb_hit: np.ndarray
    """(windows, G) EMB hit rate at ``grid_r``."""
    grid_kv_reuse: np.ndarray
    """(windows, G) KV reuse rate at ``grid_r``."""
    grid_slo_att: np.ndarray
    """(windows, G) SLO attainment at ``grid_r``."""
    r_star: np.ndarray
    """Oracle ratio per window (NaN for an empty window)."""
    p99_star_ms: np.ndarray
    """Oracle P99 per window, ms."""
    flat_lo: np.ndarray
    """Lowest r of the flat band."""
    flat_hi: np.ndarray
    """Highest r of the flat band."""
    h2d_util_star: np.ndarray
    """Demand-miss H2D utilisation at r*."""
    ghost_emb: np.ndarray
    """(windows, 101) ghost EMB hit bytes at EMB share 0..1."""
    ghost_kv: np.ndarray
    """(windows, 101) ghost KV reused tokens at EMB share 0..1."""
    ghost_lookup_bytes: np.ndarray
    """EMB bytes looked up per window."""
    ghost_ctx_tokens: np.ndarray
    """Context tokens per window."""
    busy_s: np.ndarray
    """Service seconds per window of the schedule's replay."""
    gain: np.ndarray
    """(windows, 101) the counterfactual P99 curve of the replay's windows
    (:func:`~helm_plan.controller.features.p99_gain`, relative to ``sched_r``)."""
    sched_r: np.ndarray
    """The ratio that replay served each window at (``r*`` filled forward)."""
    emb_s_per_byte: float
    """Service seconds per missed EMB byte (H2D plus host gather)."""
    kv_s_per_token: float
    """Service seconds per recomputed prefill token."""
    slots: int
    """Streams of the node (utilisation = busy seconds / (window · slots))."""
    max_seq_len: int
    """The model's max_seq_len (histories are features as a share of it)."""

    @property
    def n_windows(self) -> int:
        return len(self.r_star)


def cost_coefficients(ctx: NodeContext) -> tuple[float, float]:
    """(seconds per missed EMB byte, seconds per recomputed token) of the node's latency model."""
    lat = ctx.latency
    return 1.0 / lat.h2d_bw_Bps + 1.0 / lat.host_gather_Bps, lat.dense_s_per_token


def build(
    ctx: NodeContext,
    ncfg: NodeConfig,
    ocfg: OracleConfig,
    name: str,
    labels: Labels | None = None,
    progress: Progress | None = None,
) -> LabelTrace:
    """Label ``ctx`` (unless ``labels`` are given) and gather its :class:`LabelTrace`."""
    ncfg = ncfg.for_context(ctx)
    lab = labels or label_windows(ctx, ncfg, ocfg, progress)
    t = lab.table
    n_w = t.height
    cg = np.array(lab.coarse_grid)
    p99 = lab.grid("p99_ms")
    emb = lab.grid("emb_hit")
    kv = lab.grid("kv_reuse")
    att = lab.grid("slo_att")
    rs = t["r_star"].to_numpy()
    ps = t["p99_ms"].to_numpy()
    es, ks = t["emb_hit_rate"].to_numpy(), t["kv_reuse_rate"].to_numpy()
    ats = t["slo_attainment"].to_numpy()
    gr = np.empty((n_w, len(cg) + 1))
    gp, ge, gk, ga = (np.empty_like(gr) for _ in range(4))
    for w in range(n_w):
        r = np.append(cg, rs[w] if np.isfinite(rs[w]) else 0.5)
        o = np.argsort(r, kind="stable")
        gr[w] = r[o]
        gp[w] = np.append(p99[w], ps[w])[o]
        ge[w] = np.append(emb[w], es[w])[o]
        gk[w] = np.append(kv[w], ks[w])[o]
        ga[w] = np.append(att[w], ats[w])[o]
    # the ghost curves of the schedule's own lookups (lazy refill, as the carry oracle runs it)
    ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token)
    node = NodeRunner(ctx, dataclasses.replace(ncfg, refill="lazy"))
    sched = fill_forward(rs) if np.isfinite(rs).any() else np.full(n_w, 0.5)
    g_emb, g_kv = np.zeros((n_w, GRID_POINTS)), np.zeros((n_w, GRID_POINTS))
    g_look, g_ctx, busy = np.zeros(n_w), np.zeros(n_w), np.zeros(n_w)
    gain = np.zeros((n_w, GRID_POINTS))
    eb, kt = cost_coefficients(ctx)
    for w in range(n_w):
        res = node.step(float(sched[w]))
        busy[w] = float(res.service_s.sum())
        if res.requests:
            idx = np.arange(res.first, res.first + res.requests)
            c = ghost.observe_requests(idx, res.n_computed, per_request=True)
            g_emb[w], g_kv[w], g_look[w], g_ctx[w] = (
                c.emb_hit_bytes, c.kv_reused_tokens, c.lookup_bytes, c.ctx_tokens
            )  # fmt: skip
            assert c.emb_hit_bytes_req is not None and c.kv_reused_tokens_req is not None
            saved = c.emb_hit_bytes_req * eb + c.kv_reused_tokens_req * kt
            gain[w] = p99_gain(res.service_s, res.sojourn_s, res.ratio, ncfg.window_s,
                               ncfg.slots, saved)  # fmt: skip
    return LabelTrace(
        name=name, window_s=ncfg.window_s, slo_ms=ncfg.slo_ms,
        arrival=np.column_stack([t[k].to_numpy() for k in ARRIVAL_KEYS]),
        grid_r=gr, grid_p99_ms=gp, grid_emb_hit=ge, grid_kv_reuse=gk, grid_slo_att=ga,
        r_star=rs, p99_star_ms=ps,
        flat_lo=t["r_flat_lo"].to_numpy(), flat_hi=t["r_flat_hi"].to_numpy(),
        h2d_util_star=t["h2d_util"].to_numpy(),
        ghost_emb=g_emb, ghost_kv=g_kv, ghost_lookup_bytes=g_look, ghost_ctx_tokens=g_ctx,
        busy_s=busy, gain=gain, sched_r=np.asarray(sched, np.float64),
        emb_s_per_byte=eb, kv_s_per_token=kt, slots=ncfg.slots,
        max_seq_len=ctx.model.max_seq_len,
    )  # fmt: skip


def write_npz(path: str | os.PathLike[str], arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` as an uncompressed ``.npz`` atomically (through helm_plan.io)."""
    buf = BytesIO()
    np.savez(buf, **arrays)
    return io.write_bytes(path, buf.getvalue())


_FIELDS = [f.name for f in dataclasses.fields(LabelTrace)]


def save(traces: list[LabelTrace], path: str | os.PathLike[str]) -> Path:
    """Write label traces to one ``.npz`` (atomically)."""
    arrays: dict[str, np.ndarray] = {"set_version": np.array(SET_VERSION),
                                     "n": np.array(len(traces))}  # fmt: skip
    for i, tr in enumerate(traces):
        for f in _FIELDS:
            arrays[f"{i}.{f}"] = np.asarray(getattr(tr, f))
    return write_npz(path, arrays)


def load(path: str | os.PathLike[str]) -> list[LabelTrace]:
    """Read label traces written by :func:`save`."""
    p = Path(path)
    z = checks.read_npz(
        p, "label set", "make one with `helm-plan train TRACE... --save-labels FILE`"
    )
    if "set_version" not in z or str(z["set_version"]) != SET_VERSION:
        raise InputFileError(
            f"{p} is not a helm-plan label set of version {SET_VERSION}",
            hint=checks.LABELS_HINT,
        )
    n = z.get("n")
    if n is None or n.shape != () or not np.issubdtype(n.dtype, np.integer) or int(n) < 0:
        raise InputFileError(f"{p}: its trace count n is missing or not a count",
                             hint=checks.LABELS_HINT)  # fmt: skip
    out = []
    for i in range(int(n)):
        missing = [f for f in _FIELDS if f"{i}.{f}" not in z]
        if missing:
            raise InputFileError(f"{p}: label trace {i} has no {missing[0]}",
                                 hint=checks.LABELS_HINT)  # fmt: skip
        kw = {f: z[f"{i}.{f}"] for f in _FIELDS}
        out.append(LabelTrace(**checks.label_trace(kw, f"{p} (trace {i})", GRID_POINTS)))
    return out
