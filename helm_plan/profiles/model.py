"""Model profiles: an HSTU-like recommender's stack, embedding tables and default SLO."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helm_plan.errors import ProfileError
from helm_plan.profiles.loading import _build, _read

DEFAULT_MODEL = "gr-small"
"""Model profile every command uses when none is given."""
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
