"""NodeConfig's validation: each field's exact error and the boundary values it accepts.

Pins :meth:`helm_plan.sim.config.NodeConfig.__post_init__` (issue 16 mutation survivors): the
expected messages are the documented ``problem; fix`` lines (``require_positive`` /
``require_int`` wording, the flag each field maps to), and every boundary is tried on both
sides (``0`` and the smallest value past it).
"""

from __future__ import annotations

import math

import pytest

from helm_plan.errors import ConfigError
from helm_plan.sim.config import NodeConfig


def _err(**kw: object) -> str:
    with pytest.raises(ConfigError) as e:
        NodeConfig(**kw)  # type: ignore[arg-type]
    return e.value.one_line()


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"slo_ms": 0.0}, "slo_ms must be positive, got 0.0; pass --slo-ms > 0"),
        ({"slo_ms": math.inf}, "slo_ms must be finite, got inf; pass --slo-ms > 0, finite"),
        ({"window_s": -1.0}, "window_s must be positive, got -1.0; pass --window-s > 0"),
        ({"slots": 0}, "slots must be a positive integer, got 0"),
        ({"slots": 1.0}, "slots must be a positive integer, got 1.0"),
        (
            {"slots": 49},
            "slots must be at most 48 (a GPU runs at most 48 MPS clients or 7 MIG instances), got 49",
        ),
        ({"batch_max": 0}, "batch_max must be a positive integer, got 0"),
        ({"batch_max": True}, "batch_max must be a positive integer, got True"),
        (
            {"batch_timeout_ms": -1e-9},
            "batch_timeout_ms must be finite and >= 0, got -1e-09; pass --batch-timeout-ms >= 0",
        ),
        (
            {"batch_timeout_ms": math.inf},
            "batch_timeout_ms must be finite and >= 0, got inf; pass --batch-timeout-ms >= 0",
        ),
        (
            {"batch_timeout_ms": math.nan},
            "batch_timeout_ms must be finite and >= 0, got nan; pass --batch-timeout-ms >= 0",
        ),
        ({"batching": "dynamic"}, "unknown batching 'dynamic'; use one of static, continuous"),
        (
            {"refill": "fast"},
            "unknown refill mode 'fast'; use one of lazy, eager, throttled",
        ),
        (
            {"throttle_share": 0.0},
            "throttle_share must be in (0, 1), got 0.0; pass --throttle-share between 0 and 1",
        ),
        (
            {"throttle_share": 1.0},
            "throttle_share must be in (0, 1), got 1.0; pass --throttle-share between 0 and 1",
        ),
        ({"warmup_windows": -1}, "warmup_windows must be an integer >= 0, got -1"),
        ({"warmup_windows": 0.5}, "warmup_windows must be an integer >= 0, got 0.5"),
    ],
)
def test_each_bad_field_has_its_own_error(kw: dict[str, object], msg: str) -> None:
    # the fix part names the field's flag or "set NAME ..."; the problem part is exact
    line = _err(**kw)
    assert line.split("; ")[0] == msg.split("; ")[0]
    if "; " in msg:
        assert line == msg


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"slo_ms": 1e-9, "window_s": 1e-9},
        {"slots": 1, "batch_max": 1},
        {"batch_timeout_ms": 0.0},
        {"batch_timeout_ms": 1e300},
        {"batching": "continuous"},
        {"batching": "static"},
        {"refill": "lazy"},
        {"refill": "eager"},
        {"refill": "throttled"},
        {"throttle_share": 1e-9},
        {"throttle_share": 1 - 1e-9},
        {"warmup_windows": 0},
    ],
)
def test_boundary_values_are_accepted(kw: dict[str, object]) -> None:
    cfg = NodeConfig(**kw)  # type: ignore[arg-type]
    for k, v in kw.items():
        assert getattr(cfg, k) == v


def test_defaults() -> None:
    cfg = NodeConfig()
    assert (cfg.slo_ms, cfg.window_s, cfg.slots, cfg.batch_max) == (
        None,
        10.0,
        1,
        1,
    )  # SLO: the model's
    assert (cfg.batch_timeout_ms, cfg.batching, cfg.refill) == (0.0, "static", "throttled")
    assert (cfg.throttle_share, cfg.warmup_windows) == (0.3, 1)
