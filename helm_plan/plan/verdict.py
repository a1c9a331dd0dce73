"""The verdicts: the one place that turns the numbers into the sentences a planner reads.

Every sentence of the plan's answer and of the report's first screen that
judges (the footprint fits, the split is flat or matters, the node or the
fleet is overloaded, the SLO is met by N, adaptivity or refill pays) comes
from :func:`verdicts` over one :class:`Facts` record, so no two sentences on a
page can disagree: each judgement is made once, in a fixed order, and the
later ones read the earlier ones' outcome (a fitting footprint is not also
"a split that matters"; an overloaded fleet gets no split advice).
``tests/plan/test_verdict.py`` lists every combination and the sentence it
must give.

The rules (``tol`` is the flatness tolerance, 2% by default):

1. **Fleet.** ``nodes`` is None: no fleet up to ``max_nodes`` meets the SLO:
   *overloaded* (more capacity, not a different split); nothing below judges
   the split. Else *met by N*.
2. **Node.** The analysed node (one node of the fleet, as the router fed it)
   with the fleet's split: meets the SLO, or misses it alone while the fleet
   meets it pooled (said as such, never as "overloaded").
3. **Split.** ``fits``: the whole EMB+KV footprint fits one pool, so an r
   inside the band serves every hit (outside it the caches still compete: a
   cyclic KV loop a percent short of its footprint hits on nothing). Else the
   extremes' penalty ``spread`` (the worse of emb-max and kv-max over best
   static, minus 1): within ``tol``: *flat*; above: *matters*. Unknown
   (``spread`` None): nothing is said.
4. **Fleet size by split.** When the plan sized both extremes and best
   static: the split changes the fleet size, or it does not.
5. **Recommendation.** The robust r (the middle of the flat band) beside the
   argmin when they differ, with the band; then how far the per-window
   optimum moves and how wide the median window's band is.
6. **Adaptivity** (a bootstrap CI): gain (low end above 0), loss (high end
   below 0), or no reliable difference.
7. **Refill mode** (eager against throttled P99 with the oracle schedule):
   the sign of the gap is kept: which one is faster, and by how much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FLAT_TOLERANCE = 0.02
"""The default relative P99 tolerance of 'flat' (the oracle's flat_tol)."""


@dataclass(frozen=True)
class Facts:
    """What the verdicts read; None where the run did not measure it."""

    slo_ms: float
    """The SLO planned for, ms."""
    attainment: float = 0.99
    """Share of requests that must meet it."""
    flat_tol: float = FLAT_TOLERANCE
    """Relative P99 tolerance of 'flat'."""
    gpu: str | None = None
    """The GPU kind of the fleet (and of the analysed node)."""
    nodes: int | None = None
    """Fleet size that meets the SLO (None: none up to max_nodes, or no plan)."""
    max_nodes: int | None = None
    """Largest fleet considered (None: no plan was made)."""
    fleet_p99_ms: float | None = None
    """The fleet's pooled P99 at ``nodes`` (or at max_nodes when none meets)."""
    node_p99_ms: float | None = None
    """The analysed node's P99 with the fleet's split."""
    node_attainment: float | None = None
    """Its share of requests within the SLO."""
    fits: bool | None = None
    """The whole EMB+KV footprint fits one pool."""
    scope: str = "the planned traffic"
    """Whose footprint ``fits`` is about (the plan: the planned traffic on one node; the
    report: the analysed node's traffic)."""
    fits_said: bool = False
    """The page already said the footprint fits (the plan, when the fleet is one node and so
    the node's traffic is the planned traffic): rule 3 says nothing more."""
    spread: float | None = None
    """max(emb-max, kv-max) P99 / best-static P99 − 1 on the analysed node."""
    extremes: tuple[float | None, float | None] | None = None
    """(emb-max, kv-max) P99 / best-static P99 − 1 each (which extreme loses)."""
    split_nodes: dict[str, int | None] | None = None
    """Fleet size per static policy (best-static, emb-max, kv-max) behind the baseline router."""
    split_router: str = ""
    """The router ``split_nodes`` were planned behind (named in the sentence: another router may
    need fewer nodes, as the cheapest line can say)."""
    ratio: float | None = None
    """Best static r (the argmin of P99)."""
    robust_ratio: float | None = None
    """The middle of the flat band."""
    band: tuple[float, float] | None = None
    """The flat band: every r within flat_tol of the best P99."""
    fleet_ratio: float | None = None
    """The r the plan sized the fleet with (the first r found to meet the SLO)."""
    r_star: tuple[float, float] | None = None
    """The per-window optimum r*: (lowest, highest) over the windows."""
    median_band: float | None = None
    """The median window's flat band width."""
    adapt: tuple[float, float, float, float] | None = None
    """Adaptivity: (P99 reduction, CI low, CI high, confidence)."""
    refill: tuple[float, float] | None = None
    """P99 with the oracle schedule: (eager, throttled), ms."""


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _ok(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _band(b: tuple[float, float]) -> str:
    """A band of r: two decimals on the 0.01 lattice, else three significant digits (the
    footprint-fits band of ``flat`` is [0.0001, 0.015]; two decimals printed [0.00, 0.01])."""

    def one(x: float) -> str:
        return f"{x:.2f}" if abs(x - round(x, 2)) < 1e-9 else f"{x:.3g}"

    return f"[{one(b[0])}, {one(b[1])}]"


def fleet_sentence(f: Facts) -> str | None:
    """Rule 1."""
    if f.max_nodes is None:
        return None
    if f.nodes is None:
        tail = f" (P99 {f.fleet_p99_ms:.3g} ms at {f.max_nodes})" if _ok(f.fleet_p99_ms) else ""
        return (f"No fleet of up to {f.max_nodes} {f.gpu or 'GPU'} nodes meets the SLO{tail}: "
                "the traffic overloads it; the answer is more capacity (raise --max-nodes) or a "
                "looser SLO, not a different split.")  # fmt: skip
    s = "s" * (f.nodes != 1)
    p99 = f" (P99 {f.fleet_p99_ms:.3g} ms)" if _ok(f.fleet_p99_ms) else ""
    return (f"{f.nodes} {f.gpu or 'GPU'} node{s} meet{'' if s else 's'} the SLO fleet-wide"
            f"{p99}: P99 <= {f.slo_ms:g} ms for {f.attainment:.1%} of requests.")  # fmt: skip


def node_sentence(f: Facts) -> str | None:
    """Rule 2."""
    if not (_ok(f.node_p99_ms) and _ok(f.node_attainment)):
        return None
    meets = f.node_p99_ms <= f.slo_ms and f.node_attainment >= f.attainment
    figures = f"P99 {f.node_p99_ms:.3g} ms, {_pct(f.node_attainment)} within {f.slo_ms:g} ms"
    if f.max_nodes is None:  # no plan: the trace as given on one node
        if meets:
            return f"One node serves the trace within the SLO ({figures})."
        return (f"One node does not serve the trace within the SLO ({figures}): it is "
                "overloaded; plan a fleet (--peak-qps / --scale) rather than a different split.")  # fmt: skip
    if f.nodes is None:
        return (f"The analysed node (one of the {f.max_nodes}) misses the SLO ({figures}), as "
                "the fleet does.")  # fmt: skip
    if f.nodes == 1:
        return None  # the fleet is the node: rule 1 said it
    if meets:
        return f"The analysed node, the busiest of the {f.nodes}, meets the SLO ({figures})."
    return (f"The analysed node, the busiest of the {f.nodes}, misses the SLO on its own "
            f"({figures}) while the fleet meets it pooled over all its nodes.")  # fmt: skip


def split_sentence(f: Facts) -> str | None:
    """Rule 3 (nothing when the fleet is overloaded: no split fixes that)."""
    if f.max_nodes is not None and f.nodes is None:
        return None
    band = f" (r in {_band(f.band)})" if f.band else ""
    ext = (f", and outside it the caches compete (the whole pool to one cache: "
           f"+{_pct(f.spread)} P99)" if _ok(f.spread) and f.spread > f.flat_tol else "")  # fmt: skip
    if f.fits and f.fits_said:
        return None
    if f.fits:
        return (f"The whole EMB+KV footprint of {f.scope} fits one pool: a split that gives "
                f"each cache its footprint{band} serves every hit{ext}.")  # fmt: skip
    if not _ok(f.spread):
        return None
    if f.spread <= f.flat_tol:
        return ("The EMB/KV split hardly matters here: even the whole pool to one cache stays "
                f"within {f.flat_tol:.0%} of the best static P99 ({_pct(f.spread)}).")  # fmt: skip
    keep = f"; keep r within its flat band {_band(f.band)}" if f.band else ""
    who = "one cache"
    if f.extremes and all(_ok(x) for x in f.extremes):
        emb, kv = f.extremes
        who, other, o = ("KV", "EMB", emb) if kv >= emb else ("EMB", "KV", kv)
        keep = f" (to {other}: {o:+.1%}){keep}"
    return (f"The EMB/KV split matters for the node's P99: the whole pool to {who} costs "
            f"+{_pct(f.spread)} P99 against the best static split{keep}.")  # fmt: skip


def fleet_split_sentence(f: Facts) -> str | None:
    """Rule 4."""
    sn = f.split_nodes or {}
    if not {"best-static", "emb-max", "kv-max"} <= set(sn):
        return None
    behind = f"Behind {f.split_router}, the split" if f.split_router else "The split"
    if len(set(sn.values())) == 1:
        n = sn["best-static"]
        if n is None:
            return None
        return (f"{behind} does not change the fleet size: best static, emb-max and kv-max "
                f"all need {n} node{'s' * (n != 1)}.")  # fmt: skip
    parts = ", ".join(f"{k} {'none' if v is None else v}" for k, v in sn.items())
    return f"{behind} changes the fleet size: {parts} nodes."


def recommend_sentence(f: Facts) -> str | None:
    """Rule 5."""
    if f.max_nodes is not None and f.nodes is None:
        return None
    if not (_ok(f.ratio) and _ok(f.robust_ratio)):
        return None
    band = f" (band {_band(f.band)})" if f.band else ""
    sized = ""
    if _ok(f.fleet_ratio) and abs(f.fleet_ratio - f.robust_ratio) >= 0.005:
        sized = (f" The fleet was sized with r = {f.fleet_ratio:.2f}, the first split found to "
                 "meet the SLO; the node's P99 is lowest across the band.")  # fmt: skip
    if abs(f.robust_ratio - f.ratio) < 0.005:
        return f"Deploy r = {f.ratio:.2f} (EMB share of the pool){band}.{sized}"
    return (f"Deploy r = {f.robust_ratio:.2f}, the middle of the flat band{band}: every r in it "
            f"is within {f.flat_tol:.0%} of the best P99; the argmin r = {f.ratio:.2f} sits "
            f"near its edge.{sized}")  # fmt: skip


def movement_sentence(f: Facts) -> str | None:
    """Rule 5b: how far the per-window optimum moves, and how wide its band is."""
    if f.r_star is None or not all(_ok(x) for x in f.r_star):
        return None
    lo, hi = f.r_star
    band = (f"; in the median window any r within a band {f.median_band:.2f} wide is within "
            f"{f.flat_tol:.0%} of the best P99" if _ok(f.median_band) else "")  # fmt: skip
    return f"The per-window optimum r* ranges over [{lo:.2f}, {hi:.2f}] (moves by {hi - lo:.2f}){band}."


def adapt_sentence(f: Facts) -> str | None:
    """Rule 6."""
    if f.adapt is None or not _ok(f.adapt[0]):
        return None
    red, lo, hi, conf = f.adapt
    ci = f"{conf:.0%} CI {_pct(lo)} to {_pct(hi)}" if _ok(lo) and _ok(hi) else "no CI"
    if _ok(lo) and lo > 0:
        return (f"Adapting the split per window cuts P99 by {_pct(red)} against the best static "
                f"split ({ci}).")  # fmt: skip
    if _ok(hi) and hi < 0:
        return (f"Adapting the split per window makes P99 worse by {_pct(-red)} ({ci}): keep a "
                "static split.")  # fmt: skip
    return (f"Adapting the split per window changes P99 by {_pct(red)}, but the {ci} includes "
            "zero: no reliable gain over the best static split.")  # fmt: skip


def refill_sentence(f: Facts) -> str | None:
    """Rule 7: the sign of the eager-vs-throttled gap is kept."""
    if f.refill is None or not all(_ok(x) and x > 0 for x in f.refill):
        return None
    eager, thr = f.refill
    gap = eager / thr - 1.0
    figs = f"eager (blocking) {eager:.3g} ms, throttled (background) {thr:.3g} ms"
    if abs(gap) <= f.flat_tol:
        return f"Refill mode hardly matters here with the oracle schedule: {figs}."
    if gap > 0:
        return (f"Throttled background refill is faster: eager refill costs +{_pct(gap)} P99 "
                f"with the oracle schedule ({figs}).")  # fmt: skip
    return (f"Eager refill is faster here: throttled background refill costs +{_pct(thr / eager - 1)} P99 "
            f"with the oracle schedule ({figs}); blocking the node for a copy pays when the "
            "copy is short.")  # fmt: skip


RULES = (fleet_sentence, node_sentence, split_sentence, fleet_split_sentence,
         recommend_sentence, movement_sentence, adapt_sentence, refill_sentence)  # fmt: skip
"""The rules, in the order their sentences appear."""


def verdicts(f: Facts) -> list[str]:
    """Every sentence the facts support, in :data:`RULES` order."""
    return [s for rule in RULES if (s := rule(f)) is not None]


__all__ = ["FLAT_TOLERANCE", "RULES", "Facts", "verdicts"]
