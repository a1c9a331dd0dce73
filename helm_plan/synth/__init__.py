"""Synthetic canonical traces (``helm-plan synth``): regimes, users, items, ``--like`` fits.

- :class:`SynthConfig` (:mod:`.config`): the generator's options;
- :func:`synthesize` / :func:`iter_chunks` (:mod:`.core`): the vectorised
  generator, streamed segment by segment;
- :mod:`.users`: arrivals, cold users and revisits per segment;
- :func:`write`, :func:`fit`, :func:`like_config` (:mod:`.like`): the parquet
  writer and the fit of a real trace's statistics for ``--like``.
"""

from __future__ import annotations

from helm_plan.synth.config import MAX_ITEMS, ROW_GROUP_ROWS, SynthConfig
from helm_plan.synth.core import Plan, iter_chunks, plan, synthesize, zipf_ranks
from helm_plan.synth.like import LikeFit, SynthResult, fit, like_config, provenance, write

__all__ = [
    "MAX_ITEMS",
    "ROW_GROUP_ROWS",
    "LikeFit",
    "Plan",
    "SynthConfig",
    "SynthResult",
    "fit",
    "iter_chunks",
    "like_config",
    "plan",
    "provenance",
    "synthesize",
    "write",
    "zipf_ranks",
]
