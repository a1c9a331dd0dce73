"""Retrain the shipped controller: ``scripts/train_controller.sh`` (or ``python scripts/train_controller.py``).

Builds label traces from the default synthetic set (steady, trend, burst and
mixed; two seeds, loads and pools each) plus MovieLens 100K ingested and
re-timed when the real datasets folder exists, trains layer 1 with PPO
(seed 0, one torch thread), validates on the held-out traces, and writes
``helm_plan/controller/default/controller.npz`` and ``card.json``.
Same seed, same weights (tests/controller/test_ppo.py checks a tiny run).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from helm_plan import io
from helm_plan.controller import dataset, training
from helm_plan.controller.ppo import Args
from helm_plan.controller.runtime import save
from helm_plan.datasets import default_dir

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "helm_plan" / "controller" / "default"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timesteps", type=int, default=Args().total_timesteps)
    ap.add_argument(
        "--labels",
        type=Path,
        default=REPO / ".helm-cache" / "controller-labels.npz",
        help="label set cache (rebuilt when absent)",
    )
    ap.add_argument("--no-validate", action="store_true")
    ap.add_argument(
        "--validation-from",
        type=Path,
        default=None,
        help="take the held-out figures from benchmarks/bench_controller.py --json "
        "(same controller) instead of validating again",
    )
    a = ap.parse_args()
    t0 = time.perf_counter()
    cached = a.labels.exists()
    if cached:
        traces = dataset.load(a.labels)
    else:
        named = [(s.name, training.synth_context(s)) for s in training.DEFAULT_SET]
        ds = default_dir(REPO)
        if ds.is_dir():
            named += training.real_trace_contexts(ds, training.REAL_TRAIN)
        traces = training.label_traces(named, progress=lambda i, n: print(f"labelled {i}/{n}"))
        a.labels.parent.mkdir(parents=True, exist_ok=True)
        dataset.save(traces, a.labels)
    t_lab = time.perf_counter() - t0
    args = Args(seed=a.seed, total_timesteps=a.timesteps)
    ctrl, res = training.fit(
        traces, args, progress=lambda i, n: print(f"iteration {i}/{n}") if i % 20 == 0 else None
    )
    print(
        f"labels {t_lab:.0f} s, training {res.seconds:.0f} s, return {res.mean_episode_return:.3f}"
    )
    # labelling the default set takes ~10 min on 2 busy cores; a cached set is only read
    ctrl.card["label_seconds"] = None if cached else round(t_lab, 1)
    if a.validation_from is not None:
        doc = json.loads(a.validation_from.read_text())
        ctrl.card["validation"] = doc["traces"]
        ctrl.card["decision_latency_us"] = doc["latency_us"]
    elif not a.no_validate:
        vals = [
            training.validate(ctrl, training.synth_context(s), s.name, ablation=False).figures
            for s in training.HELD_OUT
        ]
        ctrl.card["validation"] = vals
        for v in vals:
            print({k: (round(x, 4) if isinstance(x, float) else x) for k, x in v.items()})
    save(ctrl, OUT / "controller.npz")
    io.write_json(OUT / "card.json", ctrl.card)
    print(f"wrote {OUT}/controller.npz and card.json")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
