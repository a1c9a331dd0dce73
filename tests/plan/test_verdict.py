"""The verdicts (``plan/verdict.py``): every rule's every case and the sentence it gives, and,
over every combination of the rules' inputs, that no two sentences contradict each other."""

from __future__ import annotations

import itertools
import math

import pytest

from helm_plan.plan.verdict import (
    Facts,
    adapt_sentence,
    fleet_sentence,
    fleet_split_sentence,
    movement_sentence,
    node_sentence,
    recommend_sentence,
    refill_sentence,
    split_sentence,
    verdicts,
)

F = Facts(slo_ms=10.0, attainment=0.99, gpu="a100-80g")


def f(**kw) -> Facts:
    return Facts(**{**F.__dict__, **kw})


# ---- rule 1: the fleet ----------------------------------------------------------------------
FLEET = [
    (f(), None),  # no plan
    (f(nodes=3, max_nodes=64, fleet_p99_ms=8.2),
     "3 a100-80g nodes meet the SLO fleet-wide (P99 8.2 ms): P99 <= 10 ms for 99.0% of "
     "requests."),
    (f(nodes=1, max_nodes=64),
     "1 a100-80g node meets the SLO fleet-wide: P99 <= 10 ms for 99.0% of requests."),
    (f(nodes=None, max_nodes=64, fleet_p99_ms=431.0),
     "No fleet of up to 64 a100-80g nodes meets the SLO (P99 431 ms at 64): the traffic "
     "overloads it; the answer is more capacity (raise --max-nodes) or a looser SLO, not a "
     "different split."),
]  # fmt: skip

# ---- rule 2: the analysed node --------------------------------------------------------------
NODE = [
    (f(node_p99_ms=4.0), None),  # attainment unknown: nothing said
    (f(node_p99_ms=4.0, node_attainment=1.0),
     "One node serves the trace within the SLO (P99 4 ms, 100.0% within 10 ms)."),
    (f(node_p99_ms=40.0, node_attainment=0.8),
     "One node does not serve the trace within the SLO (P99 40 ms, 80.0% within 10 ms): it is "
     "overloaded; plan a fleet (--peak-qps / --scale) rather than a different split."),
    (f(nodes=4, max_nodes=64, node_p99_ms=9.0, node_attainment=0.995),
     "The analysed node, the busiest of the 4, meets the SLO (P99 9 ms, 99.5% within 10 ms)."),
    # P99 within the SLO but attainment short of the target: it misses
    (f(nodes=4, max_nodes=64, node_p99_ms=9.0, node_attainment=0.985),
     "The analysed node, the busiest of the 4, misses the SLO on its own (P99 9 ms, 98.5% "
     "within 10 ms) while the fleet meets it pooled over all its nodes."),
    (f(nodes=1, max_nodes=64, node_p99_ms=9.0, node_attainment=0.995), None),  # rule 1 said it
    (f(nodes=None, max_nodes=8, node_p99_ms=90.0, node_attainment=0.5),
     "The analysed node (one of the 8) misses the SLO (P99 90 ms, 50.0% within 10 ms), as the "
     "fleet does."),
]  # fmt: skip

# ---- rule 3: the split ----------------------------------------------------------------------
SPLIT = [
    (f(), None),  # nothing measured
    (f(fits=True, band=(0.2, 0.7), spread=0.3, scope="the analysed node's traffic"),
     "The whole EMB+KV footprint of the analysed node's traffic fits one pool: a split that "
     "gives each cache its footprint (r in [0.20, 0.70]) serves every hit, and outside it the "
     "caches compete (the whole pool to one cache: +30.0% P99)."),
    # a band off the 0.01 lattice keeps its digits (flat's: two decimals said [0.00, 0.01])
    (f(fits=True, band=(0.0001, 0.015), spread=0.0),
     "The whole EMB+KV footprint of the planned traffic fits one pool: a split that gives each "
     "cache its footprint (r in [0.0001, 0.015]) serves every hit."),
    (f(fits=True, spread=0.01),
     "The whole EMB+KV footprint of the planned traffic fits one pool: a split that gives each "
     "cache its footprint serves every hit."),
    (f(fits=False, spread=0.015),
     "The EMB/KV split hardly matters here: even the whole pool to one cache stays within 2% of "
     "the best static P99 (1.5%)."),
    (f(fits=False, spread=0.02),  # exactly the tolerance: flat
     "The EMB/KV split hardly matters here: even the whole pool to one cache stays within 2% of "
     "the best static P99 (2.0%)."),
    (f(fits=False, spread=0.25),
     "The EMB/KV split matters for the node's P99: the whole pool to one cache costs +25.0% "
     "P99 against the best static split."),
    (f(fits=False, spread=1.429, extremes=(0.003, 1.429), band=(0.3, 1.0)),
     "The EMB/KV split matters for the node's P99: the whole pool to KV costs +142.9% P99 "
     "against the best static split (to EMB: +0.3%); keep r within its flat band [0.30, 1.00]."),
    (f(fits=False, spread=0.4, extremes=(0.4, 0.1)),
     "The EMB/KV split matters for the node's P99: the whole pool to EMB costs +40.0% P99 "
     "against the best static split (to KV: +10.0%)."),
    # the plan already said so (a one-node fleet: the node's traffic is the planned traffic)
    (f(fits=True, fits_said=True, spread=0.3), None),
    # an overloaded fleet gets no split verdict (no split fixes it)
    (f(nodes=None, max_nodes=8, fits=False, spread=0.4), None),
]  # fmt: skip

# ---- rule 4: the split and the fleet size ---------------------------------------------------
FLEET_SPLIT = [
    (f(split_nodes={"best-static": 2, "emb-max": 2}), None),  # kv-max not planned: no claim
    (f(split_nodes={"best-static": 2, "emb-max": 2, "kv-max": 2}),
     "The split does not change the fleet size: best static, emb-max and kv-max all need 2 "
     "nodes."),
    (f(split_nodes={"best-static": 1, "emb-max": 1, "kv-max": 1}),
     "The split does not change the fleet size: best static, emb-max and kv-max all need 1 node."),
    (f(split_nodes={"best-static": 2, "emb-max": 3, "kv-max": None}),
     "The split changes the fleet size: best-static 2, emb-max 3, kv-max none nodes."),
    (f(split_nodes={"best-static": None, "emb-max": None, "kv-max": None}), None),
    # the router they were planned behind is named (another router may need fewer nodes)
    (f(split_nodes={"best-static": 5, "emb-max": 5, "kv-max": 5}, split_router="jsq"),
     "Behind jsq, the split does not change the fleet size: best static, emb-max and kv-max all "
     "need 5 nodes."),
]  # fmt: skip

# ---- rule 5: the recommendation -------------------------------------------------------------
RECOMMEND = [
    (f(ratio=0.4), None),
    (f(ratio=0.4, robust_ratio=0.402), "Deploy r = 0.40 (EMB share of the pool)."),
    (f(ratio=0.02, robust_ratio=0.3, band=(0.02, 0.58)),
     "Deploy r = 0.30, the middle of the flat band (band [0.02, 0.58]): every r in it is within "
     "2% of the best P99; the argmin r = 0.02 sits near its edge."),
    (f(nodes=None, max_nodes=8, ratio=0.4, robust_ratio=0.5), None),
    (f(nodes=2, max_nodes=8, ratio=0.56, robust_ratio=0.7, fleet_ratio=0.5, band=(0.5, 0.9)),
     "Deploy r = 0.70, the middle of the flat band (band [0.50, 0.90]): every r in it is within "
     "2% of the best P99; the argmin r = 0.56 sits near its edge. The fleet was sized with r = "
     "0.50, the first split found to meet the SLO; the node's P99 is lowest across the band."),
    (f(nodes=2, max_nodes=8, ratio=0.7, robust_ratio=0.7, fleet_ratio=0.7),
     "Deploy r = 0.70 (EMB share of the pool)."),
]  # fmt: skip

MOVEMENT = [
    (f(r_star=(0.2, 1.0), median_band=0.45),
     "The per-window optimum r* ranges over [0.20, 1.00] (moves by 0.80); in the median window "
     "any r within a band 0.45 wide is within 2% of the best P99."),
    (f(r_star=(0.3, 0.3)), "The per-window optimum r* ranges over [0.30, 0.30] (moves by 0.00)."),
    (f(r_star=None), None),
]  # fmt: skip

# ---- rule 6: adaptivity ---------------------------------------------------------------------
ADAPT = [
    (f(adapt=(0.12, 0.05, 0.2, 0.95)),
     "Adapting the split per window cuts P99 by 12.0% against the best static split (95% CI "
     "5.0% to 20.0%)."),
    (f(adapt=(-0.08, -0.1, -0.04, 0.95)),
     "Adapting the split per window makes P99 worse by 8.0% (95% CI -10.0% to -4.0%): keep a "
     "static split."),
    (f(adapt=(-0.007, -0.036, 0.012, 0.95)),
     "Adapting the split per window changes P99 by -0.7%, but the 95% CI -3.6% to 1.2% includes "
     "zero: no reliable gain over the best static split."),
    (f(adapt=(0.01, math.nan, math.nan, 0.95)),
     "Adapting the split per window changes P99 by 1.0%, but the no CI includes zero: no "
     "reliable gain over the best static split."),
    (f(adapt=None), None),
]  # fmt: skip

# ---- rule 7: refill mode (the sign of the gap is kept) --------------------------------------
REFILL = [
    (f(refill=(0.303, 0.303)),
     "Refill mode hardly matters here with the oracle schedule: eager (blocking) 0.303 ms, "
     "throttled (background) 0.303 ms."),
    (f(refill=(0.5, 0.4)),
     "Throttled background refill is faster: eager refill costs +25.0% P99 with the oracle "
     "schedule (eager (blocking) 0.5 ms, throttled (background) 0.4 ms)."),
    (f(refill=(0.4, 0.5)),
     "Eager refill is faster here: throttled background refill costs +25.0% P99 with the oracle "
     "schedule (eager (blocking) 0.4 ms, throttled (background) 0.5 ms); blocking the node for a "
     "copy pays when the copy is short."),
    (f(refill=(0.0, 0.5)), None),
]  # fmt: skip

CASES = [(fleet_sentence, *c) for c in FLEET] + [(node_sentence, *c) for c in NODE] + [
    (split_sentence, *c) for c in SPLIT] + [(fleet_split_sentence, *c) for c in FLEET_SPLIT] + [
    (recommend_sentence, *c) for c in RECOMMEND] + [(movement_sentence, *c) for c in MOVEMENT] + [
    (adapt_sentence, *c) for c in ADAPT] + [
    (refill_sentence, *c) for c in REFILL]  # fmt: skip


@pytest.mark.parametrize(("rule", "facts", "want"), CASES)
def test_truth_table(rule, facts, want):
    assert rule(facts) == want


# ---- no two sentences on a page contradict each other ---------------------------------------

FLEETS = [{}, {"nodes": 3, "max_nodes": 64}, {"nodes": 1, "max_nodes": 64},
          {"nodes": None, "max_nodes": 64}]  # fmt: skip
NODES = [{}, {"node_p99_ms": 5.0, "node_attainment": 1.0},
         {"node_p99_ms": 50.0, "node_attainment": 0.5}]  # fmt: skip
SPLITS = [{}, {"fits": True, "spread": 0.3}, {"fits": False, "spread": 0.01},
          {"fits": False, "spread": 0.3}]  # fmt: skip
RECS = [{}, {"ratio": 0.1, "robust_ratio": 0.4, "band": (0.1, 0.7)}]
ADAPTS = [{}, {"adapt": (0.1, 0.05, 0.15, 0.95)}, {"adapt": (-0.1, -0.15, -0.05, 0.95)}]


@pytest.mark.parametrize(
    "parts", list(itertools.product(FLEETS, NODES, SPLITS, RECS, ADAPTS)), ids=str
)
def test_no_sentence_contradicts_another(parts):
    facts = f(**{k: v for p in parts for k, v in p.items()})
    page = verdicts(facts)
    text = " ".join(page)
    overloaded_fleet = facts.max_nodes is not None and facts.nodes is None
    # an overloaded fleet is never also given split advice; a met fleet is never "overloaded"
    if overloaded_fleet:
        assert "split matters" not in text and "Deploy r" not in text
        assert "hardly matters" not in text and "fits one pool" not in text
    if facts.nodes is not None:
        assert "overloaded" not in text and "overloads" not in text
    # the split is one of: fits, flat, matters (never two)
    assert sum(x in text for x in ("fits one pool", "hardly matters here: even",
                                   "split matters")) <= 1  # fmt: skip
    assert not ("cuts P99" in text and "makes P99 worse" in text)
    assert len(page) == len(set(page))
