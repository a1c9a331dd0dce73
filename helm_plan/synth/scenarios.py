"""Named synthetic scenarios (``helm-plan synth --scenario NAME``): workloads with a known answer.

A scenario is a sequence of *phases*, each an ordinary :class:`SynthConfig`
generated on its own and laid end to end: phase ``i`` covers ``[start_s,
end_s)``, its times are shifted by ``start_s``, its users get ids after every
earlier phase's (so users are still numbered by first appearance, and no user
spans two phases), and its item ids are shifted by the phase's ``item_offset``
(so regimes can draw from disjoint catalogs). Each phase has its own seed,
derived from the scenario seed and the phase index. The phases are recorded in
the file metadata as regime spans (:data:`helm_plan.regimes.SPANS_KEY`, read
back by :func:`helm_plan.regimes.read_spans`); :meth:`Scenario.spans` gives the
same spans without a file.

``detectability`` (issue 14, item 10) alternates two regimes, ``A`` first, in
``phases`` phases of ``phase_s`` seconds at the same steady ``qps``:

- **A, KV is everything.** Returning users only (``returning_share = 1``):
  each user's first request carries a long pre-existing history (mean
  ``a_history_mean``, lognormal spread ``a_history_sigma``, capped at
  ``max_seq_len``), and every user makes about ``a_requests_per_user``
  requests in the phase, 90% of them session continuations a median
  ``a_revisit_gap_s`` after the previous request, each adding
  ``a_new_items_mean`` items. Reusing a user's KV saves a long prefill; items
  come from ``a_items`` ids (``0 .. a_items-1``, Zipf 1.0), so the EMB hot set
  is tiny.
- **B, EMB is everything.** Every request is a new user's (cold share 1: no
  KV can ever be reused) with a short initial history (mean
  ``b_history_mean``), over a huge catalog (``b_items`` ids from ``a_items``
  on, Zipf ``b_zipf_alpha``) whose ranking churns by ``b_drift_ranks_per_s``
  ranks per second and is reshuffled in every B phase (its own bijection):
  the hit rate of the embedding cache is all the cache can win.

So the best split is near the KV end in A and near the EMB end in B; the
phase boundaries ``(i·phase_s, (i+1)·phase_s, "A" | "B")`` are exact. The
defaults contest gr-small's a100-80g pool (71.75 GiB: A's 10,290 contexts fit
only at r <= 0.0125, B's 8 GiB of item rows want r >= ~0.1) at a load where the
2.5-ms SLO binds: ``analyze``'s capacity plan sizes **one** a100-80g node (best
static r = 0.01, P99 1.39 ms; every r from 0.02 up misses the SLO in A), so
the analysed node carries the whole trace, and adapting the split per window
cuts its P99 by 32.1% [22.7, 38.9] (measured 2026-12-06; README, "Scenarios").
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from helm_plan import regimes, trace
from helm_plan._version import __version__
from helm_plan.config import from_dict, require_positive
from helm_plan.errors import ConfigError
from helm_plan.synth.config import SynthConfig, require_int_range
from helm_plan.synth.core import Progress, RowBuffer, iter_chunks, plan
from helm_plan.synth.cyclic import CyclicConfig, iter_cyclic
from helm_plan.synth.like import SynthResult, write_stream


@dataclass(frozen=True)
class Phase:
    """One stretch of a scenario: an ordinary synth config placed at ``start_s``."""

    name: str
    """Regime name of the phase (its span's name)."""
    start_s: float
    """Phase start in the scenario, seconds."""
    end_s: float
    """Phase end, seconds (start_s + config.duration_s)."""
    config: SynthConfig | CyclicConfig
    """What the phase generates (times from 0, users from 0, items from 0)."""
    item_offset: int
    """Added to the phase's item ids."""


@dataclass(frozen=True)
class Scenario:
    """A named sequence of phases and the options it was built from."""

    name: str
    """Scenario name (``synth --scenario``)."""
    options: dict[str, Any]
    """The scenario's options, every one resolved (stored in the provenance)."""
    phases: tuple[Phase, ...]
    """The phases in time order, contiguous from 0."""

    @property
    def duration_s(self) -> float:
        return self.phases[-1].end_s

    def spans(self) -> list[regimes.RegimeSpan]:
        """The regime spans ``(start_s, end_s, name)`` of the phases."""
        return [regimes.RegimeSpan(p.start_s, p.end_s, p.name) for p in self.phases]


@dataclass(frozen=True)
class DetectabilityConfig:
    """Options of the ``detectability`` scenario (``synth --scenario detectability --set K=V``)."""

    qps: float = 3000.0
    """Steady arrival rate of every phase, requests per second."""
    phase_s: float = 30.0
    """Length of each phase, seconds."""
    phases: int = 4
    """Number of phases, alternating A, B, A, B, ... (A first)."""
    candidates: int = 16
    """n_candidates of every request."""
    max_seq_len: int = 8192
    """Cap on each user's history, tokens."""
    seed: int = 0
    """Scenario seed (each phase's seed derives from it and the phase index)."""
    a_users: int = 10_290
    """A: returning users, each refreshing every a_users / qps seconds (the KV working set:
    a_users contexts of about a_history_mean tokens)."""
    a_items: int = 2_000
    """A: item ids 0 .. a_items-1 (the tiny EMB hot set)."""
    a_history_mean: float = 1800.0
    """A: mean pre-existing history of a returning user, tokens."""
    a_history_sigma: float = 0.02
    """A: log-space spread of that history."""
    a_jitter_s: float = 0.0
    """A: standard deviation of a request's time around its user's cadence, seconds."""
    a_join_periods: float = 3.0
    """A: the users join over this many periods (their first requests, full prefills)."""
    a_new_items_mean: float = 0.0
    """A: mean new items per revisit."""
    b_items: int = 8_000_000
    """B: catalog size (ids a_items .. a_items+b_items-1)."""
    b_zipf_alpha: float = 0.0
    """B: item popularity skew."""
    b_history_mean: float = 512.0
    """B: mean initial history of a new user, tokens."""
    b_drift_ranks_per_s: float = 0.0
    """B: popularity churn, ranks per second."""

    def __post_init__(self) -> None:
        for name in ("qps", "phase_s"):
            _positive(name, getattr(self, name))
        for name, lo in (("phases", 1), ("candidates", 0), ("max_seq_len", 1), ("seed", 0),
                         ("a_users", 1)):  # fmt: skip
            require_int_range(name, getattr(self, name), lo)
        for name in ("a_items", "b_items"):
            require_int_range(name, getattr(self, name), 1, 1_000_000_000)


def _positive(name: str, value: float) -> None:
    try:
        require_positive(name, value)
    except ConfigError as e:
        raise ConfigError(str(e), hint="see the scenario's options in the README") from None


def _phase_seed(seed: int, i: int) -> int:
    """A phase's seed: independent streams per (scenario seed, phase)."""
    return int(np.random.SeedSequence([seed, 0x5CE, i]).generate_state(1, np.uint32)[0])


def _detectability(o: DetectabilityConfig) -> tuple[Phase, ...]:
    per_phase = o.qps * o.phase_s
    common: dict[str, Any] = {
        "regime": "steady",
        "qps": o.qps,
        "duration_s": o.phase_s,
        "candidates": o.candidates,
        "max_seq_len": o.max_seq_len,
        "drift_ranks": 0,
        "burst_new_item_share": 0.0,
    }
    b_cfg = {
        **common,
        "users": max(1, math.ceil(per_phase)),  # >= the expected requests: every request cold
        "items": o.b_items,
        "zipf_alpha": o.b_zipf_alpha,
        "cold_history_mean": o.b_history_mean,
        "cold_history_sigma": 0.5,
        "returning_share": 0.0,
        "drift_ranks_per_s": o.b_drift_ranks_per_s,
    }
    out = []
    for i in range(o.phases):
        a = i % 2 == 0
        seed = _phase_seed(o.seed, i)
        cfg: SynthConfig | CyclicConfig
        if a:
            cfg = CyclicConfig(
                users=o.a_users, period_s=o.a_users / o.qps, duration_s=o.phase_s,
                history_mean=o.a_history_mean, history_sigma=o.a_history_sigma,
                jitter_s=o.a_jitter_s, join_periods=o.a_join_periods,
                new_items_mean=o.a_new_items_mean, items=o.a_items,
                candidates=o.candidates, max_seq_len=o.max_seq_len, seed=seed,
            )  # fmt: skip
        else:
            cfg = SynthConfig(**b_cfg, seed=seed)
        start = i * o.phase_s
        out.append(Phase("A" if a else "B", start, start + o.phase_s, cfg, 0 if a else o.a_items))
    return tuple(out)


@dataclass(frozen=True)
class FlatConfig:
    """Options of the ``flat`` scenario (``synth --scenario flat --set K=V``): regime A of
    ``detectability`` all along, so the best split never moves."""

    qps: float = 2500.0
    """Steady arrival rate, requests per second."""
    duration_s: float = 120.0
    """Length, seconds."""
    candidates: int = 16
    """n_candidates of every request."""
    max_seq_len: int = 8192
    """Cap on each user's history, tokens."""
    seed: int = 0
    """Scenario seed."""
    users: int = 10_290
    """Returning users, each refreshing every users / qps seconds."""
    items: int = 2_000
    """Item ids 0 .. items-1."""
    history_mean: float = 1800.0
    """Mean pre-existing history of a user, tokens."""

    def __post_init__(self) -> None:
        for name in ("qps", "duration_s"):
            _positive(name, getattr(self, name))
        for name, lo in (("candidates", 0), ("max_seq_len", 1), ("seed", 0), ("users", 1)):
            require_int_range(name, getattr(self, name), lo)


def _flat(o: FlatConfig) -> tuple[Phase, ...]:
    cfg = CyclicConfig(
        users=o.users, period_s=o.users / o.qps, duration_s=o.duration_s,
        history_mean=o.history_mean, new_items_mean=0.0, items=o.items,
        candidates=o.candidates, max_seq_len=o.max_seq_len, seed=_phase_seed(o.seed, 0),
    )  # fmt: skip
    return (Phase("steady", 0.0, o.duration_s, cfg, 0),)


#: Scenario name -> (options dataclass, phases builder).
SCENARIOS: dict[str, tuple[type, Callable[[Any], tuple[Phase, ...]]]] = {
    "detectability": (DetectabilityConfig, _detectability),
    "flat": (FlatConfig, _flat),
}


def scenario(name: str, **options: Any) -> Scenario:
    """The scenario ``name`` with ``options`` (fields of its options dataclass; ``None`` ignored)."""
    if name not in SCENARIOS:
        raise ConfigError(f"unknown scenario {name!r}", hint=f"use one of {', '.join(SCENARIOS)}")
    cls, build = SCENARIOS[name]
    given = {k: v for k, v in options.items() if v is not None}
    opts = from_dict(cls, given, section=f"scenario {name}")
    return Scenario(name, dataclasses.asdict(opts), build(opts))


def detectability(**options: Any) -> Scenario:
    """The ``detectability`` scenario (options: :class:`DetectabilityConfig` fields)."""
    return scenario("detectability", **options)


def iter_scenario_chunks(sc: Scenario, *, progress: Progress | None = None) -> Iterator[pa.Table]:
    """Yield the scenario's trace as canonical row groups (phases streamed one after another)."""
    buf = RowBuffer()
    users = done = 0
    expected = round(sum(_expected(ph.config) for ph in sc.phases))
    for ph in sc.phases:
        top = -1
        chunks = (
            iter_cyclic(ph.config)
            if isinstance(ph.config, CyclicConfig)
            else iter_chunks(ph.config)
        )
        for chunk in chunks:
            top = max(top, int(chunk.column("user_id").to_numpy().max()))
            buf.add(_place(chunk, ph, users))
            while buf.full():
                out = buf.take(buf.group_rows())
                done += out.num_rows
                yield out
                if progress:
                    progress(done, max(done, expected))
        users += top + 1
    while buf.rows:
        out = buf.take(buf.group_rows())
        done += out.num_rows
        yield out
    if progress and done:
        progress(done, done)


def _expected(cfg: SynthConfig | CyclicConfig) -> float:
    return cfg.expected_requests if isinstance(cfg, CyclicConfig) else plan(cfg).expected_requests


def _place(chunk: pa.Table, ph: Phase, user_offset: int) -> pa.Table:
    """A phase's chunk moved to its place in the scenario (times, user ids, item ids)."""
    ni = chunk.column("new_items").combine_chunks()
    off = ni.offsets.to_numpy().astype(np.int64)
    vals = ni.values.to_numpy()[off[0] : off[-1]] + ph.item_offset
    return trace.make_table(
        chunk.column("ts_s").to_numpy() + ph.start_s,
        chunk.column("user_id").to_numpy() + user_offset,
        off - off[0],
        vals,
        chunk.column("n_candidates").to_numpy(),
    )


def synthesize_scenario(sc: Scenario) -> pa.Table:
    """The whole scenario trace as one canonical table."""
    chunks = list(iter_scenario_chunks(sc))
    if not chunks:
        raise ConfigError(
            f"scenario {sc.name} drew no requests", hint="raise its qps or phase_s (--set qps=...)"
        )
    return trace.validate(pa.concat_tables(chunks))


def provenance(sc: Scenario) -> dict[str, Any]:
    """Provenance stored in the file metadata of a scenario trace."""
    return {
        "source": "synth",
        "converter": "helm_plan.synth.scenarios",
        "scenario": sc.name,
        "arguments": sc.options,
        "phases": [
            {
                "name": p.name,
                "start_s": p.start_s,
                "end_s": p.end_s,
                "item_offset": p.item_offset,
                "config": dataclasses.asdict(p.config),
            }
            for p in sc.phases
        ],
        "seed": sc.options.get("seed"),
        "schema_version": trace.SCHEMA_VERSION,
        "generator_version": __version__,
    }


def write_scenario(
    sc: Scenario, path: str | os.PathLike[str], *, progress: Progress | None = None
) -> SynthResult:
    """Stream the scenario to ``path`` (atomic), with its regime spans in the metadata."""
    meta = {
        "helm_plan.schema_version": trace.SCHEMA_VERSION,
        "helm_plan.provenance": json.dumps(provenance(sc), sort_keys=True, default=str),
        regimes.SPANS_KEY: regimes.spans_json(sc.spans()),
    }
    empty = ConfigError(
        f"scenario {sc.name} drew no requests", hint="raise its qps or phase_s (--set qps=...)"
    )
    rows, users, tokens = write_stream(
        path, iter_scenario_chunks(sc, progress=progress), meta, empty
    )
    return SynthResult(Path(path), rows, users, tokens, ())
