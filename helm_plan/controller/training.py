"""Training behind ``helm-plan train`` and ``scripts/train_controller.sh``.

- :func:`label_traces`: label every context with the full oracle (coarse grid, edge
  points and Optuna trials) and gather its :class:`~helm_plan.controller.dataset.LabelTrace`;
- :func:`fit`: label traces -> a :class:`Controller` with its card (what it was trained on,
  seeds, versions); the suite it is trained and validated on is :mod:`helm_plan.controller.suite`,
  the validation :mod:`helm_plan.controller.validation`.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from helm_plan._version import __version__
from helm_plan.controller import dataset
from helm_plan.controller.env import SHIFTS
from helm_plan.controller.features import FEATURE_VERSION
from helm_plan.controller.runtime import Controller, RuntimeConfig
from helm_plan.oracle import OracleConfig
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext

WINDOW_S = 10.0
"""Window of training and validation (the suite's)."""
LABEL_ORACLE = OracleConfig(trials=8)
"""The training labels' oracle: the coarse grid and edge points plus 8 Optuna trials per
window on the 0.01 lattice (the full search; 8 rather than the default 20 keeps the suite's
labelling inside the training budget on two shared cores)."""
DEFAULT_NODE = NodeConfig(window_s=WINDOW_S)
"""Node config of training and validation (SLO: each trace's model's ``default_slo_ms``)."""


def label_traces(
    named: list[tuple[str, NodeContext, NodeConfig]],
    ocfg: OracleConfig = LABEL_ORACLE,
    progress: Callable[[int, int], None] | None = None,
) -> list[dataset.LabelTrace]:
    """Label every (name, context, node config) in order."""
    out = []
    for i, (name, ctx, ncfg) in enumerate(named):
        out.append(dataset.build(ctx, ncfg, ocfg, name))
        if progress:
            progress(i + 1, len(named))
    return out


def fit(
    traces: list[dataset.LabelTrace],
    args: Any = None,  # noqa: ANN401 - a ppo.Args (imported lazily: torch)
    progress: Callable[[int, int], None] | None = None,
    card_extra: dict[str, Any] | None = None,
) -> tuple[Controller, Any]:
    """Train layer 1 on ``traces`` and wrap it with the default online layers and a card."""
    from helm_plan.controller import ppo

    args = args or ppo.Args()
    res = ppo.train(traces, args, progress)
    import torch

    card = {
        "feature_version": FEATURE_VERSION,
        "helm_plan": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "seed": args.seed,
        "ppo": {k: v for k, v in asdict(args).items()},
        "training_set": [t.name for t in traces],
        "training_windows": int(sum(t.n_windows for t in traces)),
        "train_seconds": round(res.seconds, 1),
        "mean_episode_return": res.mean_episode_return,
        "runtime": asdict(RuntimeConfig()),
    }
    card.update(card_extra or {})
    return Controller(res.weights, np.array(SHIFTS), card=card), res
