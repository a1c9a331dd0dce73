"""Reading a profile: a shipped name or a TOML path, each field checked against its dataclass.

The three kinds (:mod:`.gpu`, :mod:`.model`, :mod:`.latency`) share this reader and
validator, so every profile fails with the same precise errors; its underscored names are
for them only. ``_build`` checks a field by its annotation as text (``"int"``, ``"str"``), so
a module that defines a profile dataclass keeps ``from __future__ import annotations``.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from helm_plan._data import data_dir
from helm_plan.errors import ProfileError

T = TypeVar("T")


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


def _doc(cls: type, name: str) -> str:
    from helm_plan.config import field_docs

    return field_docs(cls).get(name, "see the profile docs").rstrip(".")
