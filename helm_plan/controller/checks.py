"""Checks of the controller and label-set files on load: one precise error, never a bad run.

A controller ``.npz`` or a label set is refused with one line naming the file,
the problem and the fix when it is unreadable (missing, truncated, not a zip),
holds pickled objects (never unpickled: ``allow_pickle=False``), lacks an
array, has arrays of the wrong shape or kind, holds NaN or infinite values
where a number is needed, or carries an unparseable card. A controller with
NaN weights would otherwise run and walk the split to a bound; a label set
with a ragged array would fail deep inside PPO.

numpy only (the serving runtime imports this through
:mod:`helm_plan.controller.runtime`).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from helm_plan.controller.features import FEATURE_VERSION
from helm_plan.errors import ConfigError, InputFileError


def read_npz(path: str | Path, what: str, hint: str) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, or InputFileError (``what`` names the kind)."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(f"{what} {p} not found" if not p.exists() else
                             f"{what} {p} is a folder, not a file", hint=hint)  # fmt: skip
    try:
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
        # a truncated or foreign file; ValueError also covers pickled (object) arrays
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputFileError(f"cannot read {p} as a {what}: {reason}", hint=hint) from e


def _numeric(
    a: np.ndarray, source: str, name: str, hint: str, err: type = InputFileError
) -> np.ndarray:
    if not (np.issubdtype(a.dtype, np.number) and not np.issubdtype(a.dtype, np.complexfloating)):
        raise err(f"{source}: {name} holds {a.dtype} values, not numbers", hint=hint)
    return np.asarray(a, np.float64)


def _finite(a: np.ndarray, source: str, name: str, hint: str, err: type = InputFileError) -> None:
    if not np.isfinite(a).all():
        bad = int((~np.isfinite(a)).sum())
        raise err(f"{source}: {name} holds {bad} NaN or infinite values", hint=hint)


CONTROLLER_HINT = "retrain the controller with `helm-plan train`"


def controller_arrays(
    weights: Mapping[str, np.ndarray], shifts: np.ndarray, n_features: int, source: str
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The actor's layers ``(W, b)`` and the shifts, checked: present, 2-D/1-D, chained shapes
    (``n_features`` inputs, one output per shift), numeric and finite; shifts in [-1, 1],
    distinct, with one zero (the hold action), and at most one NaN (the jump to the measured
    curve's optimum). ConfigError names ``source``."""
    hint, err = CONTROLLER_HINT, ConfigError
    n = sum(1 for k in weights if k.startswith("W") and k[1:].isdigit())
    Ws: list[np.ndarray] = []
    bs: list[np.ndarray] = []
    for i in range(max(n, 1)):
        if n == 0 or f"W{i}" not in weights:
            raise err(f"{source}: the actor takes 0 features, feature version {FEATURE_VERSION} "
                      f"has {n_features} (no W{i})", hint=hint)  # fmt: skip
        if np.ndim(weights[f"W{i}"]) != 2:
            raise err(f"{source}: W{i} is {np.ndim(weights[f'W{i}'])}-D, the actor's layers are "
                      "matrices", hint=hint)  # fmt: skip
        if f"b{i}" not in weights:
            raise err(f"{source}: the actor has {n} weight matrices but no b{i}", hint=hint)
        W = _numeric(np.asarray(weights[f"W{i}"]), source, f"W{i}", hint, err)
        b = _numeric(np.asarray(weights[f"b{i}"]), source, f"b{i}", hint, err)
        if i == 0 and W.shape[1] != n_features:
            raise err(f"{source}: the actor takes {W.shape[1]} features, feature version "
                      f"{FEATURE_VERSION} has {n_features}", hint=hint)  # fmt: skip
        if i > 0 and W.shape[1] != Ws[-1].shape[0]:
            raise err(f"{source}: W{i} takes {W.shape[1]} inputs, W{i - 1} gives "
                      f"{Ws[-1].shape[0]}", hint=hint)  # fmt: skip
        if b.shape != (W.shape[0],):
            raise err(f"{source}: b{i} has shape {b.shape}, W{i} needs ({W.shape[0]},)",
                      hint=hint)  # fmt: skip
        _finite(W, source, f"W{i}", hint, err)
        _finite(b, source, f"b{i}", hint, err)
        Ws.append(W)
        bs.append(b)
    s = _numeric(np.asarray(shifts), source, "shifts", hint, err)
    if s.ndim != 1 or len(s) < 2:
        raise err(f"{source}: shifts has shape {s.shape}, the actor needs 2 or more shifts of r",
                  hint=hint)  # fmt: skip
    # one NaN shift is the jump to the measured curve's optimum (controller.runtime); any other
    # non-finite shift is a broken file
    jumps = int(np.isnan(s).sum())
    if jumps > 1 or np.isinf(s).any():
        bad = int((~np.isfinite(s)).sum())
        raise err(f"{source}: shifts holds {bad} NaN or infinite values (one NaN, the jump to the "
                  "curve's optimum, at most)", hint=hint)  # fmt: skip
    if Ws[-1].shape[0] != len(s):
        raise err(f"{source}: the actor has {Ws[-1].shape[0]} actions for {len(s)} shifts",
                  hint=hint)  # fmt: skip
    f = s[np.isfinite(s)]
    if len(f) < 2 or np.abs(f).max() > 1.0 or len(np.unique(f)) != len(f) or not (f == 0.0).any():
        raise err(f"{source}: shifts {s.tolist()} must be distinct shifts of r in [-1, 1], "
                  "one of them 0 (hold)", hint=hint)  # fmt: skip
    return Ws, bs, s


def controller_card(d: Mapping[str, np.ndarray], source: str) -> dict[str, Any]:
    """The controller's JSON card (``{}`` when absent), or InputFileError."""
    if "card" not in d:
        return {}
    try:
        card = json.loads(str(d["card"]))
    except ValueError as e:
        raise InputFileError(f"{source}: its card is not JSON ({e})", hint=CONTROLLER_HINT) from e
    if not isinstance(card, dict):
        raise InputFileError(f"{source}: its card is a JSON {type(card).__name__}, not an object",
                             hint=CONTROLLER_HINT)  # fmt: skip
    return card


LABELS_HINT = "rebuild it with `helm-plan train TRACE... --save-labels FILE`"


def label_trace(kw: dict[str, Any], source: str, n_grid_ghost: int) -> dict[str, Any]:
    """One label trace's fields (arrays as written by ``dataset.save``), checked and converted:
    one row per window in every array, ratios in [0, 1], positive finite scalars, finite
    ghost curves; NaN only where a window without requests leaves it."""
    hint = LABELS_HINT
    out = dict(kw)
    out["name"] = str(kw["name"])
    for f in ("window_s", "slo_ms", "emb_s_per_byte", "kv_s_per_token"):
        a = np.asarray(kw[f])
        if a.shape != () or not np.issubdtype(a.dtype, np.number):
            raise InputFileError(f"{source}: {f} is not a number", hint=hint)
        v = float(a)
        if not (np.isfinite(v) and v > 0):
            raise InputFileError(f"{source}: {f} must be positive and finite, got {v}", hint=hint)
        out[f] = v
    r_star = _numeric(np.asarray(kw["r_star"]), source, "r_star", hint)
    if r_star.ndim != 1 or len(r_star) < 1:
        raise InputFileError(f"{source}: r_star has shape {r_star.shape}, one ratio per window "
                             "is needed", hint=hint)  # fmt: skip
    n_w = len(r_star)
    grid = np.asarray(kw["grid_r"])
    g = grid.shape[1] if grid.ndim == 2 else -1
    shapes = {"arrival": None, "grid_r": (n_w, g), "grid_p99_ms": (n_w, g),
              "grid_emb_hit": (n_w, g), "grid_kv_reuse": (n_w, g), "r_star": (n_w,),
              "p99_star_ms": (n_w,), "flat_lo": (n_w,), "flat_hi": (n_w,),
              "h2d_util_star": (n_w,), "ghost_emb": (n_w, n_grid_ghost),
              "ghost_kv": (n_w, n_grid_ghost), "ghost_lookup_bytes": (n_w,),
              "ghost_ctx_tokens": (n_w,), "grid_slo_att": (n_w, g), "busy_s": (n_w,),
              "gain": (n_w, n_grid_ghost), "sched_r": (n_w,)}  # fmt: skip
    for f, want in shapes.items():
        a = _numeric(np.asarray(kw[f]), source, f, hint)
        if want is None:
            want = (n_w, a.shape[1]) if a.ndim == 2 else (n_w, -1)
        if a.shape != want or g < 1:
            raise InputFileError(f"{source}: {f} has shape {a.shape}, expected {want} "
                                 f"({n_w} windows)", hint=hint)  # fmt: skip
        if np.isinf(a).any():
            raise InputFileError(f"{source}: {f} holds infinite values", hint=hint)
        out[f] = a
    for f in ("grid_r", "ghost_emb", "ghost_kv", "ghost_lookup_bytes", "ghost_ctx_tokens"):
        _finite(out[f], source, f, hint)
    for f in ("slots", "max_seq_len"):
        a = np.asarray(kw[f])
        if a.shape != () or not np.issubdtype(a.dtype, np.integer) or int(a) < 1:
            raise InputFileError(f"{source}: {f} must be a positive count", hint=hint)
        out[f] = int(a)
    ratios = np.concatenate([out["grid_r"].ravel(), r_star[np.isfinite(r_star)]])
    if ratios.size and not (ratios.min() >= 0.0 and ratios.max() <= 1.0):
        raise InputFileError(f"{source}: ratios outside [0, 1] in grid_r or r_star", hint=hint)
    return out
