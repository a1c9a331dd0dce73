"""What a node measures at a window's end, turned into the controller's inputs.

:class:`NodeMeter` owns the node's ghost caches (:class:`~helm_plan.cache.ghost.Ghost`)
and maps a served :class:`~helm_plan.sim.step.WindowResult` (with its
arrival features and, in a cluster, the trace indices the node served) to
the observation vector, the window's measured curves and the ghost's
marginal gains. The closed-loop policies and
:class:`~helm_plan.controller.env.NodeEnv` all measure through it. Inside a
cluster the ghosts see only the node's own requests
(:meth:`~helm_plan.cache.ghost.Ghost.observe_requests`), as its caches do.

Two curves over the ghost's grid of ``r``:

- ``share`` (:func:`~helm_plan.controller.features.saved_share`): the share of
  the window's busy seconds that hits at ``r`` save (mean service: the
  threshold rule's marginal gains);
- ``gain`` (:func:`~helm_plan.controller.features.p99_gain`): the
  **counterfactual P99** of the window at every ``r``, as
  ``log(P99 realised / P99 at r)``, from each request's own ghost hits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helm_plan.cache.ghost import NO_GAINS, Ghost, GhostGains, gains
from helm_plan.controller.dataset import cost_coefficients
from helm_plan.controller.features import observation, p99_gain, saved_share
from helm_plan.sim.config import NodeConfig
from helm_plan.sim.context import NodeContext
from helm_plan.sim.step import WindowResult

GHOST_DELTA = 0.05
"""δ of the ghost marginal gains (share of the pool)."""


def raw_from_window(
    res: WindowResult,
    arrival: dict[str, float],
    ghost: GhostGains | None,
    slo_ms: float,
    h2d_bw_Bps: float,
    slots: int,
    max_seq_len: int,
) -> dict[str, float]:
    """The raw measurements of a served window (the live side of the feature function)."""
    win = res.end_s - res.start_s
    busy = float(res.service_s.sum())
    raw = dict(arrival)
    if ghost is not None:
        raw.update(ghost.as_dict())
    raw.update(
        utilisation=busy / (win * slots),
        busy_s=busy,
        emb_hit_rate=res.emb_hit_rate,
        kv_reuse_rate=res.kv_reuse_rate,
        h2d_util=res.miss_bytes / (h2d_bw_Bps * win),
        p99_slo=res.p99_ms / slo_ms,
        slo_attainment=res.slo_attainment,
        ratio=res.ratio,
        max_seq_len=float(max_seq_len),
    )
    return raw


@dataclass(frozen=True)
class Measured:
    """One window as the controller sees it."""

    x: np.ndarray
    """The observation vector (curve entries still 0: the runtime's curve state fills them)."""
    share: np.ndarray | None
    """Busy share saved at each r (module docstring); None when the window had no requests."""
    gain: np.ndarray | None
    """Counterfactual log P99 gain at each r; None when the window had no requests."""
    gains: GhostGains
    """The ghost's marginal gains at the served ratio (± ``delta``)."""


class NodeMeter:
    """The node's ghost caches and the feature function over its windows."""

    def __init__(self, ctx: NodeContext, cfg: NodeConfig, delta: float = GHOST_DELTA) -> None:
        # the SLO rule (NodeConfig.for_context): None means the model's default_slo_ms
        self.ctx, self.cfg, self.delta = ctx, cfg.for_context(ctx), delta
        self.ghost = Ghost(ctx.workload, ctx.pool_bytes, ctx.model.kv_bytes_per_token)
        self.costs = cost_coefficients(ctx)

    def reset(self) -> None:
        self.ghost.reset()

    def measure(
        self,
        res: WindowResult,
        arrival: dict[str, float],
        served: np.ndarray | None = None,
    ) -> Measured:
        """Observe window ``res`` (``served``: its trace indices when not contiguous)."""
        g, share, gain = NO_GAINS, None, None
        if res.requests:
            idx = served if served is not None else np.arange(res.first, res.first + res.requests)
            c = self.ghost.observe_requests(idx, res.n_computed, per_request=True)
            g = gains(c, res.ratio, self.delta, *self.costs)
            share = saved_share(c.emb_hit_bytes, c.kv_reused_tokens, *self.costs,
                                float(res.service_s.sum()))  # fmt: skip
            assert c.emb_hit_bytes_req is not None and c.kv_reused_tokens_req is not None
            e, k = self.costs
            saved = c.emb_hit_bytes_req * e + c.kv_reused_tokens_req * k
            gain = p99_gain(res.service_s, res.sojourn_s, res.ratio, res.end_s - res.start_s,
                            self.cfg.slots, saved)  # fmt: skip
        raw = raw_from_window(res, arrival, g, self.cfg.slo_ms, self.ctx.latency.h2d_bw_Bps,
                              self.cfg.slots, self.ctx.model.max_seq_len)  # fmt: skip
        return Measured(observation(raw), share, gain, g)
