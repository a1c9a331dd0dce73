"""`helm-plan profiles`: shipped GPU and model profiles and their derived sizes."""

from __future__ import annotations

import dataclasses
import json

import typer
from helm_plan_cli.options import JsonOpt
from helm_plan_cli.progress import out_console
from rich.table import Table

from helm_plan.profiles import available, load_gpu, load_model, pair_sizes


def _gib(b: int) -> str:
    return f"{b / (1 << 30):,.2f}"


def profiles_command(as_json: JsonOpt = False) -> None:
    """List GPU and model profiles, and the cache pool, row and KV sizes of each pair."""
    gpus = [load_gpu(n) for n in available("gpu")]
    models = [load_model(n) for n in available("model")]
    pairs = pair_sizes()
    if as_json:
        obj = {
            "gpus": [dataclasses.asdict(g) for g in gpus],
            "models": [
                {
                    **dataclasses.asdict(m),
                    "row_bytes": m.row_bytes,
                    "kv_bytes_per_token": m.kv_bytes_per_token,
                }
                for m in models
            ],
            "pairs": [dataclasses.asdict(p) for p in pairs],
        }
        typer.echo(json.dumps(obj, indent=2))
        return
    t = Table(title="GPU profiles")
    for c in ("gpu", "HBM GiB", "HBM TB/s", "H2D GB/s", "H2D lat us", "TFLOP/s", "$/h"):
        t.add_column(c, justify="left" if c == "gpu" else "right")
    for g in gpus:
        t.add_row(
            g.name, _gib(g.hbm_bytes), f"{g.hbm_bw_Bps / 1e12:.2f}", f"{g.h2d_bw_Bps / 1e9:.1f}",
            f"{g.h2d_latency_s * 1e6:.1f}", f"{g.peak_flops / 1e12:.0f}", f"{g.cost_per_hour:.2f}",
        )  # fmt: skip
    out_console.print(t)
    t = Table(title="Model profiles")
    for c in ("model", "layers", "d_model", "max_seq_len", "cands", "row_bytes", "kv B/token"):
        t.add_column(c, justify="left" if c == "model" else "right")
    for m in models:
        t.add_row(
            m.name, str(m.layers), str(m.d_model), f"{m.max_seq_len:,}", f"{m.n_candidates:,}",
            f"{m.row_bytes:,}", f"{m.kv_bytes_per_token:,}",
        )  # fmt: skip
    out_console.print(t)
    t = Table(title="Cache pool per pair (hbm - weights - reserve)")
    for c in ("gpu", "model", "pool GiB", "pool rows", "pool KV tokens", "user KV MiB @max"):
        t.add_column(c, justify="left" if c in ("gpu", "model") else "right")
    for p in pairs:
        t.add_row(
            p.gpu, p.model, _gib(p.pool_bytes), f"{p.pool_rows:,}", f"{p.pool_kv_tokens:,}",
            f"{p.max_user_kv_bytes / (1 << 20):,.1f}",
        )  # fmt: skip
    out_console.print(t)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("profiles")(profiles_command)
