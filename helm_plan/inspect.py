"""Workload statistics of a canonical trace, computed with DuckDB SQL over the parquet file.

DuckDB streams the file and spills to disk past ``memory_limit``, so a trace
larger than memory can be inspected. Nothing is loaded into Python but
aggregates.

``TraceStats.to_json()`` returns a flat object, schema_version "1". Every key
is always present; a figure that does not exist for the trace is ``null``.

=============================  ========  =====================================================
key                            type      meaning
=============================  ========  =====================================================
schema_version                 str       "1"
trace                          str       the file inspected
requests                       int       rows
users                          int       distinct user_id
items                          int       distinct item ids in new_items (and candidates, if present)
history_tokens                 int       total new items over all requests
duration_s                     float     max(ts_s) - min(ts_s)
qps_bins                       int       1 s bins [s, s+1) for s = 0 .. floor(max ts_s), empty ones included
                                         (ts_s rebased to 0 first if absolute, see helm_plan.trace.read)
mean_qps                       float     requests / qps_bins (the mean per-second count)
peak_qps                       int       largest per-second count
qps_cv                         float     population std / mean of the per-second counts
history_len_p50                float     median over requests of the user's history length after the
                                         request (cumulative new items of that user in file order),
                                         linear interpolation (numpy's default percentile)
history_len_p95                float     95th percentile of the same, linear interpolation
history_len_max                int       largest history length
new_items_mean                 float     mean new items per request
first_request_items_mean       float     mean new items of each user's first request (initial history)
revisit_new_items_mean         float?    mean new items of the other requests; null without revisits
cold_share                     float     share of requests that are a user's first (= users / requests)
revisit_gap_p50_s              float?    median gap between consecutive requests of the same user, s
revisit_gap_p90_s              float?    90th percentile of the same gap, s
zipf_alpha                     float?    fitted popularity skew (method below); null with < 3 ranks
zipf_fit_ranks                 int       ranks the fit used
model                          str?      model profile name, or null
max_seq_len                    int?      the model's maximum history length
emb_footprint_bytes            int?      items * EMB bytes per token (an upper bound: hashed
                                         side tables share rows)
kv_footprint_bytes             int?      sum over users of min(final history, max_seq_len) * kv_bytes_per_token
=============================  ========  =====================================================

**Zipf alpha.** Items are ranked by their frequency in ``new_items``
(interactions; candidates are not counted). Ranks whose count is below
``ZIPF_MIN_COUNT`` are dropped (their frequency is mostly sampling noise).
``alpha = -slope`` of the least-squares line of ln(count) on ln(rank),
weighted by 1/rank so every decade of ranks weighs the same instead of the
long tail dominating.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from helm_plan import trace
from helm_plan.config import Progress
from helm_plan.errors import ConfigError
from helm_plan.profiles import ModelProfile

SCHEMA_VERSION = "1"
#: DuckDB's buffer memory cap when none is given (it spills to disk past it).
DEFAULT_MEMORY_LIMIT = "1GB"
#: Ranks with fewer occurrences than this are left out of the Zipf fit.
ZIPF_MIN_COUNT = 5


LABELS: dict[str, str] = {
    "requests": "requests",
    "users": "users",
    "items": "distinct items",
    "history_tokens": "history items (all requests)",
    "duration_s": "duration (s)",
    "qps_bins": "1 s bins",
    "mean_qps": "mean arrival rate (req/s)",
    "peak_qps": "peak arrival rate (req/s, 1 s bins)",
    "qps_cv": "arrival-rate CV (1 s bins)",
    "history_len_p50": "history length after a request, median (tokens)",
    "history_len_p95": "history length after a request, P95 (tokens)",
    "history_len_max": "longest history (tokens)",
    "new_items_mean": "new items per request, mean",
    "first_request_items_mean": "items in a user's first request, mean",
    "revisit_new_items_mean": "new items per revisit, mean",
    "cold_share": "share of requests from new users",
    "revisit_gap_p50_s": "gap between a user's requests, median (s)",
    "revisit_gap_p90_s": "gap between a user's requests, P90 (s)",
    "zipf_alpha": "popularity skew (Zipf alpha)",
    "zipf_fit_ranks": "item ranks in the Zipf fit",
    "model": "model profile",
    "max_seq_len": "model's longest history (tokens)",
    "emb_footprint_bytes": "EMB footprint (all items' rows)",
    "kv_footprint_bytes": "KV footprint (all users' histories)",
}
"""Human labels (with units) of the :class:`TraceStats` keys, for tables and reports."""


@dataclass(frozen=True)
class TraceStats:
    """Workload figures of one trace (see the module docstring for exact definitions)."""

    trace: str
    """The file inspected."""
    requests: int
    """Rows."""
    users: int
    """Distinct users."""
    items: int
    """Distinct item ids in new_items and candidates."""
    history_tokens: int
    """Total new items over all requests."""
    duration_s: float
    """max(ts_s) - min(ts_s), seconds."""
    qps_bins: int
    """Number of 1 s bins from 0 to floor(max ts_s), empty ones included."""
    mean_qps: float
    """Mean per-second request count."""
    peak_qps: int
    """Largest per-second request count."""
    qps_cv: float
    """Coefficient of variation of the per-second counts."""
    history_len_p50: float
    """Median history length after a request, tokens."""
    history_len_p95: float
    """95th percentile history length after a request, tokens."""
    history_len_max: int
    """Longest history, tokens."""
    new_items_mean: float
    """Mean new items per request."""
    first_request_items_mean: float
    """Mean new items of a user's first request."""
    revisit_new_items_mean: float | None
    """Mean new items of a revisit (None without revisits)."""
    cold_share: float
    """Share of requests that are a user's first."""
    revisit_gap_p50_s: float | None
    """Median gap between consecutive requests of a user, seconds."""
    revisit_gap_p90_s: float | None
    """90th percentile gap between consecutive requests of a user, seconds."""
    zipf_alpha: float | None
    """Fitted item popularity skew (None if fewer than 3 ranks qualify)."""
    zipf_fit_ranks: int
    """Ranks used by the Zipf fit."""
    model: str | None = None
    """Model profile name the footprints refer to."""
    max_seq_len: int | None = None
    """The model's maximum history length, tokens."""
    emb_footprint_bytes: int | None = None
    """Distinct items times the EMB bytes a token looks up (an upper bound with hashed tables)."""
    kv_footprint_bytes: int | None = None
    """Sum over users of min(final history, max_seq_len) times kv_bytes_per_token."""

    def to_json(self) -> dict[str, Any]:
        """A flat JSON-ready dict (schema in the module docstring)."""
        return {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self)}


def zipf_fit(counts: np.ndarray, multiplicity: np.ndarray) -> tuple[float | None, int]:
    """(alpha, ranks used) of the weighted log-log fit; ``None`` with fewer than 3 ranks.

    ``counts`` in descending order, ``multiplicity[i]`` items having ``counts[i]``:
    ranks are 1, 2, ... down the expanded counts. Summed in numpy in this fixed
    order, so identical files give bit-identical alphas (DuckDB's parallel float
    sums do not).
    """
    c = np.repeat(np.asarray(counts, np.float64), np.asarray(multiplicity, np.int64))
    k = len(c)
    if k < 3:
        return None, k
    rk = np.arange(1, k + 1, dtype=np.float64)
    x, y, w = np.log(rk), np.log(c), 1.0 / rk
    sw, swx, swy = w.sum(), (w * x).sum(), (w * y).sum()
    swxx, swxy = (w * x * x).sum(), (w * x * y).sum()
    den = sw * swxx - swx * swx
    if not den > 0:
        return None, k
    return float(-(sw * swxy - swx * swy) / den), k


def inspect_trace(
    path: str | os.PathLike[str],
    model: ModelProfile | None = None,
    *,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    threads: int | None = None,
    progress: Progress | None = None,
) -> TraceStats:
    """Compute :class:`TraceStats` of the trace at ``path`` with DuckDB (bounded memory).

    ``memory_limit`` caps DuckDB's buffer memory (it spills to a temporary
    folder past it); ``threads`` defaults to DuckDB's choice (all cores).
    """
    import duckdb

    p = Path(path)
    # The same validation as every other command, streamed batch by batch.
    off = trace.validate_file(p).ts_offset_s
    has_cands = "candidates" in pq.read_schema(p).names
    steps = 3
    tick = progress or (lambda done, total: None)
    tick(0, steps)
    with tempfile.TemporaryDirectory(prefix="helm-inspect-") as spill:
        try:
            con = duckdb.connect(config={"memory_limit": memory_limit, "temp_directory": spill})
        except duckdb.Error as e:
            raise ConfigError(
                f"invalid memory limit {memory_limit!r}: {str(e).splitlines()[0]}",
                hint="pass --memory-limit as a size such as 512MB or 4GB",
            ) from e
        try:
            con.execute("SET enable_progress_bar = false")  # the library prints nothing
            if threads is not None:
                con.execute(f"SET threads = {int(threads)}")
            con.execute("SET preserve_insertion_order = false")
            src = "read_parquet($path, file_row_number = true)"
            arg = {"path": str(p)}

            # 1. Totals and the per-second bins (of times rebased to 0, see trace.read).
            n, users, tokens, min_ts, max_ts = con.execute(
                f"""SELECT count(*), count(DISTINCT user_id), sum(len(new_items)),
                           min(ts_s), max(ts_s)
                    FROM {src}""",
                arg,
            ).fetchone()
            n_bins = int(math.floor(max_ts - off)) + 1
            s1, s2, peak = con.execute(
                f"""SELECT sum(c)::DOUBLE, sum(c * c)::DOUBLE, max(c) FROM (
                        SELECT count(*) AS c FROM {src} GROUP BY floor(ts_s - $off))""",
                {**arg, "off": off},
            ).fetchone()
            mean_qps = s1 / n_bins
            var = max(s2 / n_bins - mean_qps * mean_qps, 0.0)
            qps_cv = math.sqrt(var) / mean_qps if mean_qps > 0 else 0.0
            tick(1, steps)

            # 2. Per-user windows: history length, revisit gaps, first-request sizes.
            kv_tokens_sql = (
                f"(SELECT sum(least(h_final, {int(model.max_seq_len)})) FROM fin)"
                if model
                else "NULL::BIGINT"
            )
            row = con.execute(
                f"""WITH t AS (
                        SELECT user_id, ts_s, len(new_items) AS k, file_row_number AS rn FROM {src}),
                    w AS (
                        SELECT user_id, k,
                               sum(k) OVER (PARTITION BY user_id ORDER BY rn
                                            ROWS UNBOUNDED PRECEDING) AS h,
                               ts_s - lag(ts_s) OVER (PARTITION BY user_id ORDER BY rn) AS gap
                        FROM t),
                    agg AS (
                        SELECT quantile_cont(h, [0.5, 0.95]) AS hq, max(h) AS hmax,
                               quantile_cont(gap, [0.5, 0.9]) AS gq,
                               avg(k) FILTER (WHERE gap IS NULL) AS k_first,
                               avg(k) FILTER (WHERE gap IS NOT NULL) AS k_rev,
                               avg(k) AS k_all
                        FROM w),
                    fin AS (SELECT sum(len(new_items)) AS h_final FROM {src} GROUP BY user_id)
                SELECT agg.*, {kv_tokens_sql} FROM agg""",
                arg,
            ).fetchone()
            hq, hmax, gq, k_first, k_rev, k_all, kv_tokens = row
            tick(2, steps)

            # 3. Item frequencies (one hash aggregate), distinct items, and the counts the
            # Zipf fit needs: how many items have each count (a short table, sorted).
            cand = f" UNION SELECT unnest(candidates) AS item FROM {src}" if has_cands else ""
            con.execute(
                f"""CREATE TEMP TABLE f AS
                    SELECT item, count(*) AS c
                    FROM (SELECT unnest(new_items) AS item FROM {src}) GROUP BY item""",
                arg,
            )
            (items,) = con.execute(
                f"SELECT count(*) FROM (SELECT item FROM f{cand})", arg if cand else None
            ).fetchone()
            freq = con.execute(
                f"""SELECT c, count(*) AS m FROM f WHERE c >= {ZIPF_MIN_COUNT}
                    GROUP BY c ORDER BY c DESC"""
            ).fetchnumpy()
            tick(3, steps)
        finally:
            con.close()

    alpha, k_fit = zipf_fit(freq["c"], freq["m"])
    emb = kv = None
    if model is not None:
        emb = int(items) * model.token_lookup_bytes  # every table row of every item
        kv = int(kv_tokens or 0) * model.kv_bytes_per_token
    return TraceStats(
        trace=str(p),
        requests=int(n),
        users=int(users),
        items=int(items),
        history_tokens=int(tokens or 0),
        duration_s=float(max_ts - min_ts),
        qps_bins=n_bins,
        mean_qps=float(mean_qps),
        peak_qps=int(peak),
        qps_cv=float(qps_cv),
        history_len_p50=float(hq[0]),
        history_len_p95=float(hq[1]),
        history_len_max=int(hmax),
        new_items_mean=float(k_all),
        first_request_items_mean=float(k_first),
        revisit_new_items_mean=None if k_rev is None else float(k_rev),
        cold_share=float(users) / float(n),
        revisit_gap_p50_s=None if gq is None else float(gq[0]),
        revisit_gap_p90_s=None if gq is None else float(gq[1]),
        zipf_alpha=None if alpha is None else float(alpha),
        zipf_fit_ranks=int(k_fit),
        model=model.name if model else None,
        max_seq_len=model.max_seq_len if model else None,
        emb_footprint_bytes=emb,
        kv_footprint_bytes=kv,
    )
