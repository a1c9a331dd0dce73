"""`helm-plan calibrate`: measure the service-time terms with torch microbenchmarks and fit them.

Five microbenchmarks run on the local device (``cpu`` or ``cuda``):

- **prefill**: an HSTU-like stack (SiLU(UVQK projection), pointwise SiLU
  attention without softmax, norm·gate, output projection, residual) on ``n``
  new tokens whose K/V are appended to a preallocated KV cache holding the
  ``c = L − n`` prefix tokens, so the new tokens attend (causally) to all
  ``L`` context tokens. Fitted as ``t_p + a·n + b·n·L``.
- **score**: ``M`` candidates through the same stack, each attending to the
  ``L`` context tokens but not to each other (HSTU target items), then a dot
  product head. Fitted as ``t_s + c·M + d·M·L``.
- **emb_hbm**: ``torch.index_select`` of ``k`` random rows from an embedding
  table in device memory. Fitted as ``t_g + k·row_bytes/hbm_bw``.
- **host_gather**: ``index_select`` of ``k`` random rows from a host DRAM
  table into a staging buffer (pinned on CUDA). Fitted as ``t_hg + k·host_gather_s``.
- **h2d**: copy of the ``k`` staged rows to the device (on CPU: into a
  separate buffer). Fitted as ``t_c + k·row_bytes/h2d_bw``.

Every call is warmed up, then timed ``repeats`` times with the repeats of all
grid points interleaved in seeded random order; the median is kept (with
``torch.cuda.synchronize`` around each call on CUDA).

Then ``t0 = t_p + t_s + t_g`` and ``h2d_latency = t_hg + t_c`` (the fixed cost
of a request's miss path). Every fit is a non-negative least squares on
relative errors (scipy ``nnls``), on a seeded train split; the held-out points
give the MAPE reported per term.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import platform
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helm_plan._version import __version__
from helm_plan.config import require_positive, require_range
from helm_plan.errors import ConfigError
from helm_plan.latency.fit import (
    Samples,
    TermFit,
    coefficients_from_terms,
    fit_terms,
)
from helm_plan.profiles import LatencyProfile, ModelProfile, load_model

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class CalibrateConfig:
    """What to measure, at which sizes, and how."""

    device: str = "cpu"
    """Torch device to measure: cpu, cuda or cuda:N."""
    model: str = "gr-small"
    """Model profile name or path (gives layers, d_model, row width)."""
    gpu: str | None = None
    """GPU label written into the profile; None uses the device name (cpu, or the CUDA device)."""
    layers: int | None = None
    """Override of the model's layer count (to scale the benchmark down); None keeps it."""
    d_model: int | None = None
    """Override of the model's hidden size; None keeps it."""
    head_dim: int = 64
    """Attention head size; heads = max(1, d_model // head_dim)."""
    n_grid: tuple[int, ...] = (16, 64, 256, 512)
    """Computed-token counts n of the prefill grid (points with n > L are skipped)."""
    ctx_grid: tuple[int, ...] = (256, 512, 1024, 2048)
    """Context lengths L of the prefill and score grids, tokens."""
    cand_grid: tuple[int, ...] = (16, 64, 256, 512)
    """Candidate counts M of the score grid."""
    lookup_grid: tuple[int, ...] = (64, 256, 1024, 4096, 16384)
    """Row counts k of the gather and copy benchmarks."""
    table_bytes: int = 256 << 20
    """Size of each embedding table (device and host), bytes; larger than the CPU caches."""
    rotate_bytes: int = 64 << 20
    """Output buffers the gathers and copies rotate through, bytes (bigger than L2, so writes are not cache-hot)."""
    warmup: int = 2
    """Untimed runs before each measurement."""
    repeats: int = 5
    """Timed runs per grid point; the median is kept."""
    threads: int = 0
    """torch CPU threads (torch.set_num_threads); 0 uses every core."""
    dtype: str = "auto"
    """Compute dtype of the block: auto (float32 on cpu, bfloat16 on cuda), float32, bfloat16, float16."""
    holdout_fraction: float = 0.25
    """Share of each term's grid points held out to measure MAPE."""
    seed: int = 0
    """Seed for weights, gathered indices and the train/held-out split."""

    def __post_init__(self) -> None:
        for name in ("n_grid", "ctx_grid", "cand_grid", "lookup_grid"):
            grid = getattr(self, name)
            if len(grid) < 2:
                raise ConfigError(f"{name} needs at least 2 sizes, got {list(grid)}")
            for v in grid:
                require_positive(name, v)
        for name in ("head_dim", "table_bytes", "rotate_bytes", "repeats"):
            require_positive(name, getattr(self, name))
        for name in ("layers", "d_model"):
            v = getattr(self, name)
            if v is not None:
                require_positive(name, v)
        if self.warmup < 0:
            raise ConfigError(f"warmup must be >= 0, got {self.warmup}")
        if self.threads < 0:
            raise ConfigError(f"threads must be >= 0 (0 = all cores), got {self.threads}")
        if self.dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        require_range("holdout_fraction", self.holdout_fraction, 0.0, 0.9)
        if not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ConfigError(
                f"device must be cpu, cuda or cuda:N, got {self.device!r}",
                hint="pass --device cpu or --device cuda",
            )

    @classmethod
    def quick(cls, **overrides: Any) -> CalibrateConfig:
        """A small grid that runs in seconds (smoke tests, --quick)."""
        base: dict[str, Any] = {
            "n_grid": (4, 16, 48),
            "ctx_grid": (64, 128, 256),
            "cand_grid": (4, 16, 48),
            "lookup_grid": (16, 64, 256, 1024, 2048),
            "table_bytes": 16 << 20,
            "rotate_bytes": 16 << 20,
            "warmup": 1,
            "repeats": 3,
        }
        base.update(overrides)
        return cls(**base)


_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class CalibrationResult:
    """A measured latency profile with its fit quality and raw timings."""

    profile: LatencyProfile
    """The fitted profile (source names the device, date and versions)."""
    terms: dict[str, TermFit]
    """Per-term fits, with train and held-out MAPE."""
    samples: Samples
    """The raw timings."""
    device_name: str
    """Human-readable name of the measured device."""
    layers: int
    """Layers of the benchmarked stack."""
    d_model: int
    """Hidden size of the benchmarked stack."""
    config: CalibrateConfig
    """The configuration that produced this result."""
    elapsed_s: float = 0.0
    """Wall time of the measurement, seconds."""
    mape_heldout: dict[str, float] = field(default_factory=dict)
    """Held-out MAPE per term, as fractions."""

    def derivation(self) -> dict[str, Any]:
        """How the numbers were obtained (the ``[derivation]`` table of the TOML)."""
        c = self.config
        d: dict[str, Any] = {
            "method": "torch microbenchmarks, median of repeats; scipy nnls on relative error",
            "device": self.device_name,
            "layers": self.layers,
            "d_model": self.d_model,
            "n_grid": list(c.n_grid),
            "ctx_grid": list(c.ctx_grid),
            "cand_grid": list(c.cand_grid),
            "lookup_grid": list(c.lookup_grid),
            "table_bytes": c.table_bytes,
            "repeats": c.repeats,
            "warmup": c.warmup,
            "threads": _threads(c),
            "seed": c.seed,
            "holdout_fraction": c.holdout_fraction,
            "t0": "intercepts of prefill + score + device gather",
            "h2d_latency": "intercepts of host gather + H2D copy",
        }
        for term, t in self.terms.items():
            d[f"heldout_mape_{term}"] = t.mape_heldout
            for k, v in t.params.items():
                d[f"fit_{k}"] = v
        return d


def _threads(cfg: CalibrateConfig) -> int:
    return cfg.threads or (os.cpu_count() or 1)


def resolve_device(spec: str) -> Any:
    """The torch device for ``spec``; a clear error when CUDA is asked for but absent."""
    import torch

    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        built = torch.version.cuda
        why = "no CUDA device is visible" if built else f"torch {torch.__version__} has no CUDA"
        raise ConfigError(
            f"--device {spec} requested but CUDA is unavailable ({why})",
            hint="use --device cpu, or install a CUDA build of torch on a GPU host",
        )
    dev = torch.device(spec)
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(
            f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) visible"
        )
    return dev


def device_name(dev: Any) -> str:
    """A readable name for a torch device (CPU model or CUDA device name)."""
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return f"CPU {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"CPU {platform.processor() or platform.machine()}"


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-") or "device"


class _Stack:
    """An HSTU-like stack with a preallocated per-layer KV cache."""

    def __init__(
        self, layers: int, d: int, head_dim: int, max_ctx: int, dev: Any, dtype: Any, gen: Any
    ) -> None:
        import torch

        self.layers, self.d = layers, d
        self.h = max(1, d // head_dim)
        if d % self.h:
            raise ConfigError(f"d_model {d} is not a multiple of the {self.h} heads")
        self.dh = d // self.h

        def rnd(*shape: int, scale: float = 1.0) -> Any:
            return (torch.randn(*shape, generator=gen) * scale).to(dev, dtype)

        self.w_uvqk = [rnd(d, 4 * d, scale=d**-0.5) for _ in range(layers)]
        self.w_o = [rnd(d, d, scale=d**-0.5) for _ in range(layers)]
        self.k = [rnd(self.h, max_ctx, self.dh) for _ in range(layers)]
        self.v = [rnd(self.h, max_ctx, self.dh) for _ in range(layers)]
        self.head = rnd(d, scale=d**-0.5)
        self.torch = torch

    def forward(self, x: Any, ctx_len: int, *, append: bool) -> Any:
        """``append``: x are the last n of ctx_len tokens (causal, KV written); else candidates."""
        torch, F = self.torch, self.torch.nn.functional
        n, d, h, dh = x.shape[0], self.d, self.h, self.dh
        c = ctx_len - n if append else ctx_len
        mask = None
        if append:
            pos = torch.arange(c, ctx_len, device=x.device)[:, None]
            mask = torch.arange(ctx_len, device=x.device)[None, :] > pos
        for layer in range(self.layers):
            u, v, q, k = F.silu(x @ self.w_uvqk[layer]).split(d, dim=-1)
            kc, vc = self.k[layer], self.v[layer]
            if append:
                kc[:, c:ctx_len].copy_(k.view(n, h, dh).transpose(0, 1))
                vc[:, c:ctx_len].copy_(v.view(n, h, dh).transpose(0, 1))
            qh = q.view(n, h, dh).transpose(0, 1)
            s = F.silu(torch.matmul(qh, kc[:, :ctx_len].transpose(1, 2))) * (1.0 / ctx_len)
            if mask is not None:
                s = s.masked_fill(mask, 0.0)
            a = torch.matmul(s, vc[:, :ctx_len]).transpose(0, 1).reshape(n, d)
            x = x + (F.layer_norm(a, (d,)) * u) @ self.w_o[layer]
        return x if append else x @ self.head


def _measure(
    fns: list[Callable[[], Any]],
    dev: Any,
    warmup: int,
    repeats: int,
    seed: int,
    tick: Callable[[], None],
) -> np.ndarray:
    """Median wall time of each call, with the repeats interleaved in seeded random order.

    Interleaving spreads a burst of outside load over many grid points
    instead of every repeat of one point, so the medians stay usable on a
    shared machine.
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
            t = time.perf_counter()
            fns[j]()
            sync()
            times[r, j] = time.perf_counter() - t
            tick()
    return np.median(times, axis=0)


def _emb_dtype(torch: Any, nbytes: int) -> Any:
    table = {1: torch.int8, 2: torch.float16, 4: torch.float32, 8: torch.float64}
    if nbytes not in table:
        raise ConfigError(f"emb_dtype_bytes must be 1, 2, 4 or 8, got {nbytes}")
    return table[nbytes]


def calibrate(cfg: CalibrateConfig, progress: Progress | None = None) -> CalibrationResult:
    """Measure the latency terms on ``cfg.device`` and fit a latency profile."""
    import torch

    dev = resolve_device(cfg.device)
    model: ModelProfile = load_model(cfg.model)
    layers = cfg.layers or model.layers
    d = cfg.d_model or model.d_model
    dtype_name = (
        cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if dev.type == "cuda" else "float32")
    )
    dtype = getattr(torch, dtype_name)
    row_bytes = max(t.row_bytes for t in model.tables)
    # the widest table's rows: the gather and copy bandwidths are per byte anyway
    widest = max(model.tables, key=lambda t: t.row_bytes)
    row_elems = widest.dim
    emb_dtype = _emb_dtype(torch, widest.dtype_bytes)
    table_rows = max(cfg.table_bytes // row_bytes, max(cfg.lookup_grid))

    prefill_pts = [(n, L) for L in cfg.ctx_grid for n in cfg.n_grid if n <= L]
    score_pts = [(m, L) for L in cfg.ctx_grid for m in cfg.cand_grid]
    if len(prefill_pts) < 3:
        raise ConfigError(
            "the prefill grid needs at least 3 points with n <= L",
            hint="add smaller n_grid or larger ctx_grid sizes",
        )
    n_pre, n_sc, n_k = len(prefill_pts), len(score_pts), len(cfg.lookup_grid)
    total = cfg.repeats * (n_pre + n_sc + 3 * n_k)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None and (done % 8 == 0 or done == total):
            progress(done, total)

    old_threads = torch.get_num_threads()
    torch.set_num_threads(_threads(cfg))
    t_start = time.perf_counter()
    try:
        with torch.inference_mode():
            gen = torch.Generator().manual_seed(cfg.seed)
            if progress is not None:
                progress(0, total)
            stack = _Stack(layers, d, cfg.head_dim, max(cfg.ctx_grid), dev, dtype, gen)
            fns = _stack_calls(stack, prefill_pts, True, gen) + _stack_calls(
                stack, score_pts, False, gen
            )
            fns += _gather_calls(
                dev, table_rows, row_elems, emb_dtype, cfg.lookup_grid, cfg.rotate_bytes, gen
            )
            med = _measure(fns, dev, cfg.warmup, cfg.repeats, cfg.seed, tick)
            del fns, stack
    finally:
        torch.set_num_threads(old_threads)
    elapsed = time.perf_counter() - t_start
    pre_s, sc_s = med[:n_pre], med[n_pre : n_pre + n_sc]
    g_s, h_s, c_s = (med[n_pre + n_sc + i * n_k : n_pre + n_sc + (i + 1) * n_k] for i in range(3))

    ks = np.asarray(cfg.lookup_grid, np.int64)
    samples = Samples(
        row_bytes=row_bytes,
        prefill_n=np.array([p[0] for p in prefill_pts], np.int64),
        prefill_ctx=np.array([p[1] for p in prefill_pts], np.int64),
        prefill_s=np.array(pre_s),
        score_m=np.array([p[0] for p in score_pts], np.int64),
        score_ctx=np.array([p[1] for p in score_pts], np.int64),
        score_s=np.array(sc_s),
        gather_rows=ks,
        gather_s=np.array(g_s),
        host_rows=ks,
        host_s=np.array(h_s),
        h2d_rows=ks,
        h2d_s=np.array(c_s),
    )
    terms = fit_terms(samples, holdout_fraction=cfg.holdout_fraction, seed=cfg.seed)
    coeffs = coefficients_from_terms(terms, row_bytes)

    dname = device_name(dev)
    gpu_label = cfg.gpu or ("cpu" if dev.type == "cpu" else _slug(dname))
    scaled = layers != model.layers or d != model.d_model
    model_label = f"{model.name}-scaled-l{layers}-d{d}" if scaled else model.name
    date = _dt.datetime.now(_dt.UTC).date().isoformat()
    source = (
        f"measured on {dname} ({dev}, {dtype_name}, {_threads(cfg)} threads), {date}, "
        f"torch {torch.__version__}, helm-plan {__version__}"
    )
    if scaled:
        source += f"; benchmark scaled down from {model.name} to layers={layers}, d_model={d}"
    profile = LatencyProfile(
        name=f"{gpu_label}_{model_label}",
        gpu=gpu_label,
        model=model_label,
        source=source,
        **coeffs,
    )
    return CalibrationResult(
        profile=profile,
        terms=terms,
        samples=samples,
        device_name=dname,
        layers=layers,
        d_model=d,
        config=cfg,
        elapsed_s=elapsed,
        mape_heldout={k: t.mape_heldout for k, t in terms.items()},
    )


def _stack_calls(
    stack: _Stack, points: list[tuple[int, int]], append: bool, gen: Any
) -> list[Callable[[], Any]]:
    """One call of the stack per (tokens, context) point."""
    torch = stack.torch
    dev, dtype = stack.w_o[0].device, stack.w_o[0].dtype
    out: list[Callable[[], Any]] = []
    for n, L in points:
        x = torch.randn(n, stack.d, generator=gen).to(dev, dtype)
        out.append(lambda x=x, L=L: stack.forward(x, L, append=append))
    return out


def _gather_calls(
    dev: Any,
    table_rows: int,
    row_elems: int,
    emb_dtype: Any,
    lookup_grid: tuple[int, ...],
    rotate_bytes: int,
    gen: Any,
) -> list[Callable[[], Any]]:
    """Device gathers, then host gathers, then H2D copies: one call per row count each."""
    import torch

    # Each call writes a different slice of buffers larger than the L2 cache,
    # as a server writes fresh buffers per request; otherwise small gathers
    # would run from cache and bend the per-row cost.
    buf_rows = max(max(lookup_grid), rotate_bytes // (row_elems * emb_dtype.itemsize))
    dev_table = torch.randn(table_rows, row_elems, generator=gen).to(dev, emb_dtype)
    host_table = torch.randn(table_rows, row_elems, generator=gen).to(emb_dtype)
    pin = dev.type == "cuda"
    staging = torch.empty(buf_rows, row_elems, dtype=emb_dtype, pin_memory=pin)
    dev_out = torch.empty(buf_rows, row_elems, dtype=emb_dtype, device=dev)
    dev_buf = torch.empty(buf_rows, row_elems, dtype=emb_dtype, device=dev)
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
            return dev_buf[sl].copy_(staging[sl], non_blocking=pin)

        copies.append(copy)
    return gathers + hosts + copies


def synthetic_samples(
    coeffs: dict[str, float],
    *,
    row_bytes: int,
    intercepts: dict[str, float] | None = None,
    noise: float = 0.01,
    seed: int = 0,
    cfg: CalibrateConfig | None = None,
) -> Samples:
    """Timings generated from known coefficients with multiplicative noise (for testing the fit).

    ``intercepts`` gives ``t_prefill_s``, ``t_score_s``, ``t_gather_s``,
    ``t_host_s`` and ``t_copy_s``; missing ones are 0.
    """
    c = cfg or CalibrateConfig()
    ic = {
        "t_prefill_s": 0.0,
        "t_score_s": 0.0,
        "t_gather_s": 0.0,
        "t_host_s": 0.0,
        "t_copy_s": 0.0,
        **(intercepts or {}),
    }
    rng = np.random.default_rng(seed)

    def noisy(x: np.ndarray) -> np.ndarray:
        return x * (1.0 + noise * rng.standard_normal(len(x)))

    pre = np.array([(n, L) for L in c.ctx_grid for n in c.n_grid if n <= L], np.float64)
    sc = np.array([(m, L) for L in c.ctx_grid for m in c.cand_grid], np.float64)
    k = np.asarray(c.lookup_grid, np.float64)
    return Samples(
        row_bytes=row_bytes,
        prefill_n=pre[:, 0].astype(np.int64),
        prefill_ctx=pre[:, 1].astype(np.int64),
        prefill_s=noisy(
            ic["t_prefill_s"]
            + coeffs["prefill_a_s"] * pre[:, 0]
            + coeffs["prefill_b_s"] * pre[:, 0] * pre[:, 1]
        ),
        score_m=sc[:, 0].astype(np.int64),
        score_ctx=sc[:, 1].astype(np.int64),
        score_s=noisy(
            ic["t_score_s"]
            + coeffs["score_c_s"] * sc[:, 0]
            + coeffs["score_d_s"] * sc[:, 0] * sc[:, 1]
        ),
        gather_rows=k.astype(np.int64),
        gather_s=noisy(ic["t_gather_s"] + k * row_bytes / coeffs["hbm_bw_Bps"]),
        host_rows=k.astype(np.int64),
        host_s=noisy(ic["t_host_s"] + k * coeffs["host_gather_s"]),
        h2d_rows=k.astype(np.int64),
        h2d_s=noisy(ic["t_copy_s"] + k * row_bytes / coeffs["h2d_bw_Bps"]),
    )
