"""`ingest`: convert public logs into the canonical request trace.

``ingest(path, cfg)`` returns the trace table and an :class:`IngestReport`;
``ingest_to_file(path, out, cfg)`` also writes it atomically with provenance.
The pipeline: read the source kind (format variant detected) into
interactions -> drop exact duplicates -> requests (sessions by
``session_gap_s`` for logs with timestamps, one request per interaction
otherwise) -> optional user replication -> arrival times (kept or re-timed,
order unchanged) -> canonical table.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from helm_plan import io, regimes, trace
from helm_plan.ingest import amazon, csvmap, mooncake, movielens, taobao
from helm_plan.ingest.config import (
    DEFAULT_N_CANDIDATES,
    DEFAULT_QPS,
    DEFAULT_SESSION_GAP_S,
    KINDS,
    TAOBAO_BEHAVIORS,
    IngestConfig,
    IngestReport,
    check_kind,
    parse_column_map,
)
from helm_plan.ingest.readers import check_readable
from helm_plan.ingest.retime import assign
from helm_plan.ingest.sessions import (
    Interactions,
    Requests,
    drop_duplicates,
    order_only,
    replicate,
    sessionize,
)
from helm_plan.ingest.shifts import inject

__all__ = [
    "DEFAULT_N_CANDIDATES",
    "DEFAULT_QPS",
    "DEFAULT_SESSION_GAP_S",
    "KINDS",
    "TAOBAO_BEHAVIORS",
    "IngestConfig",
    "IngestReport",
    "check_kind",
    "ingest",
    "ingest_to_file",
    "parse_column_map",
    "read_requests",
]

CONVERTER_VERSION = "1"


def read_requests(
    path: str | os.PathLike[str], cfg: IngestConfig
) -> tuple[Requests, dict[str, Any]]:
    """Read a source log into ordered requests (before replication and re-timing)."""
    p = check_readable(path)
    info: dict[str, Any] = {"dropped": (), "notes": ()}
    if cfg.kind == "mooncake":
        req, rows = mooncake.load(p, block_tokens=cfg.block_tokens)
        info.update(variant="conversation JSONL", rows_read=rows)
        return req, info
    x: Interactions
    if cfg.kind == "movielens":
        x = movielens.load(p)
    elif cfg.kind == "amazon":
        x = amazon.load(p)
    elif cfg.kind == "taobao":
        x = taobao.load(p, cfg.behaviors)
    else:
        assert cfg.user_col is not None and cfg.item_col is not None
        x = csvmap.load(p, cfg.user_col, cfg.item_col, cfg.ts_col)
    if cfg.drop_duplicates:
        x = drop_duplicates(x)
    notes = list(x.notes)
    if x.ts_s is not None:
        req = sessionize(x, cfg.session_gap_s)
        req = dataclasses.replace(req, real_time=cfg.kind == "csv")
    else:
        req, note = order_only(x, interleave=cfg.interleave_grouped, seed=cfg.seed)
        notes.append("no timestamps: one request per interaction")
        if note:
            notes.append(note)
    info.update(variant=x.variant, rows_read=x.rows_read, dropped=x.dropped, notes=tuple(notes))
    return req, info


def ingest(path: str | os.PathLike[str], cfg: IngestConfig) -> tuple[pa.Table, IngestReport]:
    """Convert the log at ``path`` into a canonical trace table and a report."""
    req, info = read_requests(path, cfg)
    notes = list(info["notes"])
    if cfg.replicate > 1:
        req = replicate(req, cfg.replicate)
        notes.append(f"users cloned x{cfg.replicate} with id offsets and time shifts")
    timing = assign(req.order_t, req.real_time, cfg)
    notes.extend(timing.notes)
    keep = len(timing.ts_s)
    truncated = req.n - keep
    ts, user, offsets = timing.ts_s, req.user[:keep], req.offsets[: keep + 1]
    items = req.items[: offsets[-1]]
    bursts: tuple[dict[str, Any], ...] = ()
    if cfg.shifts:
        inj = inject(ts, user, offsets, items, timing.bursts, cfg.shifts, cfg.seed)
        ts, user, offsets, items, bursts = inj.ts_s, inj.user, inj.offsets, inj.items, inj.bursts
        notes.append(f"mix shifts {', '.join(s.text() for s in cfg.shifts)} injected into "
                     f"{len(bursts)} bursts (seed {cfg.seed})")  # fmt: skip
    keep = len(ts)
    table = trace.make_table(ts, user, offsets, items, np.full(keep, cfg.n_candidates, np.int32))
    report = IngestReport(
        kind=cfg.kind,
        variant=info["variant"],
        source=str(path),
        rows_read=int(info["rows_read"]),
        dropped=tuple(info["dropped"]),
        requests_truncated=int(truncated),
        requests=keep,
        users=pl.Series(user).n_unique(),
        items=pl.Series(items).n_unique(),
        new_items=int(len(items)),
        span_s=float(timing.ts_s[-1] - timing.ts_s[0]) if keep else 0.0,
        timing=timing.description,
        notes=tuple(notes),
        spans=timing.spans,
        shift_bursts=bursts,
    )
    return table, report


def provenance(
    path: str | os.PathLike[str], cfg: IngestConfig, report: IngestReport
) -> dict[str, Any]:
    """The provenance stored in the trace's metadata."""
    args = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    args["shifts"] = [s.text() for s in cfg.shifts]
    return {
        "source": str(Path(path).resolve()),
        "source_sha256": trace.sha256(path) if Path(path).is_file() else None,
        "converter": f"helm_plan.ingest.{cfg.kind} v{CONVERTER_VERSION} ({report.variant})",
        "arguments": args,
        "seed": cfg.seed,
        "schema_version": trace.SCHEMA_VERSION,
        "timing": report.timing,
        "mix_shifts": list(report.shift_bursts),
    }


def ingest_to_file(
    path: str | os.PathLike[str], out: str | os.PathLike[str], cfg: IngestConfig
) -> IngestReport:
    """Convert ``path`` and atomically write the trace to ``out`` (nothing written on error)."""
    io.check_outputs({"-o": out}, [path, cfg.arrivals])
    table, report = ingest(path, cfg)
    spans = {regimes.SPANS_KEY: regimes.spans_json(report.spans)} if report.spans else None
    trace.write(table, out, provenance(path, cfg, report), metadata=spans)
    return dataclasses.replace(report, out=str(out))
