"""Frozen-dataclass configs: building them from TOML plan files and CLI overrides.

Every stage takes a frozen dataclass config. Fields carry units in their names
and a one-line docstring (the string literal after the field). This module
turns a dict (from a plan file section or CLI flags) into such a config, with
precise errors for unknown keys and wrong types.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from helm_plan.errors import ConfigError

T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any], *, section: str = "") -> T:
    """Build config ``cls`` from ``data``; unknown keys and bad types raise ConfigError."""
    where = f"[{section}] " if section else ""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where}unknown option {unknown[0]!r} for {cls.__name__}",
            hint=f"valid options: {', '.join(sorted(fields))}",
        )
    hints = typing.get_type_hints(cls)
    kwargs = {k: _coerce(v, hints[k], f"{where}{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}{e}", hint=f"fix the {section or cls.__name__} settings") from e


def _coerce(value: Any, tp: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, name)
            except ConfigError as e:
                errors.append(e)
        raise errors[0]
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is bool and isinstance(value, bool):
        return value
    if tp is str and isinstance(value, str):
        return value
    if origin is tuple and isinstance(value, list | tuple):
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, name) for v in value)
    if isinstance(tp, type) and issubclass(tp, Path) and isinstance(value, str | Path):
        return Path(value)
    if isinstance(tp, type) and hasattr(tp, "__members__") and isinstance(value, str):
        try:
            return tp(value)
        except ValueError as e:
            valid = ", ".join(m.value for m in tp)  # type: ignore[attr-defined]
            raise ConfigError(
                f"{name} must be one of {valid}, got {value!r}", hint=f"use one of {valid}"
            ) from e
    if tp is Any:
        return value
    tname = getattr(tp, "__name__", str(tp))
    raise ConfigError(
        f"{name} must be {tname}, got {type(value).__name__} {value!r}",
        hint=f"write {name.split('] ')[-1]} as a TOML {tname}",
    )


def load_plan(path: str | Path) -> dict[str, Any]:
    """Read a TOML plan file into a dict of sections."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as e:
        raise ConfigError(f"plan file {p} not found", hint="check the --config path") from e
    except IsADirectoryError as e:
        raise ConfigError(
            f"plan file {p} is a folder", hint="pass --config the path of a TOML file"
        ) from e
    except OSError as e:
        raise ConfigError(
            f"cannot read plan file {p}: {e.strerror}", hint="check the file's permissions"
        ) from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(
            f"plan file {p} is not valid TOML: {e}", hint="fix the TOML syntax at that line"
        ) from e
    except UnicodeDecodeError as e:  # tomllib reads UTF-8 text: a binary file ends up here
        raise ConfigError(f"plan file {p} is not UTF-8 text (a binary file?)",
                          hint="pass --config the path of a TOML file") from e  # fmt: skip


def field_docs(cls: type) -> dict[str, str]:
    """Map each field of a config dataclass to its one-line docstring."""
    import ast
    import inspect
    import textwrap

    src = textwrap.dedent(inspect.getsource(cls))
    body = ast.parse(src).body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for prev, node in zip(body, body[1:], strict=False):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = node.value.value.strip()
    return docs


#: Config fields a CLI option sets under a different name.
_RENAMED_FLAGS = {
    "grid_step": "--grid",
    "holdout_fraction": "--holdout",
    "n_candidates": "--candidates",
}
#: Config fields that are also CLI options named ``--field-name``.
_FLAG_FIELDS = frozenset(
    [
        "window_s",
        "slo_ms",
        "qps",
        "duration_s",
        "session_gap_s",
        "sample_rate",
        "sample_size",
        "scale",
        "trials",
        "seed",
        "workers",
        "warmup_windows",
        "slots",
        "throttle_share",
        "ratio",
        "pool_bytes",
        "pool_fraction",
        "zipf_alpha",
        "users",
        "items",
        "candidates",
        "max_seq_len",
        "replicate",
        "layers",
        "d_model",
        "threads",
        "repeats",
        "refill",
        "nodes",
        "max_nodes",
        "attainment",
    ]
)


def fix_for(name: str, want: str) -> str:
    """The fix part of an error about field ``name``: ``pass --flag WANT``, or ``set name WANT``.

    Plan files use the field names, which the problem part of the message names.

    ``want`` says what a valid value is, e.g. ``"> 0"`` or ``"in [0, 1]"``.
    """
    flag = _RENAMED_FLAGS.get(name) or (
        f"--{name.replace('_', '-')}" if name in _FLAG_FIELDS else None
    )
    if flag is None:
        return f"set {name} {want}"
    return f"pass {flag} {want}"


def require_positive(name: str, value: float) -> None:
    """Raise ConfigError unless ``value`` is a finite number > 0 (Optuna-style message)."""
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"{name} must be a number, got nan", hint=fix_for(name, "> 0"))
    if not value > 0:
        raise ConfigError(f"{name} must be positive, got {value}", hint=fix_for(name, "> 0"))
    if isinstance(value, float) and math.isinf(value):
        raise ConfigError(f"{name} must be finite, got {value}", hint=fix_for(name, "> 0, finite"))


def require_range(name: str, value: float, lo: float, hi: float) -> None:
    """Raise ConfigError unless lo <= value <= hi."""
    if not lo <= value <= hi:
        raise ConfigError(
            f"{name} must be in [{lo}, {hi}], got {value}", hint=fix_for(name, f"in [{lo}, {hi}]")
        )


def require_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    """Raise ConfigError unless ``value`` is an integer (not a bool) in ``[lo, hi]``."""
    want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    what = "a positive integer" if lo == 1 and hi is None else f"an integer {want}"
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be {what}, got {value!r}", hint=fix_for(name, what))
    if value < lo or (hi is not None and value > hi):
        raise ConfigError(f"{name} must be {what}, got {value}", hint=fix_for(name, want))


def require_at_most(name: str, value: int, hi: int, reason: str) -> None:
    """Raise ConfigError when ``value`` > ``hi``, saying why (``reason``) there is a bound."""
    if value > hi:
        raise ConfigError(f"{name} must be at most {hi:,} ({reason}), got {value:,}",
                          hint=fix_for(name, f"<= {hi}"))  # fmt: skip


Progress = Callable[[int, int], None]
"""Progress callback of a long stage: ``progress(done, total)``."""
