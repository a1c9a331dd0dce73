"""GPU, model and latency profiles: TOML files with units in their key names.

A profile is named by a shipped file (``a100-80g``) or a path to the user's
own TOML file. Every field is validated with a precise error.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from helm_plan._data import data_dir
from helm_plan.errors import ProfileError

T = TypeVar("T")
GiB = 1 << 30
HOST_KEYS = ("sm_count", "host_dram_Bps", "gpus_per_host", "host_source")
"""GPU profile keys the roofline derivation needs beyond the datasheet (no GPU gets a default)."""
_HOST = {
    "group": "host",
    "hint": "add sm_count, host_dram_Bps, gpus_per_host and host_source as in "
    "profiles/gpu/a100-80g.toml (the SM count from the GPU whitepaper, the host's peak DRAM "
    "bandwidth and GPUs per host from its server's spec)",
}
DEFAULT_GPU = "a100-80g"
"""GPU profile every command uses when none is given."""
DEFAULT_MODEL = "gr-small"
"""Model profile every command uses when none is given."""


@dataclass(frozen=True)
class GpuProfile:
    """One accelerator: memory, bandwidths, compute and price."""

    name: str
    """Profile name."""
    hbm_bytes: int
    """Device memory capacity in bytes."""
    hbm_bw_Bps: float
    """Device memory bandwidth, bytes per second."""
    h2d_bw_Bps: float
    """Effective host-to-device copy bandwidth (PCIe), bytes per second."""
    h2d_latency_s: float
    """Fixed latency of one host-to-device copy, seconds."""
    peak_flops: float
    """Dense bf16 peak, FLOP per second."""
    cost_per_hour: float
    """On-demand price of one GPU, USD per hour."""
    source: str
    """Where the numbers come from."""
    # Host facts: only the roofline reads them; they sit here so a new GPU is one TOML file.
    sm_count: int = field(metadata=_HOST)
    """Streaming multiprocessors of the GPU (sets the roofline's mfu_half_tokens)."""
    host_dram_Bps: float = field(metadata=_HOST)
    """Peak DRAM bandwidth of the whole host the GPU sits in, bytes per second."""
    gpus_per_host: int = field(metadata=_HOST)
    """GPUs sharing that host DRAM."""
    host_source: str = field(metadata=_HOST)
    """Where sm_count, host_dram_Bps and gpus_per_host come from."""


TABLE_KEYS = ("identity", "hash")
"""How an item id maps to a table row: the item itself, or a deterministic hash into the rows."""


@dataclass(frozen=True)
class EmbTable:
    """One embedding table of a model (DESIGN.md, Embedding tables)."""

    name: str
    """Table name (item, category, seller, ...)."""
    dim: int
    """Embedding dimension."""
    dtype_bytes: int
    """Bytes per element."""
    rows: int = 0
    """Cardinality; 0 = one row per distinct item id (identity key)."""
    per_history_token: int = 1
    """Lookups of this table per history token (0 or 1)."""
    per_candidate: int = 1
    """Lookups of this table per candidate (0 or 1)."""
    key: str = "identity"
    """identity (row = item id) or hash (row = hash(item, table) mod rows)."""

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.dim * self.dtype_bytes


@dataclass(frozen=True)
class ModelProfile:
    """One HSTU-like generative recommender."""

    name: str
    """Profile name."""
    layers: int
    """Transformer (HSTU) layers."""
    d_model: int
    """Hidden size."""
    kv_dtype_bytes: int
    """Bytes per KV element."""
    max_seq_len: int
    """Longest history the model attends to, tokens."""
    n_candidates: int
    """Default candidates scored per request."""
    weights_bytes: int
    """Dense weights resident in HBM, bytes."""
    reserve_bytes: int
    """Activations, workspace and allocator slack kept out of the cache pool, bytes."""
    source: str
    """Where the dimensions come from."""
    tables: tuple[EmbTable, ...]
    """Embedding tables looked up per history token and per candidate."""
    kv_slide_chunk: int = 1
    """Tokens the context start moves by once a history passes max_seq_len (1 = slides per token)."""
    default_slo_ms: float = 100.0
    """P99 SLO used when none is given, ms."""
    slo_source: str = "the ~100 ms budget of an online ranking stage"
    """Where the default SLO comes from."""

    @property
    def token_lookup_bytes(self) -> int:
        """EMB bytes looked up per history token (all tables)."""
        return sum(t.per_history_token * t.row_bytes for t in self.tables)

    @property
    def candidate_lookup_bytes(self) -> int:
        """EMB bytes looked up per candidate (all tables)."""
        return sum(t.per_candidate * t.row_bytes for t in self.tables)

    @property
    def row_bytes(self) -> int:
        """Bytes of the one row a token looks up (single-table models only)."""
        if len(self.tables) != 1:
            raise ProfileError(
                f"model profile {self.name} has {len(self.tables)} tables, so no single row size",
                hint="use token_lookup_bytes or the per-table row_bytes",
            )
        return self.tables[0].row_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V for one token over all layers."""
        return 2 * self.layers * self.d_model * self.kv_dtype_bytes

    @property
    def dense_flops_per_token(self) -> int:
        """Dense FLOPs per token through the stack: layers · 2 · 5d² (HSTU UVQK 4d² + output d²)."""
        return self.layers * 2 * 5 * self.d_model**2

    @property
    def attn_flops_per_pair(self) -> int:
        """Attention FLOPs per (query, key) pair: layers · 4d (QKᵀ and AV)."""
        return self.layers * 4 * self.d_model


@dataclass(frozen=True)
class LatencyProfile:
    """Coefficients of the batch service-time formula (spec v2 §5, ``helm_plan.latency.kernel``).

    ``T(B) = t_launch_s + n_req·t_request_s
    + max(weight_read_s, dense_s_per_token·(X + mfu_half_tokens) + attn_s_per_pair·P)
    + lookup_bytes/hbm_bw_Bps + [miss_bytes > 0]·h2d_latency_s
    + Σ miss_bytes_i/(h2d_bw_Bps·share_i) + miss_bytes/host_gather_Bps``, with ``X`` the
    tokens through the dense stack and ``P`` the attention (query, key) pairs of the batch.
    """

    name: str
    """Profile name."""
    gpu: str
    """GPU profile these coefficients were derived or measured for."""
    model: str
    """Model profile these coefficients were derived or measured for."""
    t_launch_s: float
    """Kernel launches of one forward pass, paid once per batch, seconds."""
    t_request_s: float
    """Host/runtime overhead per request in a batch (input assembly, result scatter), seconds."""
    weight_read_s: float
    """Streaming the dense weights from HBM once per batch (the memory-bound floor), seconds."""
    dense_s_per_token: float
    """Dense-stack time per token at full efficiency (FLOPs per token / (peak·mfu_max)), seconds."""
    mfu_half_tokens: float
    """Tokens at which the dense efficiency X/(X + h) is half its maximum, tokens."""
    attn_s_per_pair: float
    """Attention time per (query, key) pair over all layers, seconds."""
    host_gather_Bps: float
    """Host DRAM gather bandwidth of missed EMB rows into the staging buffer, bytes per second."""
    source: str
    """Derived (roofline) or measured (device, date, tool version)."""
    hbm_bw_Bps: float | None = None
    """Measured EMB gather bandwidth in device memory; None uses the GPU profile, bytes per second."""
    h2d_bw_Bps: float | None = None
    """Measured host-to-device copy bandwidth; None uses the GPU profile, bytes per second."""
    h2d_latency_s: float | None = None
    """Measured fixed latency of one H2D transfer; None uses the GPU profile, seconds."""


def _data_root() -> Path:
    return data_dir("helm_plan._profiles", "profiles")


def available(kind: str) -> list[str]:
    """Names of shipped profiles of ``kind`` (gpu, model, latency)."""
    return sorted(p.stem for p in (_data_root() / kind).glob("*.toml"))


def _load(kind: str, cls: type[T], name_or_path: str | Path) -> T:
    path, data = _read(kind, name_or_path)
    return _build(cls, data, str(path))


def _read(kind: str, name_or_path: str | Path) -> tuple[Path, dict[str, Any]]:
    ref = str(name_or_path)
    path = Path(ref)
    if path.is_dir():
        raise ProfileError(
            f"{kind} profile {ref!r} is a folder",
            hint=f"pass a shipped {kind} profile name or the path of a .toml file",
        )
    if not (ref.endswith(".toml") or path.exists()):
        path = _data_root() / kind / f"{ref}.toml"
        if not path.exists():
            raise ProfileError(
                f"unknown {kind} profile {ref!r}",
                hint=f"shipped: {', '.join(available(kind))}; or pass a path to a .toml file",
            )
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as e:
        raise ProfileError(
            f"{kind} profile file {path} not found",
            hint=f"check the path; shipped: {', '.join(available(kind))}",
        ) from e
    except OSError as e:
        raise ProfileError(
            f"cannot read {kind} profile {path}: {e.strerror}", hint="check the file's permissions"
        ) from e
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(
            f"{kind} profile {path} is not valid TOML: {e}", hint="fix the TOML syntax at that line"
        ) from e
    except UnicodeDecodeError as e:  # tomllib reads UTF-8 text: a binary file ends up here
        raise ProfileError(f"{kind} profile {path} is not UTF-8 text (a binary file?)",
                           hint="pass a TOML profile file") from e  # fmt: skip
    data.setdefault("name", path.stem)
    return path, data


def _build(cls: type[T], data: dict[str, Any], where: str) -> T:
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(k for k in data if k not in fields and not k.startswith("derivation"))
    if unknown:
        raise ProfileError(
            f"{where}: unknown key {unknown[0]!r}", hint=f"valid keys: {', '.join(fields)}"
        )
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            if f.metadata.get("group"):  # name every missing key of the group in one error
                group = f.metadata["group"]
                keys = [k for k, g in fields.items() if g.metadata.get("group") == group]
                gone = ", ".join(repr(k) for k in keys if k not in data)
                raise ProfileError(f"{where}: missing {group} keys {gone}", hint=f.metadata["hint"])
            if f.default is dataclasses.MISSING:
                raise ProfileError(
                    f"{where}: missing key {name!r}",
                    hint=f"add {name} = ... ({_doc(cls, name)}); see the shipped profiles",
                )
            continue
        v = data[name]
        tp = str(f.type)
        if name == "tables":
            pass  # parsed by _model_tables
        elif tp == "str":
            if not isinstance(v, str):
                raise ProfileError(
                    f"{where}: {name} must be a string, got {v!r}", hint=f'write {name} = "..."'
                )
        elif tp == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProfileError(
                    f"{where}: {name} must be an integer, got {v!r}",
                    hint=f"write {name} as a whole number without quotes",
                )
            if v < 0:
                raise ProfileError(
                    f"{where}: {name} must be >= 0, got {v}", hint=f"set {name} >= 0"
                )
        else:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ProfileError(
                    f"{where}: {name} must be a number, got {v!r}",
                    hint=f"write {name} as a number without quotes",
                )
            v = float(v)
            if not 0 <= v < float("inf"):
                raise ProfileError(
                    f"{where}: {name} must be a finite number >= 0, got {v}",
                    hint=f"set {name} to a finite number >= 0",
                )
        kwargs[name] = v
    return cls(**kwargs)


def load_gpu(name_or_path: str | Path) -> GpuProfile:
    """Load a GPU profile by shipped name or path."""
    g = _load("gpu", GpuProfile, name_or_path)
    for k in ("hbm_bytes", "hbm_bw_Bps", "h2d_bw_Bps", "peak_flops", "sm_count", "host_dram_Bps",
              "gpus_per_host"):  # fmt: skip
        if not getattr(g, k) > 0:
            raise ProfileError(
                f"gpu profile {g.name}: {k} must be positive, got {getattr(g, k)}",
                hint=f"set {k} > 0 in the profile",
            )
    return g


_LEGACY_EMB = ("emb_dim", "emb_features_per_token", "emb_dtype_bytes")


def _model_tables(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` with ``tables`` parsed; a legacy single-row profile becomes one identity table."""
    data = dict(data)
    legacy = [k for k in _LEGACY_EMB if k in data]
    if "tables" in data and legacy:
        raise ProfileError(
            f"{where}: give [[tables]] or {', '.join(_LEGACY_EMB)}, not both",
            hint="describe every embedding table under [[tables]]",
        )
    if "tables" not in data:
        if len(legacy) != len(_LEGACY_EMB):
            missing = [k for k in _LEGACY_EMB if k not in data]
            raise ProfileError(
                f"{where}: missing key 'tables'",
                hint=f"add [[tables]] entries (or the legacy {', '.join(missing)})",
            )
        vals = {k: data.pop(k) for k in _LEGACY_EMB}
        for k, v in vals.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ProfileError(
                    f"{where}: {k} must be a positive integer, got {v!r}",
                    hint="set it to a positive integer in the profile",
                )
        data["tables"] = [{"name": "token", "rows": 0,
                           "dim": vals["emb_dim"] * vals["emb_features_per_token"],
                           "dtype_bytes": vals["emb_dtype_bytes"]}]  # fmt: skip
    raw = data["tables"]
    if not isinstance(raw, list) or not raw or not all(isinstance(t, dict) for t in raw):
        raise ProfileError(
            f"{where}: tables must be a non-empty array of tables ([[tables]])",
            hint="add [[tables]] entries to the model profile",
        )
    tables = []
    for i, t in enumerate(raw):
        tw = f"{where} [[tables]] #{i + 1}"
        tab = _build(EmbTable, {"name": f"table{i}", **t}, tw)
        for k in ("dim", "dtype_bytes"):
            if not getattr(tab, k) > 0:
                raise ProfileError(
                    f"{tw}: {k} must be positive, got {getattr(tab, k)}",
                    hint="set it > 0 in the profile's [[tables]]",
                )
        for k in ("per_history_token", "per_candidate"):
            if getattr(tab, k) not in (0, 1):
                raise ProfileError(
                    f"{tw}: {k} must be 0 or 1, got {getattr(tab, k)}",
                    hint="set per_history_token and per_candidate to 0 or 1",
                )
        if tab.key not in TABLE_KEYS:
            raise ProfileError(f"{tw}: unknown key {tab.key!r}", hint="use identity or hash")
        if tab.key == "hash" and tab.rows <= 0:
            raise ProfileError(
                f"{tw}: a hash-keyed table needs rows > 0, got {tab.rows}",
                hint="set rows > 0 for a hash-keyed table",
            )
        tables.append(tab)
    if len({t.name for t in tables}) != len(tables):
        raise ProfileError(
            f"{where}: table names must be unique", hint="rename the duplicate table"
        )
    data["tables"] = tuple(tables)
    return data


def load_model(name_or_path: str | Path) -> ModelProfile:
    """Load a model profile by shipped name or path."""
    path, data = _read("model", name_or_path)
    m = _build(ModelProfile, _model_tables(data, str(path)), str(path))
    for k in ("layers", "d_model", "kv_dtype_bytes", "max_seq_len", "kv_slide_chunk"):
        if not getattr(m, k) > 0:
            raise ProfileError(
                f"model profile {m.name}: {k} must be positive, got {getattr(m, k)}",
                hint=f"set {k} > 0 in the profile",
            )
    if m.kv_slide_chunk > m.max_seq_len:
        raise ProfileError(
            f"model profile {m.name}: kv_slide_chunk {m.kv_slide_chunk} exceeds max_seq_len "
            f"{m.max_seq_len}",
            hint="use a chunk of at most max_seq_len tokens",
        )
    if not m.default_slo_ms > 0:
        raise ProfileError(
            f"model profile {m.name}: default_slo_ms must be positive",
            hint="set default_slo_ms > 0 in the profile",
        )
    return m


def resolve_slo_ms(model: ModelProfile, slo_ms: float | None = None) -> float:
    """The one SLO rule of every command: ``slo_ms`` when given, else the model profile's
    ``default_slo_ms`` (its ``slo_source`` says where that number comes from)."""
    if slo_ms is None:
        return float(model.default_slo_ms)
    if not (slo_ms > 0 and slo_ms < float("inf")):
        raise ProfileError(f"slo_ms must be positive and finite, got {slo_ms}",
                           hint="pass --slo-ms > 0 (milliseconds)")  # fmt: skip
    return float(slo_ms)


def load_latency(name_or_path: str | Path) -> LatencyProfile:
    """Load a latency profile by shipped name or path."""
    return _load("latency", LatencyProfile, name_or_path)


def default_latency_name(gpu: str, model: str) -> str:
    """Shipped latency profile name for a GPU/model pair."""
    return f"{gpu}_{model}"


def _doc(cls: type, name: str) -> str:
    from helm_plan.config import field_docs

    return field_docs(cls).get(name, "see the profile docs").rstrip(".")


def profile_to_dict(
    profile: LatencyProfile, derivation: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A latency profile as a TOML-ready dict (None fields dropped, optional [derivation] table)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(profile):
        v = getattr(profile, f.name)
        if v is not None:
            out[f.name] = v
    if derivation:
        out["derivation"] = derivation
    return out
