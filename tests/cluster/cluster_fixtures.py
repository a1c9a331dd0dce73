"""Small models, a coefficient latency model and contexts shared by the cluster tests."""

from __future__ import annotations

import dataclasses

from helm_plan import arrays as A
from helm_plan.latency.kernel import COEFFS
from helm_plan.latency.model import LatencyModel
from helm_plan.profiles import EmbTable, load_gpu, load_model
from helm_plan.sim import prepare_context

GPU = load_gpu("a100-80g")


C = {
    "t_launch_s": 2e-4, "t_request_s": 3e-5, "weight_read_s": 4e-4, "dense_s_per_token": 2e-7,
    "mfu_half_tokens": 64.0, "attn_s_per_pair": 3e-10, "hbm_bw_Bps": 2e12, "h2d_bw_Bps": 2e9,
    "h2d_latency_s": 1e-5, "host_gather_Bps": 5e9,
}  # fmt: skip
"""Every term of the batch formula non-zero (as in the node tests)."""
LAT = LatencyModel(**C)


def coeff_latency(**terms: float) -> LatencyModel:
    """A latency model with only the given terms; bandwidths not given are 1e30 B/s (free)."""
    c = dict.fromkeys(COEFFS, 0.0)
    for k in ("hbm_bw_Bps", "h2d_bw_Bps", "host_gather_Bps"):
        c[k] = 1e30
    c.update(terms)
    return LatencyModel(**c)


def small_model(chunk: int = 4, multi: bool = True, **kw):
    """gr-small with tiny tables and contexts (three tables: identity + two hashed)."""
    base = load_model("gr-small")
    tables = (
        EmbTable("item", dim=64, dtype_bytes=4),
        EmbTable("cat", dim=32, dtype_bytes=4, rows=50, key="hash"),
        EmbTable("seller", dim=16, dtype_bytes=4, rows=300, key="hash", per_candidate=0),
    )
    return dataclasses.replace(
        base,
        tables=tables if multi else tables[:1],
        kv_slide_chunk=chunk,
        **{"max_seq_len": 24, **kw},
    )


def context(table, model, pool_bytes, latency=LAT, seed: int = 0):
    return prepare_context(
        A.from_table(table, seed=seed), GPU, model, latency, pool_bytes=pool_bytes
    )
