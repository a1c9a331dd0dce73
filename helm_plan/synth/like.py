"""Writing synthetic traces (streamed, atomic, with provenance) and ``synth --like``.

:func:`write` streams :func:`helm_plan.synth.core.iter_chunks` to parquet one row
group at a time; the generator itself streams in time order, so memory stays at
one row group, one generation segment and O(users) carried state, whatever the
number of requests.

``synth --like`` fits workload statistics from a real trace and scales them up.

The fit reuses :func:`helm_plan.inspect.inspect_trace` (DuckDB, bounded
memory), so the source may be larger than memory. Mapping to
:class:`~helm_plan.synth.SynthConfig`:

- ``zipf_alpha``: the weighted log-log rank/frequency fit (see
  :mod:`helm_plan.inspect`);
- ``revisit_gap_s`` / ``revisit_gap_sigma``: the median of the gaps between
  a user's consecutive requests, and the log-normal spread implied by their
  90th percentile, ``(ln p90 - ln p50) / 1.2816``;
- ``new_items_mean``: mean new items of a revisit;
- ``cold_history_mean``: mean new items of a user's first request;
- cold-user share: kept by scaling ``users`` and ``qps`` by the same factor
  over the source's duration (each user's request rate stays as observed);
- ``returning_share = 0``: the source's first requests, returning users' or
  new, are all fitted by ``cold_history_mean``;
- ``items``: the source's *catalog* times the scale, keeping ``zipf_alpha``.
  The catalog is estimated from the distinct items seen at the source's
  history-item count under the fitted Zipf (:mod:`helm_plan.synth.catalog`),
  so the scaled trace shows about ``scale`` x the source's distinct items
  with the same skew (a catalog of ``scale`` x distinct items would be seen
  almost entirely and lose the long tail).

History lengths follow from those (first batch plus growth per revisit, capped
at ``max_seq_len``); the source's history percentiles are stored beside the
fit in the provenance so they can be compared with ``helm-plan inspect``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from helm_plan import io, regimes, trace
from helm_plan._version import __version__
from helm_plan.config import Progress, from_dict, require_positive
from helm_plan.errors import ConfigError, TraceError
from helm_plan.inspect import ZIPF_MIN_COUNT, TraceStats, inspect_trace
from helm_plan.mixshift import MixShift, shares
from helm_plan.synth.catalog import estimate_catalog
from helm_plan.synth.config import MAX_ITEMS, ROW_GROUP_ROWS, SynthConfig
from helm_plan.synth.core import iter_chunks, plan

_Z90 = 1.2815515655446004  # standard normal 90th percentile


@dataclass(frozen=True)
class SynthResult:
    """What :func:`write` produced."""

    path: Path
    """The trace file written."""
    requests: int
    """Rows (requests) written."""
    users: int
    """Distinct users."""
    history_tokens: int
    """Total new items over all requests."""
    bursts: tuple[tuple[float, float], ...]
    """Burst intervals (start_s, end_s) of the rate shape."""


def provenance(cfg: SynthConfig, like: dict[str, Any] | None = None) -> dict[str, Any]:
    """Provenance stored in the file metadata of a synthetic trace."""

    prov: dict[str, Any] = {
        "source": "synth",
        "converter": "helm_plan.synth",
        "arguments": dataclasses.asdict(cfg),
        "seed": cfg.seed,
        "schema_version": trace.SCHEMA_VERSION,
        "generator_version": __version__,
    }
    if like is not None:
        prov["like"] = like
    return prov


def write(
    cfg: SynthConfig,
    path: str | os.PathLike[str],
    *,
    like: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> SynthResult:
    """Stream the trace to ``path`` one row group at a time (atomic; memory ~ one row group + users).

    ``like`` (fitted statistics of a ``--like`` source) is stored in the provenance.
    """
    pl = plan(cfg)
    meta = {
        "helm_plan.schema_version": trace.SCHEMA_VERSION,
        "helm_plan.provenance": json.dumps(provenance(cfg, like), sort_keys=True, default=str),
        regimes.SPANS_KEY: regimes.spans_json(pl.shape.spans()),
    }
    empty = ConfigError(
        f"qps={cfg.qps} over duration_s={cfg.duration_s} drew no requests",
        hint="raise --qps or --duration-s",
    )
    rows, users, tokens = write_stream(
        path, iter_chunks(cfg, pl=pl, progress=progress), meta, empty
    )
    return SynthResult(Path(path), rows, users, tokens, pl.shape.bursts)


def write_stream(
    path: str | os.PathLike[str],
    chunks: Iterator[pa.Table],
    meta: dict[str, str],
    empty: Exception,
) -> tuple[int, int, int]:
    """Write canonical ``chunks`` to ``path``, one row group each (atomic).

    Returns (rows, users, history items); raises ``empty`` (leaving no file) if there
    are no rows. Users are counted as max(user_id) + 1 (ids by first appearance).
    """
    schema = pa.schema([pa.field(k, t) for k, t in trace.REQUIRED.items()])
    rows = users = tokens = 0
    with io.parquet_writer(path, schema, metadata=meta) as w:
        for chunk in chunks:
            w.write_table(
                trace.validate(chunk, source=str(path), row_offset=rows).cast(schema),
                row_group_size=ROW_GROUP_ROWS,
            )
            rows += chunk.num_rows
            users = max(users, pc.max(chunk.column("user_id")).as_py() + 1)
            tokens += pc.sum(pc.list_value_length(chunk.column("new_items"))).as_py()
        if rows == 0:  # raised inside the writer: no file is left behind
            raise empty
    return rows, users, tokens


@dataclass(frozen=True)
class LikeFit:
    """Statistics fitted from a source trace, before scaling."""

    source: str
    """The trace the statistics come from."""
    requests: int
    """Requests in the source."""
    users: int
    """Distinct users in the source."""
    items: int
    """Distinct items in the source."""
    history_tokens: int
    """History items (new_items) in the source: the Zipf draws behind ``items``."""
    catalog_items: int
    """Estimated catalog the source's items were drawn from (``items`` when not estimable)."""
    catalog_fit: str
    """How ``catalog_items`` was found: ``zipf`` (estimated) or ``distinct`` (the distinct count)."""
    duration_s: float
    """Source duration, seconds (at least 1)."""
    mean_qps: float
    """Source mean requests per second."""
    zipf_alpha: float
    """Fitted item popularity skew."""
    cold_share: float
    """Share of requests that are a user's first."""
    revisit_gap_s: float
    """Median gap between a user's consecutive requests, seconds."""
    revisit_gap_sigma: float
    """Log-normal spread of that gap from its 90th percentile."""
    new_items_mean: float
    """Mean new items per revisit."""
    cold_history_mean: float
    """Mean new items of a user's first request."""
    history_len_p50: float
    """Source median history length, tokens (for comparison)."""
    history_len_p95: float
    """Source 95th percentile history length, tokens (for comparison)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def fit(path: str | os.PathLike[str], *, progress: Progress | None = None) -> LikeFit:
    """Fit the synth statistics of the trace at ``path``."""
    st: TraceStats = inspect_trace(path, progress=progress)
    if st.zipf_alpha is None:
        raise TraceError(
            f"{path}: too few repeated items to fit popularity skew "
            f"({st.zipf_fit_ranks} items occur {ZIPF_MIN_COUNT}+ times, need 3)",
            hint="use a longer trace, or pass --zipf-alpha",
        )
    p50 = st.revisit_gap_p50_s
    p90 = st.revisit_gap_p90_s
    if p50 is None or p90 is None:
        gap, sigma = SynthConfig.revisit_gap_s, SynthConfig.revisit_gap_sigma
    else:
        gap = max(p50, 1e-3)
        sigma = min(max((math.log(max(p90, gap)) - math.log(gap)) / _Z90, 0.1), 5.0)
    alpha = min(max(st.zipf_alpha, 0.0), 5.0)
    catalog, how = estimate_catalog(st.items, st.history_tokens, alpha)
    return LikeFit(
        source=str(path),
        requests=st.requests,
        users=st.users,
        items=st.items,
        history_tokens=st.history_tokens,
        catalog_items=catalog,
        catalog_fit=how,
        duration_s=max(st.duration_s, 1.0),
        mean_qps=st.requests / max(st.duration_s, 1.0),
        zipf_alpha=alpha,
        cold_share=st.cold_share,
        revisit_gap_s=gap,
        revisit_gap_sigma=sigma,
        new_items_mean=(
            st.revisit_new_items_mean
            if st.revisit_new_items_mean is not None
            else SynthConfig.new_items_mean
        ),
        cold_history_mean=max(st.first_request_items_mean, 1.0),
        history_len_p50=st.history_len_p50,
        history_len_p95=st.history_len_p95,
    )


LIKE_SCALE = 10.0
"""Default factor ``like_config`` (and ``synth --like``) scales users, QPS and the catalog by."""


def like_config(
    f: LikeFit, *, scale: float = LIKE_SCALE, shifts: Sequence[MixShift] = (), **overrides: Any
) -> SynthConfig:
    """A SynthConfig reproducing ``f`` with users, QPS and the catalog scaled by ``scale``.

    ``shifts`` (:mod:`helm_plan.mixshift`) set the mix of the bursts (regime ``burst``
    unless ``overrides`` pick ``mixed``; :func:`shift_knobs`). ``overrides`` (any
    SynthConfig field, e.g. ``qps=...``) win over the scaled values and the shifts' knobs;
    ``None`` values are ignored.
    """
    require_positive("scale", scale)
    base: dict[str, Any] = {
        "qps": f.mean_qps * scale,
        "duration_s": f.duration_s,
        "users": max(1, round(f.users * scale)),
        "items": min(MAX_ITEMS, max(1, round(f.catalog_items * scale))),
        "zipf_alpha": f.zipf_alpha,
        "revisit_gap_s": f.revisit_gap_s,
        "revisit_gap_sigma": f.revisit_gap_sigma,
        "new_items_mean": f.new_items_mean,
        "cold_history_mean": f.cold_history_mean,
        "returning_share": 0.0,
    }
    if shifts:
        base.update(shift_knobs(f, shifts, overrides.get("regime")))
    base.update({k: v for k, v in overrides.items() if v is not None})
    return from_dict(SynthConfig, base)


def shift_knobs(f: LikeFit, shifts: Sequence[MixShift], regime: str | None) -> dict[str, Any]:
    """The burst knobs that make ``shifts`` (module :mod:`helm_plan.mixshift`) of a ``--like`` trace.

    ``flash-crowd=c`` and ``returning-wave=w``: ``c + w`` of the burst requests are a user's
    first (``burst_cold_share``), ``w / (c + w)`` of those users return with a history
    (``burst_returning_share``) of the source's median length (``history_len_p50``);
    ``new-items=s``: ``s`` of the burst items are new items from the catalogue's reserved
    tail (``burst_new_item_share``). Burst items come from no hot set (``burst_hot_share``
    0): the shift changes the mix it names and nothing else.
    """
    sh = shares(shifts)
    if regime is not None and regime not in ("burst", "mixed"):
        raise ConfigError(f"--shift changes the mix inside bursts, but the regime is {regime}",
                          hint="use --regime burst or mixed with --shift")  # fmt: skip
    c, w = sh.get("flash-crowd", 0.0), sh.get("returning-wave", 0.0)
    return {
        "regime": regime or "burst",
        "burst_cold_share": c + w,
        "burst_returning_share": w / (c + w) if c + w > 0 else 0.0,
        "returning_history_mean": max(f.history_len_p50, 1.0),
        "burst_new_item_share": sh.get("new-items", 0.0),
        "burst_hot_share": 0.0,
    }
