"""The torch microbenchmarks behind ``calibrate``: the serving stack, GEMVs, gathers and copies.

Each builder returns zero-argument callables; :func:`measure` times them
(with ``torch.cuda.synchronize`` after every call on CUDA, so ``perf_counter``
sees the GPU work and the launches) and keeps the fastest repeat. Torch is imported
lazily by the callers: importing this module does not import it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from helm_plan.errors import ConfigError
from helm_plan.latency.samples import StackPoint


def measure(
    fns: list[Callable[[], Any]],
    dev: Any,
    warmup: int,
    repeats: int,
    seed: int,
    tick: Callable[[], None],
) -> np.ndarray:
    """Fastest wall time of each call, with the repeats interleaved in seeded random order.

    Outside load (other processes, a descheduled thread) only ever adds
    time, so the fastest repeat is the best estimate of the call's own cost
    (the argument of Python's ``timeit``); interleaving spreads a burst of
    load over many points instead of every repeat of one.
    """
    import torch

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for fn in fns:
        for _ in range(warmup):
            fn()
    sync()
    rng = np.random.default_rng([seed, 7])
    times = np.empty((repeats, len(fns)))
    for r in range(repeats):
        for j in rng.permutation(len(fns)):
            sync()
            t = time.perf_counter()
            fns[j]()
            sync()
            times[r, j] = time.perf_counter() - t
            tick()
    return times.min(axis=0)


class Stack:
    """An HSTU-like stack serving batches of identical requests, with per-layer KV storage.

    One call assembles ``B`` per-request inputs into the batch buffer (one copy
    per request: the per-request overhead), runs every layer (SiLU(UVQK
    projection), pointwise SiLU attention without softmax over a masked
    ``(n + M) × L`` rectangle, norm·gate, output projection, residual), scores
    the candidates with a dot-product head and slices each request's scores.
    """

    def __init__(
        self, layers: int, d: int, head_dim: int, max_tokens: int, max_kv: int,
        dev: Any, dtype: Any, gen: Any,
    ) -> None:  # fmt: skip
        import torch

        self.torch, self.layers, self.d = torch, layers, d
        self.h = max(1, d // head_dim)
        if d % self.h:
            raise ConfigError(
                f"d_model {d} is not a multiple of the {self.h} heads",
                hint="pass --d-model divisible by the head count",
            )
        self.dh = d // self.h

        def rnd(*shape: int, scale: float = 1.0) -> Any:
            return (torch.randn(*shape, generator=gen) * scale).to(dev, dtype)

        self.w_uvqk = [rnd(d, 4 * d, scale=d**-0.5) for _ in range(layers)]
        self.w_o = [rnd(d, d, scale=d**-0.5) for _ in range(layers)]
        self.head = rnd(d, 1, scale=d**-0.5)
        # Flat KV storage viewed as [B, heads, L, head_dim] per point: sized by the largest B·L.
        self.k = [torch.zeros(max_kv * d, device=dev, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(max_kv * d, device=dev, dtype=dtype) for _ in range(layers)]
        self.buf = torch.zeros(max_tokens * d, device=dev, dtype=dtype)

    def call(self, point: StackPoint, gen: Any) -> Callable[[], Any]:
        """A zero-argument call serving one batch of the point's ``B`` identical requests."""
        torch, F = self.torch, self.torch.nn.functional
        B, n, L, M = point
        T, d, h, dh = n + M, self.d, self.h, self.dh
        dev, dtype = self.buf.device, self.buf.dtype
        reqs = [torch.randn(T, d, generator=gen).to(dev, dtype) for _ in range(B)]
        # New token j sits at position L − n + j and sees keys up to it; candidates see all L.
        rows = torch.arange(T)[:, None]
        keys = torch.arange(L)[None, :]
        mask = ((rows < n) & (keys > L - n + rows)).to(dev)
        scale = 1.0 / L

        def run() -> list[Any]:
            x = self.buf[: B * T * d].view(B, T, d)
            for i, r in enumerate(reqs):
                x[i].copy_(r)
            for layer in range(self.layers):
                u, v, q, k = F.silu(x @ self.w_uvqk[layer]).split(d, dim=-1)
                kc = self.k[layer][: B * L * d].view(B, h, L, dh)
                vc = self.v[layer][: B * L * d].view(B, h, L, dh)
                kc[:, :, L - n :].copy_(k[:, :n].reshape(B, n, h, dh).transpose(1, 2))
                vc[:, :, L - n :].copy_(v[:, :n].reshape(B, n, h, dh).transpose(1, 2))
                qh = q.reshape(B, T, h, dh).transpose(1, 2)
                s = F.silu(qh @ kc.transpose(-1, -2)) * scale
                s = s.masked_fill(mask, 0.0)
                a = (s @ vc).transpose(1, 2).reshape(B, T, d)
                x = x + (F.layer_norm(a, (d,)) * u) @ self.w_o[layer]
            scores = (x[:, n:] @ self.head).squeeze(-1)
            return [scores[i] for i in range(B)]

        return run


def weight_read_calls(
    layers: int, d: int, grid: tuple[int, ...], dev: Any, dtype: Any, gen: Any
) -> list[Callable[[], Any]]:
    """One-token GEMVs through ``k`` distinct copies of the dense weights, ``k`` in ``grid``.

    A one-token projection reads its whole weight matrix for 2 FLOPs per
    weight: memory bound, so the time per copy is the weight read.
    Distinct copies keep a copy read once per call from being cache-hot.
    """
    import torch

    sets = [
        [(torch.randn(d, 4 * d, generator=gen).to(dev, dtype),
          torch.randn(d, d, generator=gen).to(dev, dtype)) for _ in range(layers)]
        for _ in range(max(grid))
    ]  # fmt: skip
    x = torch.randn(1, d, generator=gen).to(dev, dtype)

    def read(k: int) -> Any:
        out = None
        for s in sets[:k]:
            for w1, w2 in s:
                out = (x @ w1, x @ w2)
        return out

    return [lambda k=k: read(k) for k in grid]


def emb_dtype(nbytes: int) -> Any:
    """The torch dtype of an embedding element of ``nbytes`` bytes."""
    import torch

    table = {1: torch.int8, 2: torch.float16, 4: torch.float32, 8: torch.float64}
    if nbytes not in table:
        raise ConfigError(
            f"table dtype_bytes must be 1, 2, 4 or 8, got {nbytes}",
            hint="use a table dtype of 1, 2, 4 or 8 bytes",
        )
    return table[nbytes]


def gather_calls(
    dev: Any,
    table_rows: int,
    row_elems: int,
    dtype: Any,
    lookup_grid: tuple[int, ...],
    rotate_bytes: int,
    gen: Any,
) -> list[Callable[[], Any]]:
    """Device gathers, then host gathers, then H2D copies: one call per row count each."""
    import torch

    # Each call writes a different slice of buffers larger than the L2 cache,
    # as a server writes fresh buffers per batch; otherwise small gathers
    # would run from cache and bend the per-byte cost.
    buf_rows = max(max(lookup_grid), rotate_bytes // (row_elems * dtype.itemsize))
    dev_table = torch.randn(table_rows, row_elems, generator=gen).to(dev, dtype)
    host_table = torch.randn(table_rows, row_elems, generator=gen).to(dtype)
    pin = dev.type == "cuda"
    staging = torch.empty(buf_rows, row_elems, dtype=dtype, pin_memory=pin)
    dev_out = torch.empty(buf_rows, row_elems, dtype=dtype, device=dev)
    dev_buf = torch.empty(buf_rows, row_elems, dtype=dtype, device=dev)
    for b in (staging, dev_out, dev_buf):
        b.fill_(1)  # touch every page now, not inside the timed calls
    gathers, hosts, copies = [], [], []
    for k in lookup_grid:
        idx = torch.randint(0, table_rows, (k,), generator=gen)
        idx_dev = idx.to(dev)
        turn = itertools.count()

        def part(k: int = k, turn: Any = turn) -> slice:
            j = next(turn) % (buf_rows // k)
            return slice(j * k, (j + 1) * k)

        gathers.append(
            lambda i=idx_dev, p=part: torch.index_select(dev_table, 0, i, out=dev_out[p()])
        )
        hosts.append(lambda i=idx, p=part: torch.index_select(host_table, 0, i, out=staging[p()]))

        def copy(p: Callable[[], slice] = part) -> Any:
            sl = p()
            # Pinned source + non_blocking: the DMA path a server uses; measure() synchronizes.
            return dev_buf[sl].copy_(staging[sl], non_blocking=pin)

        copies.append(copy)
    return gathers + hosts + copies
