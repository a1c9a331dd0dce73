"""Profile loading, pool sizing and config building with precise errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from helm_plan import config, pool, profiles
from helm_plan.errors import ConfigError, ProfileError
from helm_plan.profiles import load_model


def test_shipped_profiles_load_and_derive():
    assert profiles.available("gpu") == ["a100-40g", "a100-80g", "h100-80g", "h200-141g"]
    small = profiles.load_model("gr-small")
    large = profiles.load_model("gr-large")
    assert small.token_lookup_bytes == 4 * 256 * 4 and small.candidate_lookup_bytes == 3 * 256 * 4
    assert small.kv_bytes_per_token == 2 * 4 * 256 * 2
    assert large.row_bytes == 128 * 2 and large.kv_slide_chunk == 1024
    assert large.kv_bytes_per_token == 2 * 24 * 1024 * 2
    g = profiles.load_gpu("a100-80g")
    assert pool.pool_bytes(g, small) == 80 * 2**30 - small.weights_bytes - small.reserve_bytes
    for name in profiles.available("gpu"):
        assert "source" in profiles.load_gpu(name).__dataclass_fields__


def test_unknown_and_bad_profiles(tmp_path: Path):
    with pytest.raises(ProfileError, match="unknown gpu profile 'b200'") as ei:
        profiles.load_gpu("b200")
    assert "a100-80g" in ei.value.hint
    p = tmp_path / "mine.toml"
    p.write_text('source = "x"\nhbm_bytes = "lots"\n')
    with pytest.raises(ProfileError, match="hbm_bytes must be an integer"):
        profiles.load_gpu(p)
    p.write_text('source = "x"\nhbm_bytes = 1\n')
    with pytest.raises(ProfileError, match="missing key 'hbm_bw_Bps'"):
        profiles.load_gpu(p)
    p.write_text("hbm_bytes = [")
    with pytest.raises(ProfileError, match="not valid TOML"):
        profiles.load_gpu(p)


def test_user_profile_path(tmp_path: Path):
    src = Path(str(profiles._data_root())) / "gpu" / "a100-80g.toml"
    p = tmp_path / "my-gpu.toml"
    p.write_text(src.read_text().replace("cost_per_hour = 1.79", "cost_per_hour = 0.5"))
    g = profiles.load_gpu(p)
    assert g.name == "my-gpu" and g.cost_per_hour == 0.5


def test_resolve_pool():
    g, m = profiles.load_gpu("a100-80g"), profiles.load_model("gr-small")
    assert pool.resolve_pool(g, m, pool_bytes_override=1000).pool_bytes == 1000
    assert pool.resolve_pool(g, m, pool_fraction=0.5, footprint_bytes=1000).pool_bytes == 500
    with pytest.raises(ProfileError, match="not both"):
        pool.resolve_pool(g, m, pool_bytes_override=1, pool_fraction=0.5)
    with pytest.raises(ProfileError, match="pool_bytes must be positive, got -3"):
        pool.resolve_pool(g, m, pool_bytes_override=-3)


def test_a_pool_larger_than_the_gpu_leaves_is_rejected():
    g, m = profiles.load_gpu("a100-80g"), profiles.load_model("gr-small")
    room = g.hbm_bytes - m.weights_bytes - m.reserve_bytes  # what `profiles` lists
    assert pool.resolve_pool(g, m, pool_bytes_override=room).pool_bytes == room
    with pytest.raises(ProfileError, match="exceeds what a100-80g leaves") as ei:
        pool.resolve_pool(g, m, pool_bytes_override=room + 1)
    assert "smaller --pool-bytes" in ei.value.hint
    with pytest.raises(ProfileError, match=r"from --pool-fraction 1e\+06 of the input trace"):
        pool.resolve_pool(g, m, pool_fraction=1e6, footprint_bytes=10**9)
    with pytest.raises(ProfileError, match="positive and finite"):
        pool.resolve_pool(g, m, pool_fraction=float("inf"), footprint_bytes=10**9)


def test_profile_and_plan_paths_that_are_folders(tmp_path: Path):
    with pytest.raises(ProfileError, match="is a folder") as ei:
        profiles.load_gpu(tmp_path)
    assert ei.value.hint
    with pytest.raises(ConfigError, match="is a folder"):
        config.load_plan(tmp_path)


def test_numbers_must_be_finite_and_errors_carry_the_flag():
    with pytest.raises(ConfigError, match="window_s must be finite, got inf") as ei:
        config.require_positive("window_s", float("inf"))
    assert ei.value.hint == "pass --window-s > 0, finite"
    with pytest.raises(ConfigError, match="must be a number, got nan"):
        config.require_positive("qps", float("nan"))
    with pytest.raises(ConfigError, match="grid_step must be in") as ei:
        config.require_range("grid_step", 2.0, 0.0, 1.0)
    assert ei.value.hint.startswith("pass --grid in [0.0, 1.0]")
    with pytest.raises(ConfigError, match="block_tokens must be positive") as ei:
        config.require_positive("block_tokens", 0)
    assert ei.value.hint == "set block_tokens > 0"  # not a CLI option: no flag named
    with pytest.raises(ConfigError, match="seed must be an integer >= 0, got -1"):
        config.require_int("seed", -1, 0)
    with pytest.raises(ConfigError, match="workers must be an integer >= 0, got True"):
        config.require_int("workers", True, 0)


@dataclass(frozen=True)
class _Cfg:
    window_s: float = 60.0
    """Window length, seconds."""
    trials: int = 30
    """Optuna trials per window."""
    grid_step: float | None = None
    """Grid step instead of Optuna."""


def test_from_dict_and_docs():
    c = config.from_dict(_Cfg, {"window_s": 30, "grid_step": 0.1})
    assert c == _Cfg(30.0, 30, 0.1)
    with pytest.raises(ConfigError, match=r"\[oracle\] unknown option 'trails'"):
        config.from_dict(_Cfg, {"trails": 3}, section="oracle")
    with pytest.raises(ConfigError, match="trials must be int, got str"):
        config.from_dict(_Cfg, {"trials": "many"})
    assert config.field_docs(_Cfg)["window_s"] == "Window length, seconds."
    with pytest.raises(ConfigError, match="window must be positive, got -3"):
        config.require_positive("window", -3)


MODEL_BASE = """
layers = 2
d_model = 64
kv_dtype_bytes = 2
max_seq_len = 512
n_candidates = 16
weights_bytes = 1000
reserve_bytes = 1000
source = "test"
"""


def test_model_tables_and_derived_sizes(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(
        MODEL_BASE
        + """
kv_slide_chunk = 64
default_slo_ms = 25.0
[[tables]]
name = "item"
dim = 128
dtype_bytes = 4
[[tables]]
name = "category"
rows = 1000
dim = 32
dtype_bytes = 2
per_candidate = 0
key = "hash"
"""
    )
    m = load_model(p)
    assert [t.name for t in m.tables] == ["item", "category"]
    assert m.tables[1].key == "hash" and m.tables[1].rows == 1000
    assert m.token_lookup_bytes == 128 * 4 + 32 * 2
    assert m.candidate_lookup_bytes == 128 * 4
    assert m.kv_bytes_per_token == 2 * 2 * 64 * 2
    assert m.dense_flops_per_token == 2 * 2 * 5 * 64 * 64
    assert m.attn_flops_per_pair == 2 * 4 * 64
    assert m.kv_slide_chunk == 64 and m.default_slo_ms == 25.0
    with pytest.raises(ProfileError, match="has 2 tables"):
        _ = m.row_bytes


def test_legacy_single_row_profile_is_one_identity_table(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(MODEL_BASE + "emb_dim = 16\nemb_features_per_token = 3\nemb_dtype_bytes = 2\n")
    m = load_model(p)
    assert len(m.tables) == 1 and m.tables[0].key == "identity" and m.tables[0].rows == 0
    assert m.row_bytes == 16 * 3 * 2 == m.token_lookup_bytes == m.candidate_lookup_bytes
    assert m.kv_slide_chunk == 1  # legacy profiles keep the per-token sliding window


@pytest.mark.parametrize(
    ("extra", "msg"),
    [
        ("", "missing key 'tables'"),
        ("emb_dim = 16\n", "missing key 'tables'"),
        ("[[tables]]\nname='a'\ndim=0\ndtype_bytes=4\n", "dim must be positive"),
        ("[[tables]]\nname='a'\ndim=8\ndtype_bytes=4\nkey='hash'\n", "needs rows > 0"),
        ("[[tables]]\nname='a'\ndim=8\ndtype_bytes=4\nkey='mod'\n", "unknown key 'mod'"),
        ("[[tables]]\nname='a'\ndim=8\ndtype_bytes=4\nper_candidate=2\n", "must be 0 or 1"),
        (
            "[[tables]]\nname='a'\ndim=8\ndtype_bytes=4\n[[tables]]\nname='a'\ndim=8\ndtype_bytes=4\n",
            "names must be unique",
        ),
        (
            "kv_slide_chunk = 0\n[[tables]]\nname='a'\ndim=8\ndtype_bytes=4\n",
            "kv_slide_chunk must be positive",
        ),
    ],
)
def test_bad_tables_are_precise_errors(tmp_path, extra, msg):
    p = tmp_path / "m.toml"
    # top-level keys must precede the tables array
    head, _, tables = extra.partition("[[tables]]")
    p.write_text(MODEL_BASE + head + ("[[tables]]" + tables if tables else ""))
    with pytest.raises(ProfileError, match=msg):
        load_model(p)
