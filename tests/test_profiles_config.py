"""Profile loading, pool sizing and config building with precise errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from helm_plan import config, profiles
from helm_plan.errors import ConfigError, ProfileError


def test_shipped_profiles_load_and_derive():
    assert profiles.available("gpu") == ["a100-40g", "a100-80g", "h100-80g", "h200-141g"]
    small = profiles.load_model("gr-small")
    large = profiles.load_model("gr-large")
    assert small.row_bytes == 8 * 128 * 4
    assert small.kv_bytes_per_token == 2 * 4 * 256 * 2
    assert large.row_bytes == 128 * 2
    assert large.kv_bytes_per_token == 2 * 24 * 1024 * 2
    g = profiles.load_gpu("a100-80g")
    assert profiles.pool_bytes(g, small) == 80 * 2**30 - small.weights_bytes - small.reserve_bytes
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
    assert profiles.resolve_pool(g, m, pool_bytes_override=1000).pool_bytes == 1000
    assert profiles.resolve_pool(g, m, pool_fraction=0.5, footprint_bytes=1000).pool_bytes == 500
    with pytest.raises(ProfileError, match="not both"):
        profiles.resolve_pool(g, m, pool_bytes_override=1, pool_fraction=0.5)
    with pytest.raises(ProfileError, match="pool_bytes must be positive, got -3"):
        profiles.resolve_pool(g, m, pool_bytes_override=-3)


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
