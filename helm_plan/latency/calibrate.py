"""`helm-plan calibrate`: measure every term of the batch latency model with torch and fit it.

Microbenchmarks on the local device (``cpu`` or ``cuda``; bf16 on CUDA),
each fitted as described in :mod:`helm_plan.latency.fit`:

- **launch**: batches of ``k`` one-token requests through a copy of the
  stack at width 16 (every kernel launched, almost no arithmetic): launch
  overhead and per-request overhead;
- **weight_read**: one-token GEMVs through ``k`` copies of the dense weights;
- **compute**: the real stack on batches of identical requests over a grid
  of tokens, context lengths, candidates and batch sizes (dense time per
  token and its efficiency half-point, attention time per pair);
- **emb_hbm**: ``index_select`` of rows from a device table;
- **host_gather**: ``index_select`` of rows from a host table into a staging
  buffer (pinned on CUDA) with ``--threads`` torch threads;
- **h2d**: pinned, ``non_blocking`` copies of the staged rows to the device.

Every call is warmed up, then timed ``repeats`` times with the repeats of all
points interleaved in seeded random order; the fastest is kept (outside load
only adds time). On CUDA each
call ends with ``torch.cuda.synchronize`` before the clock is read.
"""

from __future__ import annotations

import datetime as _dt
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
from helm_plan.latency import bench
from helm_plan.latency.fit import TermFit, coefficients_from_terms, fit_terms
from helm_plan.latency.samples import Samples, point_sums, stack_points
from helm_plan.profiles import LatencyProfile, ModelProfile, load_model

Progress = Callable[[int, int], None]
TINY_D = 16
"""Width of the launch benchmark's stack: every kernel runs, on almost no data."""
_DTYPES = ("auto", "float32", "bfloat16", "float16")
_GRIDS = ("tiny_batch_grid", "weight_sets_grid", "token_grid", "n_grid", "ctx_grid",
          "cand_grid", "lookup_grid")  # fmt: skip


@dataclass(frozen=True)
class CalibrateConfig:
    """What to measure, at which sizes, and how."""

    device: str = "cpu"
    """Torch device to measure: cpu, cuda or cuda:N."""
    model: str = "gr-small"
    """Model profile name or path (gives layers, d_model, table rows)."""
    gpu: str | None = None
    """GPU label written into the profile; None uses the device name (cpu, or the CUDA device)."""
    layers: int | None = None
    """Override of the model's layer count (to scale the benchmark down); None keeps it."""
    d_model: int | None = None
    """Override of the model's hidden size; None keeps it."""
    head_dim: int = 64
    """Attention head size; heads = max(1, d_model // head_dim)."""
    tiny_batch_grid: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    """Requests per batch of the launch benchmark."""
    weight_sets_grid: tuple[int, ...] = (1, 2, 3, 4)
    """Copies of the dense weights read per weight-read call."""
    token_grid: tuple[int, ...] = (64, 256, 1024, 4096, 8192)
    """Tokens X of the dense points (one request, one-token context)."""
    n_grid: tuple[int, ...] = (16, 64, 256, 512)
    """Computed-token counts n of the prefill points (points with n > L are skipped)."""
    ctx_grid: tuple[int, ...] = (256, 512, 1024, 2048)
    """Context lengths L of the prefill and scoring points, tokens."""
    cand_grid: tuple[int, ...] = (16, 64, 256, 512)
    """Candidate counts M of the scoring points."""
    batch_grid: tuple[int, ...] = (2, 4, 8, 16)
    """Batch sizes B of the batched points (identical mid-grid requests)."""
    lookup_grid: tuple[int, ...] = (64, 256, 1024, 4096, 16384)
    """Row counts of the gather and copy benchmarks."""
    table_bytes: int = 256 << 20
    """Size of each embedding table (device and host), bytes; larger than the CPU caches."""
    rotate_bytes: int = 64 << 20
    """Output buffers the gathers and copies rotate through, bytes (bigger than L2)."""
    warmup: int = 2
    """Untimed runs before each measurement."""
    repeats: int = 5
    """Timed runs per point; the fastest is kept."""
    threads: int = 0
    """torch CPU threads (torch.set_num_threads), also the host-gather threads; 0 = every core."""
    dtype: str = "auto"
    """Compute dtype of the stack: auto (float32 on cpu, bfloat16 on cuda), float32, bfloat16, float16."""
    holdout_fraction: float = 0.25
    """Share of each term's points held out to measure MAPE."""
    seed: int = 0
    """Seed for weights, inputs, gathered indices and the train/held-out split."""

    def __post_init__(self) -> None:
        for name in _GRIDS:
            grid = getattr(self, name)
            if len(grid) < 2:
                raise ConfigError(
                    f"{name} needs at least 2 sizes, got {list(grid)}",
                    hint="give the grid at least two sizes",
                )
            for v in grid:
                require_positive(name, v)
        for v in self.batch_grid:
            require_positive("batch_grid", v)
        if min(self.token_grid) < 2:
            raise ConfigError(
                f"token_grid sizes must be >= 2, got {list(self.token_grid)}",
                hint="give token_grid sizes >= 2",
            )
        for name in ("head_dim", "table_bytes", "rotate_bytes", "repeats"):
            require_positive(name, getattr(self, name))
        for name in ("layers", "d_model"):
            v = getattr(self, name)
            if v is not None:
                require_positive(name, v)
        if self.warmup < 0:
            raise ConfigError(f"warmup must be >= 0, got {self.warmup}", hint="set warmup >= 0")
        if self.threads < 0:
            raise ConfigError(
                f"threads must be >= 0 (0 = all cores), got {self.threads}",
                hint="pass --threads 0 (all cores) or more",
            )
        if self.dtype not in _DTYPES:
            raise ConfigError(
                f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}",
                hint="pass one of the listed dtypes",
            )
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
            "tiny_batch_grid": (1, 2, 4, 8, 16),
            "weight_sets_grid": (1, 2, 3),
            "token_grid": (16, 64, 256, 512),
            "n_grid": (4, 16, 64),
            "ctx_grid": (64, 128, 256),
            "cand_grid": (16, 64),
            "batch_grid": (2, 4),
            "lookup_grid": (16, 64, 256, 1024, 2048),
            "table_bytes": 16 << 20,
            "rotate_bytes": 16 << 20,
            "warmup": 1,
            "repeats": 5,
        }
        base.update(overrides)
        return cls(**base)

    def points(self) -> list[tuple[int, int, int, int]]:
        """The stack benchmark's (B, n, L, M) points."""
        return stack_points(self.token_grid, self.n_grid, self.ctx_grid, self.cand_grid,
                            self.batch_grid)  # fmt: skip


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
            "method": "torch microbenchmarks, fastest of repeats; scipy nnls on relative error",
            "device": self.device_name,
            "layers": self.layers,
            "d_model": self.d_model,
            **{g: list(getattr(c, g)) for g in (*_GRIDS, "batch_grid")},
            "table_bytes": c.table_bytes,
            "repeats": c.repeats,
            "warmup": c.warmup,
            "threads": threads_of(c),
            "seed": c.seed,
            "holdout_fraction": c.holdout_fraction,
            "t_launch": f"intercept of the launch benchmark (stack at width {TINY_D})",
            "t_request": "slope of the launch benchmark per request in the batch",
            "weight_read": "slope of one-token GEMV time per copy of the dense weights",
            "dense_mfu": "stack time minus launch and requests = dense_s_per_token*(X+h) + "
            "attn_s_per_pair*pairs above the weight floor; pairs = B*(n+M)*L as computed "
            "by the benchmark's masked attention",
            "bandwidths": "1 / slope of time per byte (device gather, host gather, H2D copy)",
            "h2d_latency": "intercept of the H2D copy",
        }
        for term, t in self.terms.items():
            d[f"heldout_mape_{term}"] = t.mape_heldout
            for k, v in t.params.items():
                d[f"fit_{k}"] = v
        return d


def threads_of(cfg: CalibrateConfig) -> int:
    """torch threads the run uses (``cfg.threads``, or every core)."""
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
            f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) visible",
            hint="pick an index below the device count, or --device cuda",
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


def _measure_all(
    cfg: CalibrateConfig, dev: Any, dtype: Any, layers: int, d: int, model: ModelProfile,
    progress: Progress | None,
) -> tuple[Samples, int]:  # fmt: skip
    """Run every benchmark; the timings and the row bytes of the gathered table."""
    import torch

    points = cfg.points()
    tiny_pts = [(k, 1, 1, 0) for k in cfg.tiny_batch_grid]
    widest = max(model.tables, key=lambda t: t.row_bytes)
    row_bytes = widest.row_bytes  # the bandwidths are per byte; the widest rows need fewest calls
    table_rows = max(cfg.table_bytes // row_bytes, max(cfg.lookup_grid))
    sizes = (len(tiny_pts), len(cfg.weight_sets_grid), len(points), 3 * len(cfg.lookup_grid))
    total, done = cfg.repeats * sum(sizes), 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None and (done % 8 == 0 or done == total):
            progress(done, total)

    if progress is not None:
        progress(0, total)
    gen = torch.Generator().manual_seed(cfg.seed)
    max_tokens = max(b * (n + m) for b, n, _, m in points + tiny_pts)
    max_kv = max(b * L for b, _, L, _ in points + tiny_pts)
    tiny = bench.Stack(layers, TINY_D, TINY_D, max_tokens, max_kv, dev, dtype, gen)
    fns = [tiny.call(p, gen) for p in tiny_pts]
    fns += bench.weight_read_calls(layers, d, cfg.weight_sets_grid, dev, dtype, gen)
    stack = bench.Stack(layers, d, cfg.head_dim, max_tokens, max_kv, dev, dtype, gen)
    fns += [stack.call(p, gen) for p in points]
    fns += bench.gather_calls(dev, table_rows, widest.dim, bench.emb_dtype(widest.dtype_bytes),
                              cfg.lookup_grid, cfg.rotate_bytes, gen)  # fmt: skip
    med = bench.measure(fns, dev, cfg.warmup, cfg.repeats, cfg.seed, tick)
    parts = np.split(med, np.cumsum(sizes)[:-1])
    g_s, h_s, c_s = np.split(parts[3], 3)
    B, X, P = point_sums(points)
    nbytes = np.asarray(cfg.lookup_grid, np.float64) * row_bytes
    samples = Samples(
        tiny_batch=np.asarray(cfg.tiny_batch_grid, np.float64), tiny_s=parts[0],
        weight_sets=np.asarray(cfg.weight_sets_grid, np.float64), weight_s=parts[1],
        stack_batch=B, stack_tokens=X, stack_pairs=P, stack_s=parts[2],
        gather_bytes=nbytes, gather_s=g_s, host_bytes=nbytes, host_s=h_s,
        h2d_bytes=nbytes, h2d_s=c_s,
    )  # fmt: skip
    return samples, row_bytes


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
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads_of(cfg))
    t_start = time.perf_counter()
    try:
        with torch.inference_mode():
            samples, _ = _measure_all(cfg, dev, getattr(torch, dtype_name), layers, d, model,
                                      progress)  # fmt: skip
    finally:
        torch.set_num_threads(old_threads)
    elapsed = time.perf_counter() - t_start
    terms = fit_terms(samples, holdout_fraction=cfg.holdout_fraction, seed=cfg.seed)
    coeffs = coefficients_from_terms(terms)

    dname = device_name(dev)
    gpu_label = cfg.gpu or ("cpu" if dev.type == "cpu" else _slug(dname))
    scaled = layers != model.layers or d != model.d_model
    model_label = f"{model.name}-scaled-l{layers}-d{d}" if scaled else model.name
    date = _dt.datetime.now(_dt.UTC).date().isoformat()
    source = (
        f"measured on {dname} ({dev}, {dtype_name}, {threads_of(cfg)} threads), {date}, "
        f"torch {torch.__version__}, helm-plan {__version__}"
    )
    if scaled:
        source += f"; benchmark scaled down from {model.name} to layers={layers}, d_model={d}"
    profile = LatencyProfile(
        name=f"{gpu_label}_{model_label}", gpu=gpu_label, model=model_label, source=source,
        **coeffs,
    )  # fmt: skip
    return CalibrationResult(
        profile=profile, terms=terms, samples=samples, device_name=dname, layers=layers,
        d_model=d, config=cfg, elapsed_s=elapsed,
        mape_heldout={k: t.mape_heldout for k, t in terms.items()},
    )  # fmt: skip
