"""Retrain the shipped controller: ``scripts/train_controller.sh`` (or ``python scripts/train_controller.py``).

Builds the training suite (``helm_plan.controller.suite.TRAIN``: synthetic
regimes and the detectability scenario, Amazon ingested and re-timed, three
models, several pools, light and heavy loads, two catalogue scales), labels
every trace with the full oracle (``training.LABEL_ORACLE``: grid, edge
points and Optuna trials), trains layer 1 with PPO (seed 0, one torch
thread), times ``Controller.step`` in a tight loop for the card, and writes
``helm_plan/controller/default/controller.npz`` and ``card.json``. The card
lists the training and held-out traces; ``--validation-from`` copies the
held-out figures of ``benchmarks/bench_controller.py --json`` into it.
Same seed, same weights (tests/controller/test_ppo.py checks a tiny run).
Run it with ``nice -n 10``: labelling takes most of the time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from helm_plan import io
from helm_plan.controller import dataset, suite, training
from helm_plan.controller.ppo import Args
from helm_plan.controller.runtime import Controller, save
from helm_plan.datasets import default_dir

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "helm_plan" / "controller" / "default"


def spec_key(spec: suite.TraceSpec) -> str:
    """A hash of what one trace's labels depend on: its spec, the oracle, the set version."""
    doc = repr((spec, training.LABEL_ORACLE, dataset.SET_VERSION))
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


def suite_key() -> str:
    """A hash of every training trace's key."""
    return hashlib.sha256("".join(spec_key(s) for s in suite.TRAIN).encode()).hexdigest()[:12]


def labelled(cache: Path, ds: Path | None) -> list[dataset.LabelTrace]:
    """The training suite's label traces, each labelled once and cached in ``cache`` (a run that
    stops keeps what it finished)."""
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for i, spec in enumerate(suite.TRAIN):
        path = cache / f"{spec_key(spec)}.npz"
        if not path.exists():
            t0 = time.perf_counter()
            ctx, ncfg = suite.build(spec, ds)
            (tr,) = training.label_traces([(spec.name, ctx, ncfg)])
            dataset.save([tr], path)
            print(f"labelled {i + 1}/{len(suite.TRAIN)} {spec.name}: "
                  f"{ctx.arrays.n_requests} requests, {time.perf_counter() - t0:.0f} s",
                  flush=True)  # fmt: skip
        out += dataset.load(path)
    return out


def card_latency(ctrl: Controller, traces: list[dataset.LabelTrace], reps: int = 50) -> dict:
    """``Controller.step`` in a tight loop over the training windows' observations (µs): the
    card's figure (a run measures its own, see ``ControllerPolicy.stats``)."""
    from helm_plan.controller.env import LabelEnv

    env = LabelEnv(traces, start_ratio=0.5)
    obs = []
    for i in range(len(traces)):
        x, _ = env.reset(seed=i, options={"trace": i})
        for _ in range(traces[i].n_windows - 1):
            obs.append(x.copy())
            x, *_ = env.step(4)
    lat: list[int] = []
    for _ in range(reps):
        ctrl.reset()
        for x in obs:
            ctrl.step(x.copy(), None)
        lat += ctrl.latency_ns
    a = np.array(lat, np.float64) / 1e3
    return {"median": float(np.median(a)), "p99": float(np.percentile(a, 99)), "n": len(a),
            "how": "tight loop over the training windows' observations"}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timesteps", type=int, default=Args().total_timesteps)
    ap.add_argument("--labels", type=Path, default=None,
                    help="folder of the label cache, one .npz per training trace (default "
                         ".helm-cache/controller-labels; a trace is labelled when absent)")  # fmt: skip
    ap.add_argument("--validation-from", type=Path, default=None,
                    help="copy the held-out figures of benchmarks/bench_controller.py --json "
                         "(same controller) into the card")  # fmt: skip
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    cache = a.labels or REPO / ".helm-cache" / "controller-labels"
    ds = default_dir(REPO)
    if not ds.is_dir():
        raise SystemExit(
            f"the public logs are not in {ds}: set HELM_PLAN_DATASETS to their folder "
            "(the shipped controller's training set includes Amazon)"
        )
    t0 = time.perf_counter()
    cached = all((cache / f"{spec_key(s)}.npz").exists() for s in suite.TRAIN)
    traces = labelled(cache, ds)
    t_lab = time.perf_counter() - t0
    args = Args(seed=a.seed, total_timesteps=a.timesteps)
    ctrl, res = training.fit(
        traces, args, progress=lambda i, n: print(f"iteration {i}/{n}") if i % 50 == 0 else None,
        card_extra={"held_out": [s.name for s in suite.HELD_OUT],
                    "label_oracle": {"trials": training.LABEL_ORACLE.trials,
                                     "coarse_step": training.LABEL_ORACLE.coarse_step},
                    "suite_key": suite_key()},
    )  # fmt: skip
    print(f"labels {t_lab:.0f} s, training {res.seconds:.0f} s, "
          f"return {res.mean_episode_return:.3f}")  # fmt: skip
    ctrl.card["label_seconds"] = None if cached else round(t_lab, 1)
    ctrl.card["decision_latency_us"] = card_latency(ctrl, traces)
    if a.validation_from is not None:
        doc = json.loads(a.validation_from.read_text())
        ctrl.card["validation"] = doc["summary"]
    a.out.mkdir(parents=True, exist_ok=True)
    save(ctrl, a.out / "controller.npz")
    io.write_json(a.out / "card.json", ctrl.card)
    print(f"wrote {a.out}/controller.npz and card.json")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
