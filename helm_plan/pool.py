"""The HBM cache pool each GPU splits between EMB and KV.

The one pool rule of every command: a GPU's pool is HBM - weights - reserve
(a property of the GPU and the model), unless ``--pool-bytes`` gives a byte
count or ``--pool-fraction F`` gives F x the EMB+KV footprint of the trace *as
given* (before any scaling). Either is resolved once to bytes and used
unchanged on every GPU, fleet size and section: a planned fleet's GPUs do not
grow with the planned user count. Never beyond the default. Also the derived
sizes of every GPU x model pair that ``helm-plan profiles`` lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from helm_plan.errors import ProfileError
from helm_plan.profiles import (
    GiB,
    GpuProfile,
    ModelProfile,
    available,
    load_gpu,
    load_model,
)


@dataclass(frozen=True)
class Pool:
    """The HBM cache pool shared by EMB and KV on one GPU."""

    pool_bytes: int
    """Bytes split between EMB and KV."""
    source: str
    """How it was sized: hbm, --pool-bytes or --pool-fraction."""


def pool_bytes(gpu: GpuProfile, model: ModelProfile) -> int:
    """Default pool: HBM minus weights minus reserve."""
    return gpu.hbm_bytes - model.weights_bytes - model.reserve_bytes


def resolve_pool(
    gpu: GpuProfile,
    model: ModelProfile,
    *,
    pool_bytes_override: int | None = None,
    pool_fraction: float | None = None,
    footprint_bytes: int | None = None,
) -> Pool:
    """Size the cache pool from HBM, an explicit byte count, or a share of the trace footprint.

    Every pool must fit the GPU: at most HBM - weights - reserve (what
    `helm-plan profiles` lists), so a typo cannot plan a cache the device lacks.
    """
    if pool_bytes_override is not None and pool_fraction is not None:
        raise ProfileError(
            "give --pool-bytes or --pool-fraction, not both", hint="drop one of the two options"
        )
    hbm_pool = pool_bytes(gpu, model)
    if hbm_pool <= 0:
        raise ProfileError(
            f"model {model.name} leaves no cache pool on {gpu.name}: weights+reserve exceed HBM",
            hint="pick a larger GPU (see `helm-plan profiles`) or a smaller model",
        )
    if pool_bytes_override is not None:
        if not pool_bytes_override > 0:
            raise ProfileError(
                f"pool_bytes must be positive, got {pool_bytes_override}",
                hint="pass --pool-bytes > 0",
            )
        pool = Pool(int(pool_bytes_override), "--pool-bytes")
    elif pool_fraction is not None:
        if not 0 < pool_fraction < float("inf"):
            raise ProfileError(
                f"pool_fraction must be positive and finite, got {pool_fraction}",
                hint="pass --pool-fraction > 0 (a share of the trace's EMB+KV footprint)",
            )
        if footprint_bytes is None:
            raise ProfileError(
                "pool_fraction needs the trace footprint",
                hint="size the pool with pool_bytes, or pass footprint_bytes",
            )
        pool = Pool(
            max(1, int(pool_fraction * footprint_bytes)),
            f"--pool-fraction {pool_fraction:g} of the input trace's EMB+KV footprint "
            f"({footprint_bytes / GiB:,.4g} GiB)",
        )
    else:
        return Pool(hbm_pool, f"hbm {gpu.name} - weights - reserve")
    if pool.pool_bytes > hbm_pool:
        raise ProfileError(
            f"the cache pool {pool.pool_bytes:,} B ({pool.pool_bytes / GiB:,.4g} GiB, from "
            f"{pool.source}) exceeds what {gpu.name} leaves for caches with {model.name}: "
            f"{hbm_pool:,} B ({hbm_pool / GiB:,.4g} GiB = HBM - weights - reserve)",
            hint="pass a smaller --pool-bytes / --pool-fraction, or a GPU with more HBM",
        )
    return pool


@dataclass(frozen=True)
class PairSizes:
    """Derived sizes of one GPU x model pair (what `helm-plan profiles` lists)."""

    gpu: str
    """GPU profile name."""
    model: str
    """Model profile name."""
    hbm_bytes: int
    """Device memory of the GPU, bytes."""
    weights_bytes: int
    """Dense weights of the model, bytes."""
    reserve_bytes: int
    """Memory kept out of the pool, bytes."""
    pool_bytes: int
    """Default cache pool: hbm - weights - reserve (<= 0: the model does not fit)."""
    emb_bytes_per_token: int
    """EMB bytes a history token looks up (every table it reads)."""
    kv_bytes_per_token: int
    """Bytes of KV per token."""
    max_user_kv_bytes: int
    """KV of one user at max_seq_len tokens, bytes."""
    pool_emb_tokens: int
    """History tokens whose EMB rows would fill the whole pool."""
    pool_kv_tokens: int
    """KV tokens if the whole pool held KV."""


def pair_sizes(gpus: list[str] | None = None, models: list[str] | None = None) -> list[PairSizes]:
    """Derived sizes for every GPU x model pair (shipped profiles by default)."""
    out = []
    for gname in available("gpu") if gpus is None else gpus:
        g = load_gpu(gname)
        for mname in available("model") if models is None else models:
            m = load_model(mname)
            b = pool_bytes(g, m)
            out.append(
                PairSizes(
                    gpu=g.name,
                    model=m.name,
                    hbm_bytes=g.hbm_bytes,
                    weights_bytes=m.weights_bytes,
                    reserve_bytes=m.reserve_bytes,
                    pool_bytes=b,
                    emb_bytes_per_token=m.token_lookup_bytes,
                    kv_bytes_per_token=m.kv_bytes_per_token,
                    max_user_kv_bytes=m.max_seq_len * m.kv_bytes_per_token,
                    pool_emb_tokens=max(b, 0) // max(m.token_lookup_bytes, 1),
                    pool_kv_tokens=max(b, 0) // m.kv_bytes_per_token,
                )
            )
    return out
