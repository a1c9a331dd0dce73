"""Synthetic canonical traces: the ``helm-plan synth`` generator.

The generator is fully vectorised numpy; nothing loops per request in Python.
It streams in time order, so memory does not grow with the request count:

1. **Plan** (:func:`plan`, O(1)): the rate shape
   (:func:`helm_plan.regimes.shape`), the cold probabilities, burst hot sets,
   the item bijection and the cut of ``[0, duration_s]`` into generation
   segments of at most ``SEGMENT_REQUESTS`` expected requests and
   ``SEGMENT_TOKENS`` expected history items (config-determined).
2. **Requests** (:mod:`helm_plan.synth.users`), one segment at a time with
   its own generator and carried state of O(users). Each request is either
   *cold* (a user's first request in the trace) or a *revisit*. Outside bursts
   it is cold with probability ``users / E[requests outside bursts]``, inside a
   burst with probability ``burst_cold_share``. A revisit is, with probability
   ``session_share``, a session continuation of the last request at or before
   ``t - lag``, ``lag ~ lognormal(median revisit_gap_s, sigma
   revisit_gap_sigma)`` (heavy tail), by that request's user (drawn forward
   from the anchor, see that module); otherwise a return of a uniformly chosen
   earlier user. Users are numbered by first appearance. A cold request is a
   returning user's (``returning_share``; ``burst_returning_share`` in bursts)
   and carries their pre-existing history (1 + a rounded lognormal, mean
   ``returning_history_mean``), or a new user's initial history (mean
   ``cold_history_mean``); a revisit carries a geometric number of new items
   (mean ``new_items_mean``); a user's history is capped at ``max_seq_len``
   (items past it are dropped).
3. **Items** (:mod:`helm_plan.synth.items`), per segment with its own seeded
   generator. Item ranks are Zipf (``P(rank k) ∝ ∫_{k-1/2}^{k+1/2} x^-alpha dx
   ≈ k^-alpha``, sampled by inverting the continuous CDF, O(1) memory whatever
   the catalog size). In the trend span the ranking rotates by up to
   ``drift_ranks`` positions, and by ``drift_ranks_per_s`` per second
   throughout, so different items become hot. Ranks map to item ids by a
   seeded affine bijection ``(a·pos + b) mod items``. Inside a burst, each
   item is taken from that burst's hot set (``burst_hot_items`` ids) with
   probability ``burst_hot_share``, or is one of the burst's new items, never
   drawn before it, with probability ``burst_new_item_share``.

Segment outputs are cut into row groups of at most ``ROW_GROUP_ROWS`` requests
and ``ROW_GROUP_TOKENS`` items; the rows themselves depend only on the config,
not on the row groups.
The ``candidates`` column is left out: the simulator draws ``n_candidates``
ids per request from the trailing popularity (:mod:`helm_plan.arrays`).
The same config and seed give an identical table and identical file bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from helm_plan import regimes, trace
from helm_plan.errors import ConfigError
from helm_plan.synth import items as synth_items
from helm_plan.synth import users as synth_users
from helm_plan.synth.config import REQUESTS_PER_USER, ROW_GROUP_ROWS, ROW_GROUP_TOKENS, SynthConfig
from helm_plan.synth.items import zipf_ranks

__all__ = ["Plan", "RowBuffer", "iter_chunks", "plan", "resolved_users", "synthesize", "zipf_ranks"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Plan:
    """Trace-wide parameters of a synthetic trace: rate shape, arrival model and item maps."""

    items: synth_items.ItemModel
    """Burst hot sets, the id bijection and the new-item blocks."""
    arrivals: synth_users.ArrivalModel = field(repr=False)
    """Rates and probabilities the segments draw requests from."""
    shape: regimes.RegimeShape = field(repr=False)
    """The rate shape the arrivals follow."""

    @property
    def expected_requests(self) -> float:
        return self.shape.expected_requests

    @property
    def hot_items(self) -> np.ndarray:
        """Hot-item ids of each burst, shape (bursts, burst_hot_items), int64."""
        return self.items.hot_items

    @property
    def bijection(self) -> tuple[int, int]:
        """(a, b) of the rank-position to item-id map (a·pos + b) mod items."""
        return self.items.bijection


def resolved_users(cfg: SynthConfig, outside_requests: float) -> int:
    """``cfg.users``, or one user per ``REQUESTS_PER_USER`` expected requests outside bursts."""
    if cfg.users is not None:
        return cfg.users
    return max(1, round(outside_requests / REQUESTS_PER_USER))


def plan(cfg: SynthConfig) -> Plan:
    """Trace-wide parameters: rate shape, arrival model, burst hot sets, item bijection."""
    shp = regimes.shape(
        cfg.regime,
        qps=cfg.qps,
        duration_s=cfg.duration_s,
        seed=cfg.seed,
        burst_factor=cfg.burst_factor,
        burst_len_frac=cfg.burst_len_frac,
        bursts_per_duration=cfg.bursts,
    )
    # Cold probability outside bursts: E[cold outside bursts] = users.
    cum = np.concatenate(
        [[0.0], np.cumsum((shp.rate[1:] + shp.rate[:-1]) * 0.5 * np.diff(shp.grid_s))]
    )
    burst_mass = sum(
        float(np.interp(e, shp.grid_s, cum) - np.interp(a, shp.grid_s, cum)) for a, e in shp.bursts
    )
    outside = max(cum[-1] - burst_mass, 1e-12)
    p_cold = min(1.0, resolved_users(cfg, outside) / outside)
    im = synth_items.item_model(cfg, shp)
    return Plan(im, synth_users.arrival_model(cfg, shp, p_cold), shp)


class RowBuffer:
    """Segment tables waiting to be cut into row groups (at most one row group plus a segment)."""

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []
        self.rows = 0
        self.tokens = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self.parts.append(table)
            self.rows += table.num_rows
            self.tokens += _tokens(table, table.num_rows)

    def full(self) -> bool:
        return self.rows >= ROW_GROUP_ROWS or self.tokens >= ROW_GROUP_TOKENS

    def group_rows(self) -> int:
        """Rows of the next row group: at most ROW_GROUP_ROWS and (past its first row)
        ROW_GROUP_TOKENS items."""
        rows, budget = 0, ROW_GROUP_TOKENS
        for part in self.parts:
            want = min(part.num_rows, ROW_GROUP_ROWS - rows)
            off = _offsets(part)
            fit = int(np.searchsorted(off[1 : want + 1], budget, side="right"))
            if rows == 0:
                fit = max(fit, 1)
            rows += fit
            budget -= int(off[fit])
            if fit < part.num_rows or rows == ROW_GROUP_ROWS:
                break
        return rows

    def take(self, rows: int) -> pa.Table:
        """The next ``rows`` rows, as zero-copy slices of the buffered segments."""
        out: list[pa.Table] = []
        need = rows
        while need:
            head = self.parts[0]
            if head.num_rows <= need:
                out.append(self.parts.pop(0))
                need -= head.num_rows
            else:
                out.append(head.slice(0, need))
                self.parts[0] = head.slice(need)
                need = 0
        self.rows -= rows
        table = pa.concat_tables(out)
        self.tokens -= _tokens(table, rows)
        return table


def _offsets(part: pa.Table) -> np.ndarray:
    """Item offsets of a buffered table's rows, from 0 (len rows + 1)."""
    col = part.column("new_items")
    off = np.concatenate(
        [[0]] + [np.diff(c.offsets.to_numpy().astype(np.int64)) for c in col.chunks]
    )
    return np.cumsum(off)


def _tokens(table: pa.Table, rows: int) -> int:
    return int(_offsets(table)[rows])


def iter_chunks(
    cfg: SynthConfig, *, pl: Plan | None = None, progress: Progress | None = None
) -> Iterator[pa.Table]:
    """Yield the trace as canonical tables of ``ROW_GROUP_ROWS`` requests (fewer when their
    histories pass ``ROW_GROUP_TOKENS`` items; the last may be short).

    Requests are generated per time segment (:mod:`helm_plan.synth.users`), so memory
    holds one row group, one segment and O(users) carried state, whatever the trace
    length; the rows do not depend on ``ROW_GROUP_ROWS`` or ``ROW_GROUP_TOKENS``.
    """
    pl = pl or plan(cfg)
    st = synth_users.UserState()
    buf = RowBuffer()
    done = 0
    expected = round(pl.expected_requests)
    last = pl.arrivals.segments - 1
    for seg in range(pl.arrivals.segments):
        ts, user, k = synth_users.segment(cfg, pl.arrivals, st, seg)
        off = np.zeros(len(k) + 1, np.int64)
        np.cumsum(k, out=off[1:])
        items = synth_items.segment_items(cfg, pl.items, pl.shape, ts, off, seg)
        ncand = np.full(len(k), cfg.candidates, np.int32)
        buf.add(trace.make_table(ts, user, off, items, ncand))
        del ts, user, k, off, items, ncand
        while buf.rows and (buf.full() or seg == last):
            chunk = buf.take(buf.group_rows())
            done += chunk.num_rows
            yield chunk
            if progress:
                progress(done, max(done, expected))
    if progress and done:
        progress(done, done)


def synthesize(cfg: SynthConfig, *, progress: Progress | None = None) -> pa.Table:
    """The whole synthetic trace as one canonical table (big traces: :func:`helm_plan.synth.write`)."""
    chunks = list(iter_chunks(cfg, progress=progress))
    if not chunks:
        raise ConfigError(
            f"qps={cfg.qps} over duration_s={cfg.duration_s} drew no requests",
            hint="raise --qps or --duration-s",
        )
    return trace.validate(pa.concat_tables(chunks))
